// LLaDA2.x against the independent plain-PyTorch reference (tests/reference/llada2/: SGLang
// 0.5.23's model math, block-causal attention over blocks of 8 from position 0, and diffusers
// 0.42.1's LLaDA2Pipeline decoding loop, greedy). dlmc compiles the fixture checkpoint as
// published (fused query_key_value, partial rotary, QK norm, a dense layer then sigmoid-routed,
// group-limited experts with an expert bias, routed scaling and a shared expert) with
// --block-length 8.
//   - Forwards: the recorded windows go through dlm's forward whole and block by block over the KV
//     cache (how decoding feeds them), and every logit row must match: relative error
//     ||a - b|| / ||b|| <= 1e-4 over the whole [T, V] tensor, and the same argmax on every row.
//   - Decoding: the block-refinement program's canvas after every step is the pipeline's, and its
//     output the pipeline's sequence cut after its first EOS, for the greedy run and the LLaDA2.1
//     editing run (whose edits change decoded tokens and end the request at an EOS they write).
// On the CPU and, where the build has it, the emulated CUDA device (--target all --precision
// f32: the generated kernels compute in float32).
#include "tests/runtime/e2e/BlockCausalChecks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace dlm {
namespace {

using testing::ids;
using testing::NpyArray;

constexpr double kFloat32Bound = 1e-4;
constexpr int64_t kBlock = 8; // the fixture's block_length

class LLaDA2ReferenceTest : public ::testing::TestWithParam<const char *> {
protected:
  void SetUp() override {
    fixture_.open(std::string(DLM_REFERENCE_FIXTURES) + "/llada2/fixtures/llada2_tiny",
                  "--block-length " + std::to_string(kBlock), GetParam());
  }

  testing::CompiledFixture fixture_;
};

// The pipeline's first window (prompt + masks) and the greedy run's final canvas.
TEST_P(LLaDA2ReferenceTest, WholeWindowsMatchTheReference) {
  for (const char *name : {"window", "final_canvas"})
    testing::expectWholeWindowMatches(fixture_, name, kFloat32Bound, GetParam());
}

TEST_P(LLaDA2ReferenceTest, BlocksOverTheCacheMatchTheReference) {
  testing::expectBlocksOverTheCacheMatch(fixture_, kBlock, kFloat32Bound, GetParam());
}

// The sequence cut after its first EOS (1), as the pipeline's text is.
std::vector<int32_t> cutAfterEos(std::vector<int32_t> sequence) {
  auto eos = std::find(sequence.begin(), sequence.end(), 1);
  if (eos != sequence.end())
    sequence.erase(eos + 1, sequence.end());
  return sequence;
}

// trace.json's runs: gen_length 21, 4 steps per block, threshold 0.7.
artifact::Attributes runKnobs() {
  return {{"gen_length", int64_t{21}}, {"steps_per_block", int64_t{4}}, {"threshold", 0.7}};
}

TEST_P(LLaDA2ReferenceTest, GreedyDecodingFollowsThePipelineStepByStep) {
  testing::StepWindows windows;
  StatusOr<sampling::DecodeOutcome> out =
      testing::decodeBlockRefinement(fixture_, runKnobs(), windows);
  ASSERT_TRUE(out) << out.status().message();
  testing::expectSameSteps(fixture_.replay("greedy_canvas"), windows, /*skipIdle=*/true);
  EXPECT_EQ(out->outputIds, cutAfterEos(ids(fixture_.replay("greedy_sequence"))));
}

// LLaDA2.1's editing: edits start while masks remain, and an edit writes the EOS that ends the
// request with masks left in the block.
TEST_P(LLaDA2ReferenceTest, EditingDecodingFollowsThePipelineStepByStep) {
  artifact::Attributes knobs = runKnobs();
  knobs["editing_threshold"] = 0.5;
  knobs["max_post_steps"] = int64_t{4};
  testing::StepWindows windows;
  StatusOr<sampling::DecodeOutcome> out = testing::decodeBlockRefinement(fixture_, knobs, windows);
  ASSERT_TRUE(out) << out.status().message();
  testing::expectSameSteps(fixture_.replay("editing_canvas"), windows, /*skipIdle=*/false);
  EXPECT_EQ(out->outputIds, cutAfterEos(ids(fixture_.replay("editing_sequence"))));
  EXPECT_EQ(out->outputIds.back(), 1) << "the edit's EOS ends the output";
}

INSTANTIATE_TEST_SUITE_P(Backends, LLaDA2ReferenceTest,
                         ::testing::ValuesIn(testing::fixtureBackends()),
                         [](const auto &info) { return testing::backendTestName(info.param); });

} // namespace
} // namespace dlm
