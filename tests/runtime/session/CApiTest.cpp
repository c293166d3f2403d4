// The C API end to end on a tiny artifact, through the header alone.
#include "dlm/dlm.h"

#include "tests/runtime/model/TinyModel.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

extern "C" long dlm_test_generate_from_c(const char *artifact, char *error, size_t error_size);

namespace {

using dlm::testing::TempDir;
using dlm::testing::TinyModel;

struct Collected {
  std::vector<int64_t> blocks;
  std::vector<int32_t> ids;
};

void collect(void *user, int64_t block, const int32_t *ids, size_t count, const char *, size_t) {
  auto *c = static_cast<Collected *>(user);
  c->blocks.push_back(block);
  c->ids.insert(c->ids.end(), ids, ids + count);
}

TEST(CApiTest, GeneratesThroughTheCHeader) {
  TempDir dir;
  dlm::testing::TinyModelOptions options;
  options.eosTokenIds = {};
  TinyModel(options).write(dir.file("tiny.dlm"));
  EXPECT_EQ(dlm_api_version(), DLM_API_VERSION);

  dlm_model *model = nullptr;
  dlm_status status = dlm_model_open(dir.file("tiny.dlm").c_str(), &model);
  ASSERT_EQ(status, nullptr) << dlm_status_message(status);
  EXPECT_EQ(dlm_model_vocab_size(model), 40);
  EXPECT_EQ(dlm_model_mask_token_id(model), 39);

  dlm_session_options sessionOptions;
  dlm_session_options_init(&sessionOptions);
  sessionOptions.threads = 2;
  dlm_session *session = nullptr;
  ASSERT_EQ(dlm_session_create(model, &sessionOptions, &session), nullptr);

  dlm_request *request = nullptr;
  ASSERT_EQ(dlm_request_create(&request), nullptr);
  const int32_t prompt[] = {3, 4, 5};
  dlm_request_set_prompt_ids(request, prompt, 3);
  dlm_request_set_knob_int(request, "gen_length", 8);
  dlm_request_set_knob_int(request, "block_length", 4);
  dlm_request_set_knob_int(request, "steps", 4);
  dlm_request_set_knob_double(request, "threshold", 0.5);
  // A threshold block runs as many steps as it needs; the explicit cap bounds it at 2.
  dlm_request_set_knob_int(request, "step_cap", 2);
  dlm_request_set_seed(request, 3);
  dlm_request_set_knob_string(request, "cache", "prefix");

  Collected collected;
  dlm_result *result = nullptr;
  status = dlm_session_generate(session, request, collect, &collected, &result);
  ASSERT_EQ(status, nullptr) << dlm_status_message(status);
  const int32_t *ids = nullptr;
  const size_t count = dlm_result_output_ids(result, &ids);
  EXPECT_EQ(count, 8u);
  EXPECT_EQ(std::vector<int32_t>(ids, ids + count), collected.ids);
  EXPECT_EQ(collected.blocks, (std::vector<int64_t>{0, 1}));
  const int32_t *promptIds = nullptr;
  EXPECT_EQ(dlm_result_prompt_ids(result, &promptIds), 3u);
  EXPECT_STREQ(dlm_result_text(result), "");
  dlm_stats stats;
  dlm_result_stats(result, &stats);
  EXPECT_GE(stats.forwards, 2);
  EXPECT_LE(stats.forwards, 4);
  EXPECT_EQ(stats.generated_tokens, 8);
  EXPECT_GE(stats.seconds, 0.0);

  dlm_result_destroy(result);
  dlm_request_destroy(request);
  dlm_session_destroy(session);
  dlm_model_close(model);
}

TEST(CApiTest, ErrorsCarryTheirMessage) {
  TempDir dir;
  dlm_model *model = nullptr;
  dlm_status status = dlm_model_open(dir.file("missing.dlm").c_str(), &model);
  ASSERT_NE(status, nullptr);
  EXPECT_NE(std::string(dlm_status_message(status)).find("missing.dlm"), std::string::npos);
  EXPECT_EQ(model, nullptr);
  dlm_status_free(status);

  TinyModel({}).write(dir.file("tiny.dlm"));
  ASSERT_EQ(dlm_model_open(dir.file("tiny.dlm").c_str(), &model), nullptr);
  dlm_session_options options;
  dlm_session_options_init(&options);
  options.backend = "cuda";
  dlm_session *session = nullptr;
  status = dlm_session_create(model, &options, &session);
  ASSERT_NE(status, nullptr);
  // Without a driver (these machines) the driver's absence is the error; with one, the backend.
  std::string message = dlm_status_message(status);
  EXPECT_TRUE(message.rfind("CUDA driver not available: libcuda.so.1", 0) == 0 ||
              message.rfind("cuBLASLt not available", 0) == 0 ||
              message.rfind("artifact has no CUDA kernels", 0) == 0)
      << message;
  dlm_status_free(status);

  options.backend = "cpu";
  ASSERT_EQ(dlm_session_create(model, &options, &session), nullptr);
  dlm_request *request = nullptr;
  ASSERT_EQ(dlm_request_create(&request), nullptr);
  dlm_result *result = nullptr;
  status = dlm_session_generate(session, request, nullptr, nullptr, &result);
  ASSERT_NE(status, nullptr);
  EXPECT_STREQ(dlm_status_message(status), "empty prompt");
  EXPECT_EQ(result, nullptr);
  dlm_status_free(status);

  // The cache mode is a knob like any other, held to the program's choices when the request runs.
  const int32_t prompt[] = {3, 4, 5};
  dlm_request_set_prompt_ids(request, prompt, 3);
  dlm_request_set_knob_string(request, "cache", "triple");
  status = dlm_session_generate(session, request, nullptr, nullptr, &result);
  ASSERT_NE(status, nullptr);
  EXPECT_STREQ(dlm_status_message(status),
               "unknown cache mode 'triple' (expected none, prefix or dual)");
  EXPECT_EQ(result, nullptr);
  dlm_status_free(status);

  dlm_request_destroy(request);
  dlm_session_destroy(session);
  dlm_model_close(model);
}

TEST(CApiTest, UsableFromC) {
  TempDir dir;
  dlm::testing::TinyModelOptions options;
  options.eosTokenIds = {};
  TinyModel(options).write(dir.file("tiny.dlm"));
  char error[256] = "";
  EXPECT_EQ(dlm_test_generate_from_c(dir.file("tiny.dlm").c_str(), error, sizeof error), 8)
      << error;
  EXPECT_EQ(dlm_test_generate_from_c(dir.file("absent.dlm").c_str(), error, sizeof error), -1);
  EXPECT_NE(std::string(error).find("absent.dlm"), std::string::npos);
}

} // namespace
