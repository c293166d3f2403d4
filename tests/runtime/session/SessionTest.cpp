#include "runtime/session/Session.h"

#include "tests/runtime/model/TinyModel.h"

#include <gtest/gtest.h>

namespace dlm {
namespace {

using dlm::testing::TempDir;
using dlm::testing::TinyModel;
using dlm::testing::TinyModelOptions;

class SessionTest : public ::testing::Test {
protected:
  std::shared_ptr<LoadedModel> open(TinyModelOptions options = {}) {
    TinyModel(std::move(options)).write(dir.file("tiny.dlm"));
    StatusOr<std::shared_ptr<LoadedModel>> model = LoadedModel::open(dir.file("tiny.dlm"));
    EXPECT_TRUE(model.isOk()) << model.status().message();
    return model ? *model : nullptr;
  }

  std::unique_ptr<Session> session(std::shared_ptr<LoadedModel> model) {
    SessionOptions options;
    options.threads = 2;
    StatusOr<std::unique_ptr<Session>> created = Session::create(std::move(model), options);
    EXPECT_TRUE(created.isOk()) << created.status().message();
    return created ? std::move(*created) : nullptr;
  }

  static GenerateRequest request(std::vector<int32_t> prompt = {3, 4, 5}) {
    GenerateRequest r;
    r.promptIds = std::move(prompt);
    r.knobs["gen_length"] = int64_t(8);
    r.knobs["block_length"] = int64_t(4);
    r.knobs["steps"] = int64_t(8);
    return r;
  }

  static TinyModelOptions withoutEos(bool causal = false) {
    TinyModelOptions options;
    options.eosTokenIds = {};
    options.causal = causal;
    return options;
  }

