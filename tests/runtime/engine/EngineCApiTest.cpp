// The engine through the C header: concurrent requests decode as a session does, failures carry
// their dlm_status_code, a cancel token stops a request, statistics read back.
#include "dlm/dlm.h"

#include "tests/runtime/model/TinyModel.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

extern "C" long dlm_test_engine_generate_from_c(const char *artifact, char *error,
                                                size_t error_size);

namespace {

using dlm::testing::TempDir;
using dlm::testing::TinyModel;

dlm_request *makeRequest(int i) {
  dlm_request *request = nullptr;
  EXPECT_EQ(dlm_request_create(&request), nullptr);
  std::vector<int32_t> prompt;
  for (int t = 0; t < 2 + i % 5; ++t)
    prompt.push_back(static_cast<int32_t>(2 + (i * 5 + t * 3) % 30));
  dlm_request_set_prompt_ids(request, prompt.data(), prompt.size());
  dlm_request_set_knob_int(request, "gen_length", 8);
  dlm_request_set_knob_int(request, "block_length", 4);
  dlm_request_set_knob_int(request, "steps", 8);
  dlm_request_set_seed(request, static_cast<uint64_t>(i));
  return request;
}

std::vector<int32_t> outputOf(dlm_result *result) {
  const int32_t *ids = nullptr;
  const size_t count = dlm_result_output_ids(result, &ids);
  return std::vector<int32_t>(ids, ids + count);
}

class EngineCApiTest : public ::testing::Test {
protected:
  void SetUp() override {
    TinyModel(dlm::testing::TinyModelOptions{}).write(dir.file("tiny.dlm"));
    dlm_status status = dlm_model_open(dir.file("tiny.dlm").c_str(), &model);
    ASSERT_EQ(status, nullptr) << dlm_status_message(status);
  }
  void TearDown() override { dlm_model_close(model); }

  dlm_engine *engine(int64_t kvPages, int64_t maxRunning = 0) {
    dlm_engine_options options;
    dlm_engine_options_init(&options);
    EXPECT_EQ(options.batch_invariant, 0); // the default: the session's kernels
    options.session.threads = 2;
    options.session.kv_page_tokens = 4;
    options.session.kv_pages = kvPages;
    options.tokens_per_forward = 64;
    options.max_running = maxRunning;
    options.batch_invariant = 1;
    dlm_engine *engine = nullptr;
    dlm_status status = dlm_engine_create(model, &options, &engine);
    EXPECT_EQ(status, nullptr) << dlm_status_message(status);
    return engine;
  }

  TempDir dir;
  dlm_model *model = nullptr;
};

TEST_F(EngineCApiTest, GeneratesFromC) {
  char error[512] = "";
  EXPECT_EQ(dlm_test_engine_generate_from_c(dir.file("tiny.dlm").c_str(), error, sizeof error),
            8)
      << error;
}

TEST_F(EngineCApiTest, ConcurrentRequestsDecodeAsASessionDoes) {
  constexpr int kRequests = 8;
  dlm_session_options sessionOptions;
  dlm_session_options_init(&sessionOptions);
  sessionOptions.threads = 2;
  dlm_session *session = nullptr;
  ASSERT_EQ(dlm_session_create(model, &sessionOptions, &session), nullptr);
  std::vector<std::vector<int32_t>> alone;
  for (int i = 0; i < kRequests; ++i) {
    dlm_request *request = makeRequest(i);
    dlm_result *result = nullptr;
    ASSERT_EQ(dlm_session_generate(session, request, nullptr, nullptr, &result), nullptr);
    alone.push_back(outputOf(result));
    dlm_result_destroy(result);
    dlm_request_destroy(request);
  }
  dlm_session_destroy(session);

  dlm_engine *shared = engine(/*kvPages=*/12); // room for two or three requests at once
  ASSERT_NE(shared, nullptr);
  std::vector<std::vector<int32_t>> together(kRequests);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i)
    threads.emplace_back([&, i] {
      dlm_request *request = makeRequest(i);
      dlm_result *result = nullptr;
      dlm_status status = dlm_engine_generate(shared, request, nullptr, nullptr, nullptr, &result);
      EXPECT_EQ(status, nullptr) << dlm_status_message(status);
      together[i] = outputOf(result);
      dlm_result_destroy(result);
      dlm_request_destroy(request);
    });
  for (std::thread &t : threads)
    t.join();
  // The session's kernels are not the batch-invariant ones: their sums differ in the last bits,
  // which changes no pick of this model's decode.
  for (int i = 0; i < kRequests; ++i)
    EXPECT_EQ(together[i], alone[i]) << "request " << i;
  dlm_engine_stats stats;
  dlm_engine_get_stats(shared, &stats);
  EXPECT_EQ(stats.admitted, kRequests);
  EXPECT_EQ(stats.kv_pages, 12);
  EXPECT_EQ(stats.kv_pages_reserved, 0);
  EXPECT_GT(stats.fed_tokens, 0);
  EXPECT_GE(stats.forwards, stats.runs);
  dlm_engine_destroy(shared);
}

TEST_F(EngineCApiTest, FailuresCarryTheirCode) {
  dlm_engine *small = engine(/*kvPages=*/2);
  ASSERT_NE(small, nullptr);
  dlm_request *request = makeRequest(3);
  dlm_result *result = nullptr;
  dlm_status status = dlm_engine_generate(small, request, nullptr, nullptr, nullptr, &result);
  ASSERT_NE(status, nullptr);
  EXPECT_EQ(dlm_status_get_code(status), DLM_STATUS_CONTEXT_LENGTH_EXCEEDED);
  EXPECT_STREQ(dlm_status_message(status),
               "the request needs 4 KV pages of 4 tokens; the pool has 2");
  dlm_status_free(status);
  EXPECT_EQ(dlm_status_get_code(nullptr), DLM_STATUS_OK);

  dlm_cancel_token *cancel = dlm_cancel_token_create();
  dlm_cancel_token_cancel(cancel);
  dlm_engine *roomy = engine(/*kvPages=*/64);
  status = dlm_engine_generate(roomy, request, nullptr, nullptr, cancel, &result);
  ASSERT_NE(status, nullptr);
  EXPECT_EQ(dlm_status_get_code(status), DLM_STATUS_CANCELLED) << dlm_status_message(status);
  dlm_status_free(status);

  dlm_engine_shutdown(roomy);
  status = dlm_engine_generate(roomy, request, nullptr, nullptr, nullptr, &result);
  ASSERT_NE(status, nullptr);
  EXPECT_EQ(dlm_status_get_code(status), DLM_STATUS_UNAVAILABLE);
  dlm_status_free(status);
  EXPECT_EQ(result, nullptr);
  dlm_cancel_token_destroy(cancel);
  dlm_request_destroy(request);
  dlm_engine_destroy(roomy);
  dlm_engine_destroy(small);
}

} // namespace
