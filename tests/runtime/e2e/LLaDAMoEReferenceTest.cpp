// LLaDA-MoE against its independent plain-PyTorch reference (tests/reference/llada_moe/: the
// Hugging Face remote code's math, checked against that code). dlmc compiles the fixture
// checkpoint as published (Hugging Face names, QK norm, partial rotary, GQA, a dense layer, then
// softmax top-2 experts without renormalisation and a layer-level shared expert; the mask token
// from the tokenizer). The first forward of the recorded greedy run (prompt and 16 masks,
// bidirectional) must match the reference's logits (relative error <= 1e-4, every row's argmax),
// and dlm's low-confidence program the run's output (dlm's LLaDA sampler reference on the
// reference model: gen_length 16, block_length 8, steps 4, greedy). On the CPU and, where the
// build has it, the emulated CUDA device.
#include "tests/runtime/e2e/CompiledFixture.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dlm {
namespace {

using testing::ids;
using testing::NpyArray;

class LLaDAMoEReferenceTest : public ::testing::TestWithParam<const char *> {
protected:
  void SetUp() override {
    fixture_.open(std::string(DLM_REFERENCE_FIXTURES) + "/llada_moe/fixtures/llada_moe_tiny", "",
                  GetParam());
  }

  testing::CompiledFixture fixture_;
};

TEST_P(LLaDAMoEReferenceTest, TheFirstForwardMatchesTheReference) {
  const std::vector<int32_t> tokens = ids(fixture_.replay("window_ids"));
  const int64_t count = static_cast<int64_t>(tokens.size());
  ASSERT_TRUE(fixture_.backend().reserve(count, count).isOk());
  StatusOr<sampling::LogitsView> logits = fixture_.backend().forward(sampling::ForwardSpec::of(
      sampling::ForwardSpec::Mode::full, tokens.data(), count, 0, {0, count}));
  ASSERT_TRUE(logits) << logits.status().message();
  testing::expectLogitRowsMatch(*logits, fixture_.replay("window_logits"), 0, 1e-4,
                                std::string("window on ") + GetParam());
}

TEST_P(LLaDAMoEReferenceTest, GreedyLowConfidenceDecodesTheReferenceRun) {
  const std::vector<int32_t> settings = ids(fixture_.replay("greedy_settings"));
  ASSERT_EQ(settings.size(), 3u); // gen_length, block_length, steps
  StatusOr<sampling::DecodeOutcome> out =
      fixture_.decode("low-confidence", ids(fixture_.replay("prompt_ids")),
                      {{"gen_length", int64_t{settings[0]}},
                       {"block_length", int64_t{settings[1]}},
                       {"steps", int64_t{settings[2]}},
                       {"temperature", 0.0}});
  ASSERT_TRUE(out) << out.status().message();
  EXPECT_EQ(out->outputIds, ids(fixture_.replay("greedy_output_ids")));
}

INSTANTIATE_TEST_SUITE_P(Backends, LLaDAMoEReferenceTest,
                         ::testing::ValuesIn(testing::fixtureBackends()),
                         [](const auto &info) { return testing::backendTestName(info.param); });

} // namespace
} // namespace dlm
