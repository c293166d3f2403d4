// The serving engine (runtime/engine/Engine.h): requests generate()d from many threads at once,
// in different phases and with different settings, each get exactly what a one-request Session
// on a batch-invariant backend gives them, and the runs packed several of them.
#include "runtime/engine/Engine.h"

#include "tests/runtime/model/TinyModel.h"

#include <gtest/gtest.h>

#include <thread>

namespace dlm::engine {
namespace {

using dlm::testing::TempDir;
using dlm::testing::TinyModel;

GenerateRequest request(int i) {
  GenerateRequest r;
  for (int t = 0; t < 2 + 3 * (i % 4); ++t)
    r.promptIds.push_back(static_cast<int32_t>(2 + (i * 7 + t * 3) % 30));
  r.knobs["gen_length"] = int64_t(8);
  r.knobs["block_length"] = int64_t(4);
  r.knobs["steps"] = int64_t(i % 3 == 0 ? 4 : 8);
  if (i % 2)
    r.cache = sampling::CacheMode::prefix;
  r.seed = static_cast<uint64_t>(i);
  return r;
}

TEST(Engine, ConcurrentRequestsGetWhatTheyGetAlone) {
  TempDir dir;
  TinyModel tiny{dlm::testing::TinyModelOptions{}};
  tiny.write(dir.file("tiny.dlm"));
  StatusOr<std::shared_ptr<LoadedModel>> model = LoadedModel::open(dir.file("tiny.dlm"));
  ASSERT_TRUE(model) << model.status().message();
  constexpr int kRequests = 8;

  SessionOptions single;
  single.batchInvariant = true;
  single.threads = 2;
  StatusOr<std::unique_ptr<Session>> session = Session::create(*model, single);
  ASSERT_TRUE(session) << session.status().message();
  std::vector<std::vector<int32_t>> alone;
  for (int i = 0; i < kRequests; ++i) {
    StatusOr<GenerateResult> out = (*session)->generate(request(i));
    ASSERT_TRUE(out) << out.status().message();
    alone.push_back(out->outputIds);
  }

  EngineOptions options;
  options.session.threads = 2;
  options.session.kvPages = 256;
  options.session.kvPageTokens = 4;
  options.tokensPerForward = 64;
  StatusOr<std::unique_ptr<Engine>> engine = Engine::create(*model, options);
  ASSERT_TRUE(engine) << engine.status().message();
  std::vector<std::vector<int32_t>> together(kRequests);
  std::vector<std::string> errors(kRequests);
  std::vector<int64_t> blocks(kRequests, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i)
    threads.emplace_back([&, i] {
      StatusOr<GenerateResult> out =
          (*engine)->generate(request(i), [&](const StreamedBlock &) { ++blocks[i]; });
      if (out)
        together[i] = out->outputIds;
      else
        errors[i] = out.status().message();
    });
  for (std::thread &t : threads)
    t.join();
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_EQ(errors[i], "") << "request " << i;
    EXPECT_EQ(together[i], alone[i]) << "request " << i;
    EXPECT_EQ(blocks[i], 2) << "request " << i << ": committed blocks streamed";
  }
  EXPECT_GT((*engine)->stats().mostPerRun, 1);
}

TEST(Engine, ABadRequestFailsAloneByName) {
  TempDir dir;
  TinyModel tiny{dlm::testing::TinyModelOptions{}};
  tiny.write(dir.file("tiny.dlm"));
  StatusOr<std::shared_ptr<LoadedModel>> model = LoadedModel::open(dir.file("tiny.dlm"));
  ASSERT_TRUE(model) << model.status().message();
  StatusOr<std::unique_ptr<Engine>> engine = Engine::create(*model);
  ASSERT_TRUE(engine) << engine.status().message();
  GenerateRequest bad = request(1);
  bad.knobs["gen_length"] = int64_t(7); // not a multiple of block_length
  StatusOr<GenerateResult> out = (*engine)->generate(bad);
  ASSERT_FALSE(out);
  EXPECT_NE(out.status().message().find("gen_length"), std::string::npos)
      << out.status().message();
  // The engine still serves.
  EXPECT_TRUE((*engine)->generate(request(2)));
}

} // namespace
} // namespace dlm::engine