  TempDir dir;
};

TEST_F(SessionTest, GeneratesAndStreamsEveryBlock) {
  std::unique_ptr<Session> s = session(open(withoutEos()));
  std::vector<int32_t> streamed;
  std::vector<int64_t> indices;
  StatusOr<GenerateResult> result = s->generate(request(), [&](const StreamedBlock &block) {
    indices.push_back(block.index);
    streamed.insert(streamed.end(), block.ids, block.ids + block.count);
  });
  ASSERT_TRUE(result.isOk()) << result.status().message();
  EXPECT_EQ(result->outputIds.size(), 8u);
  EXPECT_EQ(streamed, result->outputIds);
  EXPECT_EQ(indices, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(result->stats.forwards, 8);
  EXPECT_EQ(result->stats.generatedTokens, 8);
  EXPECT_EQ(result->promptIds, (std::vector<int32_t>{3, 4, 5}));
  for (int32_t id : result->outputIds) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 40);
    EXPECT_NE(id, 39); // the mask token is never an output
  }
}

TEST_F(SessionTest, SameSeedSameTokensAndSessionsAreReusable) {
  std::unique_ptr<Session> s = session(open());
  GenerateRequest r = request();
  r.knobs["temperature"] = 1.5;
  r.seed = 11;
  StatusOr<GenerateResult> a = s->generate(r);
  StatusOr<GenerateResult> b = s->generate(r);
  ASSERT_TRUE(a.isOk() && b.isOk());
  EXPECT_EQ(a->outputIds, b->outputIds);
}

TEST_F(SessionTest, PrefixCacheEqualsNoCacheOnACausalModel) {
  // With causal attention the prefix K/V never depend on later tokens: the cache is exact.
  std::unique_ptr<Session> s = session(open(withoutEos(/*causal=*/true)));
  GenerateRequest r = request();
  StatusOr<GenerateResult> none = s->generate(r);
  r.knobs["cache"] = std::string("prefix");
  StatusOr<GenerateResult> prefix = s->generate(r);
  ASSERT_TRUE(none.isOk() && prefix.isOk()) << prefix.status().message();
  EXPECT_EQ(none->outputIds, prefix->outputIds);
  EXPECT_EQ(none->stats.forwards, prefix->stats.forwards);
}

TEST_F(SessionTest, ArtifactKnobsAreTheDefaults) {
  TinyModelOptions options;
  options.eosTokenIds = {};
  options.policy = "entropy-bound";
  options.knobs["gen_length"] = int64_t(4);
  options.knobs["block_length"] = int64_t(4);
  options.knobs["max_steps"] = int64_t(3);
  std::unique_ptr<Session> s = session(open(options));
  GenerateRequest r;
  r.promptIds = {7, 8};
  StatusOr<GenerateResult> result = s->generate(r);
  ASSERT_TRUE(result.isOk()) << result.status().message();
  EXPECT_EQ(result->policy, "entropy-bound");
  EXPECT_EQ(std::get<int64_t>(result->knobs.at("max_steps")), 3);
  EXPECT_EQ(result->outputIds.size(), 4u);
  EXPECT_LE(result->stats.forwards, 3);
}

TEST_F(SessionTest, CapturedLogitsCoverTheWholeFirstForward) {
  std::unique_ptr<Session> s = session(open());
  GenerateRequest r = request();
  r.captureFirstLogits = true;
  StatusOr<GenerateResult> result = s->generate(r);
  ASSERT_TRUE(result.isOk());
  EXPECT_EQ(result->firstLogitRows, 11);
  EXPECT_EQ(result->vocabSize, 40);
  EXPECT_EQ(result->firstLogits.size(), 11u * 40u);
}

TEST_F(SessionTest, RequestErrorsAreNamed) {
  std::unique_ptr<Session> s = session(open());
  auto message = [&](GenerateRequest r) { return s->generate(r).status().message(); };

  EXPECT_EQ(message(request({})), "empty prompt");
  GenerateRequest text = request();
  text.promptText = "hello";
  EXPECT_EQ(message(text), "a text prompt needs a tokenizer; the artifact has none");

  EXPECT_EQ(message(request(std::vector<int32_t>(125, 3))),
            "prompt too long: 125 prompt tokens and 8 to generate need 133 positions; the model "
            "allows 128");
  GenerateRequest uneven = request();
  uneven.knobs["gen_length"] = int64_t(10);
  EXPECT_EQ(message(uneven), "gen_length 10 is not a positive multiple of block_length 4");
  GenerateRequest steps = request();
  steps.knobs["steps"] = int64_t(5);
  EXPECT_EQ(message(steps), "steps 5 is not divisible by the number of blocks 2");
  GenerateRequest policy = request();
  policy.knobs["policy"] = std::string("top-p");
  EXPECT_EQ(message(policy), "unknown policy 'top-p' (expected low-confidence or entropy-bound)");
  GenerateRequest knob = request();
  knob.knobs["temprature"] = 1.0;
  EXPECT_EQ(message(knob).rfind("unknown knob 'temprature' for the decode program "
                                 "'low-confidence' (its knobs: gen_length, block_length, steps, "
                                 "temperature,",
                                 0),
            0u)
      << message(knob);
}

TEST_F(SessionTest, BackendsAreChosenByName) {
  std::shared_ptr<LoadedModel> model = open();
  SessionOptions cuda;
  cuda.backend = "cuda";
  // Without a driver (these machines) the driver's absence is the error; with one, the backend.
  std::string cudaMessage = Session::create(model, cuda).status().message();
  EXPECT_TRUE(cudaMessage.rfind("CUDA driver not available: libcuda.so.1", 0) == 0 ||
              cudaMessage.rfind("cuBLASLt not available", 0) == 0 ||
              cudaMessage.rfind("artifact has no CUDA kernels", 0) == 0)
      << cudaMessage;
  SessionOptions emulated;
  emulated.backend = "cuda-emu";
  // The emulated device exists everywhere; this artifact carries CPU kernels only.
  EXPECT_EQ(Session::create(model, emulated).status().message(),
            "artifact has no CUDA kernels; compile it with --target cuda or all");
  SessionOptions other;
  other.backend = "tpu";
  EXPECT_EQ(Session::create(model, other).status().message(),
            "unknown backend 'tpu' (expected cpu, cuda or cuda-emu)");
  StatusOr<std::unique_ptr<Session>> cpu = Session::create(model);
  ASSERT_TRUE(cpu.isOk());
  EXPECT_EQ((*cpu)->backend().name(), "cpu");
  EXPECT_EQ((*cpu)->backend().apiVersion(), kBackendApiVersion);
}

TEST_F(SessionTest, OpenNamesAMissingFile) {
  StatusOr<std::shared_ptr<LoadedModel>> model = LoadedModel::open(dir.file("absent.dlm"));
  ASSERT_FALSE(model.isOk());
  EXPECT_NE(model.status().message().find("absent.dlm"), std::string::npos);
}

} // namespace
} // namespace dlm
