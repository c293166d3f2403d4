// LLaDA2.x against the independent plain-PyTorch reference (tests/reference/llada2/: SGLang
// 0.5.23's model math, block-causal attention over blocks of 8 from position 0, and diffusers
// 0.42.1's LLaDA2Pipeline decoding loop, greedy). dlmc compiles the fixture checkpoint as
// published (fused query_key_value, partial rotary, QK norm, a dense layer then sigmoid-routed,
// group-limited experts with an expert bias, routed scaling and a shared expert) with
// --block-length 8.
//   - Forwards: the recorded windows go through dlm's forward whole and block by block over the KV
//     cache (how decoding feeds them), and every logit row must match: relative error
//     ||a - b|| / ||b|| <= 1e-4 over the whole [T, V] tensor, and the same argmax on every row.
//   - Decoding: the llada2 program's canvas after every step is the pipeline's, and its output
//     the pipeline's sequence cut after its first EOS, for the greedy run and the LLaDA2.1 editing
//     run (whose edits change decoded tokens and end the request at an EOS they write).
// On the CPU and, where the build has it, the emulated CUDA device (--target all --precision
// f32: the generated kernels compute in float32).
#include "tests/runtime/e2e/CompiledFixture.h"

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

  NpyArray replay(const std::string &name) const { return fixture_.replay(name); }
  Backend &backend() { return fixture_.backend(); }
  void expectRowsMatch(const sampling::LogitsView &got, const NpyArray &want, int64_t first,
                       const std::string &what) {
    testing::expectLogitRowsMatch(got, want, first, kFloat32Bound,
                                  what + " on " + std::string(GetParam()));
  }

  // The llada2 program's run on the fixture's prompt with `knobs`, the window after every step
  // (after its eos_stop, the step's last write) kept in `windows` with the block's begin.
  StatusOr<sampling::DecodeOutcome>
  decode(const artifact::Attributes &knobs,
         std::vector<std::pair<int64_t, std::vector<int32_t>>> &windows) {
    program::ProgramTestHooks hooks;
    hooks.afterRecord = [&](std::string_view kind, const program::RegisterView &registers) {
      if (kind == "eos_stop")
        windows.emplace_back(registers.integer("begin"), registers.window());
    };
    return fixture_.decode("llada2", ids(replay("prompt_ids")), knobs, &hooks);
  }

  testing::CompiledFixture fixture_;
};

using Mode = sampling::ForwardSpec::Mode;

// The pipeline's first window (prompt + masks) and the greedy run's final canvas, each in one
// forward from position 0: the block-causal mask keeps every block from seeing later ones.
TEST_P(LLaDA2ReferenceTest, WholeWindowsMatchTheReference) {
  for (const char *name : {"window", "final_canvas"}) {
    const std::vector<int32_t> tokens = ids(replay(std::string(name) + "_ids"));
    const NpyArray want = replay(std::string(name) + "_logits");
    const int64_t count = static_cast<int64_t>(tokens.size());
    ASSERT_TRUE(backend().reserve(count, count).isOk());
    StatusOr<sampling::LogitsView> logits = backend().forward(
        sampling::ForwardSpec::of(Mode::full, tokens.data(), count, 0, {0, count}));
    ASSERT_TRUE(logits) << logits.status().message();
    ASSERT_EQ(logits->rows, count);
    expectRowsMatch(*logits, want, 0, name);
  }
}

