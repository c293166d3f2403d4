// The checks a block-causal fixture (LLaDA2.x, SDAR) is held to: its recorded windows through
// dlm's forward whole and block by block over the KV cache (how decoding feeds them), and the
// block-refinement program's windows after every step against the reference's canvases.
#pragma once

#include "tests/runtime/e2e/CompiledFixture.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace dlm::testing {

// replay/<name>_ids in one forward from position 0 against replay/<name>_logits: the block-causal
// mask keeps every block from seeing later ones.
inline void expectWholeWindowMatches(CompiledFixture &fixture, const std::string &name,
                                     double bound, const std::string &backend) {
  const std::vector<int32_t> tokens = ids(fixture.replay(name + "_ids"));
  const int64_t count = static_cast<int64_t>(tokens.size());
  ASSERT_TRUE(fixture.backend().reserve(count, count).isOk());
  StatusOr<sampling::LogitsView> logits = fixture.backend().forward(sampling::ForwardSpec::of(
      sampling::ForwardSpec::Mode::full, tokens.data(), count, 0, {0, count}));
  ASSERT_TRUE(logits) << logits.status().message();
  ASSERT_EQ(logits->rows, count);
  expectLogitRowsMatch(*logits, fixture.replay(name + "_logits"), 0, bound,
                       name + " on " + backend);
}

// replay/final_canvas block by block, as decoding feeds it: each block of `block` appended over the
// K/V the earlier blocks left in the cache, and a cached (uncommitted) forward of the last block.
inline void expectBlocksOverTheCacheMatch(CompiledFixture &fixture, int64_t block, double bound,
                                          const std::string &backendName) {
  using Mode = sampling::ForwardSpec::Mode;
  const std::vector<int32_t> tokens = ids(fixture.replay("final_canvas_ids"));
  const NpyArray want = fixture.replay("final_canvas_logits");
  const int64_t count = static_cast<int64_t>(tokens.size());
  ASSERT_EQ(count % block, 0);
  Backend &backend = fixture.backend();
  ASSERT_TRUE(backend.reserve(count, block).isOk());
  StatusOr<sampling::LogitsView> first = backend.forward(
      sampling::ForwardSpec::of(Mode::full, tokens.data(), block, block, {0, block}));
  ASSERT_TRUE(first) << first.status().message();
  expectLogitRowsMatch(*first, want, 0, bound, "block 0 (full) on " + backendName);
  for (int64_t begin = block; begin < count; begin += block) {
    const bool last = begin + block == count;
    StatusOr<sampling::LogitsView> logits = backend.forward(sampling::ForwardSpec::of(
        last ? Mode::cached : Mode::append, tokens.data(), begin + block, begin, {0, block}));
    ASSERT_TRUE(logits) << logits.status().message();
    expectLogitRowsMatch(*logits, want, begin, bound,
                         "block " + std::to_string(begin / block) +
                             (last ? " (cached) on " : " (append) on ") + backendName);
  }
}

// The window after every step of a block-refinement run (after its eos_stop, the step's last
// write), with the block's begin.
using StepWindows = std::vector<std::pair<int64_t, std::vector<int32_t>>>;

inline StatusOr<sampling::DecodeOutcome> decodeBlockRefinement(CompiledFixture &fixture,
                                                               const artifact::Attributes &knobs,
                                                               StepWindows &windows) {
  program::ProgramTestHooks hooks;
  hooks.afterRecord = [&](std::string_view kind, const program::RegisterView &registers) {
    if (kind == "eos_stop")
      windows.emplace_back(registers.integer("begin"), registers.window());
  };
  return fixture.decode("block-refinement", ids(fixture.replay("prompt_ids")), knobs, &hooks);
}

// The reference's canvases after its steps ([steps, T]) against the windows dlm's steps left: the
// same steps, each window the canvas's block. Without editing dlm skips diffusers' steps that
// change nothing (after a block's masks are gone it runs no further forward); `skipIdle` drops
// those rows of the trace.
inline void expectSameSteps(const NpyArray &canvases, const StepWindows &windows, bool skipIdle) {
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

} // namespace dlm::testing
