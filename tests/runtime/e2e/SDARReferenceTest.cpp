// SDAR's block diffusion against its independent plain-PyTorch reference (tests/reference/sdar/:
// modeling_sdar.py's inference math, checked against SDAR's own code, and SDAR's
// block_diffusion_generate, greedy as its evaluation decodes). dlmc compiles the fixture
// checkpoint as published (SDARForCausalLM, block_size 4, mask_token_id in config.json, the stop
// ids in generation_config.json) without --block-length: the artifact attends by blocks of 4 and
// decodes with block-refinement, low_confidence_dynamic as `threshold`, low_confidence_static as
// threshold 1 (no probability exceeds it).
//   - Forwards: the recorded windows whole and block by block over the KV cache: relative error
//     <= 1e-4 over the [T, V] logits and the same argmax on every row.
//   - Decoding: every step's block is the reference's canvas, and the output its sequence (cut
//     after the first stop id), for the static runs at 4 and 2 steps, the dynamic run, and the
//     run whose stop id comes mid-block; the forwards are the reference's less the last block's
//     K/V store, which dlm skips.
// On the CPU and, where the build has it, the emulated CUDA device.
#include "tests/runtime/e2e/BlockCausalChecks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace dlm {
namespace {

using testing::ids;

constexpr double kFloat32Bound = 1e-4;
constexpr int64_t kBlock = 4; // config.json's block_size
// The reference generates to the canvas's end: gen_length 16 after a 14-token prompt fills 8
// blocks, 18 tokens; dlm generates gen_length, so it is asked for those 18.
constexpr int64_t kGenerated = 18;

class SDARReferenceTest : public ::testing::TestWithParam<const char *> {
protected:
  void SetUp() override {
    fixture_.open(std::string(DLM_REFERENCE_FIXTURES) + "/sdar/fixtures/sdar_tiny", "", GetParam());
  }

  // The reference run `run` decoded with `knobs`: its steps, its sequence cut after the first of
  // `stops`, and its forwards less one.
  void expectRun(const std::string &run, artifact::Attributes knobs, int64_t referenceForwards,
                 const std::vector<int64_t> &stops = {2, 1}) {
    knobs["gen_length"] = kGenerated;
    fixture_.facts().eosTokenIds = stops;
    testing::StepWindows windows;
    StatusOr<sampling::DecodeOutcome> out =
        testing::decodeBlockRefinement(fixture_, knobs, windows);
    ASSERT_TRUE(out) << out.status().message();
    testing::expectSameSteps(fixture_.replay(run + "_canvas"), windows, /*skipIdle=*/false);
    std::vector<int32_t> want = ids(fixture_.replay(run + "_sequence"));
    auto stop = std::find_if(want.begin(), want.end(), [&](int32_t id) {
      return std::count(stops.begin(), stops.end(), id) > 0;
    });
    if (stop != want.end())
      want.erase(stop + 1, want.end());
    EXPECT_EQ(out->outputIds, want);
    EXPECT_EQ(out->forwards, referenceForwards - 1);
  }

  testing::CompiledFixture fixture_;
};

TEST_P(SDARReferenceTest, WholeWindowsMatchTheReference) {
  for (const char *name : {"window", "final_canvas"})
    testing::expectWholeWindowMatches(fixture_, name, kFloat32Bound, GetParam());
}

TEST_P(SDARReferenceTest, BlocksOverTheCacheMatchTheReference) {
  testing::expectBlocksOverTheCacheMatch(fixture_, kBlock, kFloat32Bound, GetParam());
}

TEST_P(SDARReferenceTest, StaticRemaskingFollowsTheReferenceStepByStep) {
  expectRun("static", {{"steps_per_block", int64_t{4}}, {"threshold", 1.0}}, 24);
  expectRun("static_steps2", {{"steps_per_block", int64_t{2}}, {"threshold", 1.0}}, 15);
}

TEST_P(SDARReferenceTest, DynamicRemaskingFollowsTheReferenceStepByStep) {
  expectRun("dynamic", {{"steps_per_block", int64_t{4}}, {"threshold", 0.5}}, 19);
}

// A stop id committed mid-block: SDAR finishes the block and stops after it (eos_early_stop off
// does the same); its text ends at the stop id.
TEST_P(SDARReferenceTest, AStopIdEndsDecodingAfterItsBlock) {
  expectRun("stop",
            {{"steps_per_block", int64_t{4}}, {"threshold", 1.0}, {"eos_early_stop", false}}, 19,
            {2, 1, 113});
}

INSTANTIATE_TEST_SUITE_P(Backends, SDARReferenceTest,
                         ::testing::ValuesIn(testing::fixtureBackends()),
                         [](const auto &info) { return testing::backendTestName(info.param); });

} // namespace
} // namespace dlm