// The final canvas block by block, as decoding feeds it: each block appended over the K/V the
// earlier blocks left in the cache, and a cached (uncommitted) forward of the last block.
TEST_P(LLaDA2ReferenceTest, BlocksOverTheCacheMatchTheReference) {
  const std::vector<int32_t> tokens = ids(replay("final_canvas_ids"));
  const NpyArray want = replay("final_canvas_logits");
  const int64_t count = static_cast<int64_t>(tokens.size());
  ASSERT_EQ(count % kBlock, 0);
  ASSERT_TRUE(backend().reserve(count, kBlock).isOk());
  StatusOr<sampling::LogitsView> first = backend().forward(
      sampling::ForwardSpec::of(Mode::full, tokens.data(), kBlock, kBlock, {0, kBlock}));
  ASSERT_TRUE(first) << first.status().message();
  expectRowsMatch(*first, want, 0, "block 0 (full)");
  for (int64_t begin = kBlock; begin < count; begin += kBlock) {
    const bool last = begin + kBlock == count;
    StatusOr<sampling::LogitsView> logits = backend().forward(sampling::ForwardSpec::of(
        last ? Mode::cached : Mode::append, tokens.data(), begin + kBlock, begin, {0, kBlock}));
    ASSERT_TRUE(logits) << logits.status().message();
    expectRowsMatch(*logits, want, begin,
                    "block " + std::to_string(begin / kBlock) + (last ? " (cached)" : " (append)"));
  }
}

// The pipeline's canvases after its steps ([steps, 32]) against the windows dlm's steps left: the
// same steps, each window the canvas's block. Without editing dlm skips the pipeline's steps that
// change nothing (after a block's masks are gone it runs no further forward); `skipIdle` drops
// those rows of the trace.
void expectSameSteps(const NpyArray &canvases,
                     const std::vector<std::pair<int64_t, std::vector<int32_t>>> &windows,
                     bool skipIdle) {
  const int64_t width = canvases.shape.back();
  std::vector<std::vector<int32_t>> steps;
  for (int64_t r = 0; r < canvases.shape.front(); ++r) {
    std::vector<int32_t> canvas;
    for (int64_t i = 0; i < width; ++i)
      canvas.push_back(canvases.at<int32_t>(r * width + i));
    if (!(skipIdle && !steps.empty() && canvas == steps.back()))
      steps.push_back(std::move(canvas));
  }
  ASSERT_EQ(windows.size(), steps.size()) << "steps";
  for (size_t r = 0; r < steps.size(); ++r) {
    const auto &[begin, window] = windows[r];
    ASSERT_LE(begin + static_cast<int64_t>(window.size()), width) << "step " << r;
    const std::vector<int32_t> want(steps[r].begin() + begin,
                                    steps[r].begin() + begin + static_cast<int64_t>(window.size()));
    EXPECT_EQ(window, want) << "step " << r << " (block at " << begin << ")";
  }
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
  std::vector<std::pair<int64_t, std::vector<int32_t>>> windows;
  StatusOr<sampling::DecodeOutcome> out = decode(runKnobs(), windows);
  ASSERT_TRUE(out) << out.status().message();
  expectSameSteps(replay("greedy_canvas"), windows, /*skipIdle=*/true);
  EXPECT_EQ(out->outputIds, cutAfterEos(ids(replay("greedy_sequence"))));
}

// LLaDA2.1's editing: edits start while masks remain, and an edit writes the EOS that ends the
// request with masks left in the block.
TEST_P(LLaDA2ReferenceTest, EditingDecodingFollowsThePipelineStepByStep) {
  artifact::Attributes knobs = runKnobs();
  knobs["editing_threshold"] = 0.5;
  knobs["max_post_steps"] = int64_t{4};
  std::vector<std::pair<int64_t, std::vector<int32_t>>> windows;
  StatusOr<sampling::DecodeOutcome> out = decode(knobs, windows);
  ASSERT_TRUE(out) << out.status().message();
  expectSameSteps(replay("editing_canvas"), windows, /*skipIdle=*/false);
  EXPECT_EQ(out->outputIds, cutAfterEos(ids(replay("editing_sequence"))));
  EXPECT_EQ(out->outputIds.back(), 1) << "the edit's EOS ends the output";
}

INSTANTIATE_TEST_SUITE_P(Backends, LLaDA2ReferenceTest,
                         ::testing::ValuesIn(testing::fixtureBackends()),
                         [](const auto &info) { return testing::backendTestName(info.param); });

} // namespace
} // namespace dlm
