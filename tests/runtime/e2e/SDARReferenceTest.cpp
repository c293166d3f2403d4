// SDAR's block diffusion against independent references (tests/reference/sdar/): sdar_tiny
// (SDARForCausalLM) against a plain-PyTorch forward of modeling_sdar.py's inference math, checked
// against SDAR's own code; sdar_moe_tiny (SDARMoeForCausalLM) against transformers 5.23's
// Qwen3MoeForCausalLM under a block-causal mask; both decoded by SDAR's block_diffusion_generate,
// greedy as its evaluation decodes. dlmc compiles each checkpoint as published (block_size 4 and
// mask_token_id in config.json, the stop ids in generation_config.json) without --block-length:
// the artifact attends by blocks of 4 and decodes with block-refinement, low_confidence_dynamic as
// `threshold`, low_confidence_static as threshold 1 (no probability exceeds it).
//   - Forwards: the recorded windows whole and block by block over the KV cache: relative error
//     <= 1e-4 over the [T, V] logits and the same argmax on every row.
//   - Decoding: every step's block is the reference's canvas, and the output its sequence (cut
//     after the first stop id), for the static runs at 4 and 2 steps, the dynamic run, the
//     sequential run (`remasking` sequential; sdar_tiny's), the run whose stop id comes
//     mid-block and a request shorter than a block's steps; the forwards are
//     the reference's less the last block's K/V store, which dlm skips.
// On the CPU and, where the build has it, the emulated CUDA device.
#include "tests/runtime/e2e/BlockCausalChecks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

namespace dlm {
namespace {

using testing::ids;

constexpr double kFloat32Bound = 1e-4;
constexpr int64_t kBlock = 4; // config.json's block_size
// The references generate to the canvas's end: gen_length 16 after a 14-token prompt fills 8
// blocks, 18 tokens; dlm generates gen_length, so it is asked for those 18.
constexpr int64_t kGenerated = 18;

// A fixture's runs as its trace.json records them: the dynamic run's threshold, the forwards of
// each run, the stop run's extra stop id.
struct SdarFixture {
  const char *name;
  double dynamicThreshold;
  int64_t staticForwards, staticSteps2Forwards, dynamicForwards, stopForwards;
  int64_t stopId;
};

constexpr SdarFixture kFixtures[] = {
    {"sdar_tiny", 0.5, 24, 15, 19, 19, 113},
    {"sdar_moe_tiny", 0.55, 24, 15, 20, 19, 61},
};
// sdar_tiny's sequential run (sdar_moe_tiny records none): its forwards.
constexpr int64_t kSequentialForwards = 24;

using Param = std::tuple<SdarFixture, const char *>;

class SDARReferenceTest : public ::testing::TestWithParam<Param> {
protected:
  void SetUp() override {
    fixture_.open(std::string(DLM_REFERENCE_FIXTURES) + "/sdar/fixtures/" + sdar().name, "",
                  backendName());
  }

  const SdarFixture &sdar() const { return std::get<0>(GetParam()); }
  const char *backendName() const { return std::get<1>(GetParam()); }

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
    testing::expectWholeWindowMatches(fixture_, name, kFloat32Bound, backendName());
}

TEST_P(SDARReferenceTest, BlocksOverTheCacheMatchTheReference) {
  testing::expectBlocksOverTheCacheMatch(fixture_, kBlock, kFloat32Bound, backendName());
}

TEST_P(SDARReferenceTest, StaticRemaskingFollowsTheReferenceStepByStep) {
  expectRun("static", {{"steps_per_block", int64_t{4}}, {"threshold", 1.0}}, sdar().staticForwards);
  expectRun("static_steps2", {{"steps_per_block", int64_t{2}}, {"threshold", 1.0}},
            sdar().staticSteps2Forwards);
}

TEST_P(SDARReferenceTest, DynamicRemaskingFollowsTheReferenceStepByStep) {
  expectRun("dynamic", {{"steps_per_block", int64_t{4}}, {"threshold", sdar().dynamicThreshold}},
            sdar().dynamicForwards);
}

// A stop id committed mid-block: SDAR finishes the block and stops after it (eos_early_stop off
// does the same); its text ends at the stop id.
TEST_P(SDARReferenceTest, AStopIdEndsDecodingAfterItsBlock) {
  expectRun("stop",
            {{"steps_per_block", int64_t{4}}, {"threshold", 1.0}, {"eos_early_stop", false}},
            sdar().stopForwards, {2, 1, sdar().stopId});
}

// Two tokens, fewer than a block's 4 steps: SDAR's loop still takes its quota of one a step (the
// artifact's minimal_topk 0; diffusers' bound would commit two at once), so the request is the
// static run's first block: its first two steps and tokens.
TEST_P(SDARReferenceTest, AShortRequestKeepsTheBlocksSteps) {
  testing::StepWindows windows;
  StatusOr<sampling::DecodeOutcome> out = testing::decodeBlockRefinement(
      fixture_, {{"gen_length", int64_t{2}}, {"threshold", 1.0}}, windows);
  ASSERT_TRUE(out) << out.status().message();
  const testing::NpyArray canvases = fixture_.replay("static_canvas");
  const int64_t width = canvases.shape.back();
  ASSERT_EQ(windows.size(), 2u);
  for (size_t r = 0; r < windows.size(); ++r) {
    const auto &[begin, window] = windows[r];
    for (size_t i = 0; i < window.size(); ++i)
      EXPECT_EQ(window[i], canvases.at<int32_t>(static_cast<int64_t>(r) * width + begin +
                                                static_cast<int64_t>(i)))
          << "step " << r << ", position " << begin + static_cast<int64_t>(i);
  }
  const std::vector<int32_t> sequence = ids(fixture_.replay("static_sequence"));
  EXPECT_EQ(out->outputIds, std::vector<int32_t>(sequence.begin(), sequence.begin() + 2));
}

INSTANTIATE_TEST_SUITE_P(FixturesAndBackends, SDARReferenceTest,
                         ::testing::Combine(::testing::ValuesIn(kFixtures),
                                            ::testing::ValuesIn(testing::fixtureBackends())),
                         [](const ::testing::TestParamInfo<Param> &info) {
                           return std::string(std::get<0>(info.param).name) + "_" +
                                  testing::backendTestName(std::get<1>(info.param));
                         });

// SDAR's sequential remasking, on the fixture that records it.
class SDARSequentialTest : public SDARReferenceTest {};

TEST_P(SDARSequentialTest, SequentialRemaskingFollowsTheReferenceStepByStep) {
  expectRun("sequential",
            {{"steps_per_block", int64_t{4}}, {"remasking", std::string("sequential")}},
            kSequentialForwards);
}

INSTANTIATE_TEST_SUITE_P(Backends, SDARSequentialTest,
                         ::testing::Combine(::testing::Values(kFixtures[0]),
                                            ::testing::ValuesIn(testing::fixtureBackends())),
                         [](const ::testing::TestParamInfo<Param> &info) {
                           return testing::backendTestName(std::get<1>(info.param));
                         });

} // namespace
} // namespace dlm
