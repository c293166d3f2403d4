// The records the block-refinement program adds, on hand-predicted cases (diffusers'
// BlockRefinementScheduler rules, tests/reference/llada2/README.md): accept rule=threshold_quota
// (every masked row above the threshold, strictly, when they are at least the quota, else the
// quota's most confident; float32 comparisons with precision=f32), edit (generated, decoded rows
// whose argmax differs with a probability above the threshold, never the prompt or a mask) and
// eos_stop (a written EOS that is the first of the sequence, generated, with no mask before it).
#include "runtime/program/DecodeInterpreter.h"
#include "runtime/program/DecodeProgram.h"
#include "tests/runtime/sampling/FullCachedModel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace dlm::program {
namespace {

constexpr int64_t kVocab = 4;
constexpr int32_t kMask = 3;

// Per forward, per position: the argmax token and its softmax probability (the other three
// logits 0).
using Script = std::vector<std::map<int64_t, std::pair<int32_t, double>>>;

class ScriptedModel : public sampling::testing::FullCachedModel {
public:
  explicit ScriptedModel(Script script) : script_(std::move(script)) {}
  int64_t vocabSize() const override { return kVocab; }
  Status reserve(int64_t, int64_t) override { return Status::ok(); }

protected:
  StatusOr<sampling::LogitsView> runFull(const int32_t *, int64_t, int64_t,
                                         sampling::LogitRows rows) override {
    const auto &rowsOf = script_.at(std::min(calls_++, script_.size() - 1));
    buffer_.assign(static_cast<size_t>(rows.count() * kVocab), 0.0f);
    for (int64_t r = 0; r < rows.count(); ++r) {
      auto it = rowsOf.find(rows.begin + r);
      if (it == rowsOf.end())
        continue;
      // p = e^m / (e^m + 3)
      const double p = it->second.second;
      buffer_[static_cast<size_t>(r * kVocab + it->second.first)] =
          static_cast<float>(std::log(3 * p / (1 - p)));
    }
    return sampling::LogitsView{buffer_.data(), rows.count(), kVocab};
  }
  StatusOr<sampling::LogitsView> runCached(const int32_t *tokens, int64_t count, int64_t keep,
                                           sampling::LogitRows rows) override {
    return runFull(tokens, count, keep, rows);
  }

private:
  Script script_;
  size_t calls_ = 0;
  std::vector<float> buffer_;
};

// One step over the window [0, 6) of prompt ++ four masks: forward, argmax and probability, the
// step's `decide` records, the commits written; the window after every `renoise`.
struct StepsRun {
  std::vector<std::vector<int32_t>> windows;
  std::map<std::string, int64_t> counts;
  std::map<std::string, bool> flags;
};

StepsRun runSteps(const std::string &steps, const Script &script, const std::vector<int32_t> &prompt,
             const artifact::Attributes &knobs = {}) {
  const std::string text = "knob:k type=int default=1\n"
                           "knob:t type=real default=0.5\n"
                           "reserve tokens=6 rows=6\n"
                           "seq_extend count=4 fill=token token=@mask\n"
                           "window begin=0 end=6\n" +
                           steps + "finish steps=0\n";
  StepsRun run;
  StatusOr<DecodeProgramText> parsed = parseDecodeProgram(text);
  EXPECT_TRUE(parsed.isOk()) << parsed.status().message();
  if (!parsed)
    return run;
  StatusOr<DecodeProgram> loaded = DecodeProgram::load(parsed->records, {});
  EXPECT_TRUE(loaded.isOk()) << loaded.status().message();
  if (!loaded)
    return run;
  ProgramTestHooks hooks;
  hooks.afterRecord = [&](std::string_view kind, const RegisterView &registers) {
    if (kind == "renoise")
      run.windows.push_back(registers.window());
    if (kind == "edit")
      run.counts["edits"] = registers.integer("edits");
    if (kind == "eos_stop")
      run.flags["finished"] = registers.boolean("finished");
  };
  ProgramRequest request;
  request.prompt = prompt;
  request.knobs = knobs;
  request.testHooks = &hooks;
  sampling::TokenFacts facts;
  facts.maskTokenId = kMask;
  facts.eosTokenIds = {1};
  ScriptedModel model(script);
  StatusOr<sampling::DecodeOutcome> out = DecodeInterpreter(*loaded).run(model, facts, request, {});
  EXPECT_TRUE(out.isOk()) << out.status().message();
  return run;
}

const char *kCommitStep =
    "forward mode=full count=6 keep=0 row_begin=0 row_end=6\n"
    "sample kind=gumbel_max temperature=0.0 excluded=-1 step=0 candidates=all "
    "-> token=%token confidence=%confidence\n"
    "accept rule=threshold_quota candidates=masked score=%confidence k=$k threshold=$t "
    "-> keep=%keep\n"
    "renoise noise=mask candidates=masked_only keep=%keep sampled=%token step=0\n";

// Masked positions 2..5 at probabilities 0.9, 0.6, 0.55, 0.3 (tokens 0, 1, 2, 0).
const Script kFirstStep = {{{2, {0, 0.9}}, {3, {1, 0.6}}, {4, {2, 0.55}}, {5, {0, 0.3}}}};

TEST(BlockRefinementRecords, ThresholdQuotaTakesTheAboveOnesOrTheQuota) {
  auto window = [&](int64_t k, double t) {
    StepsRun run = runSteps(kCommitStep, kFirstStep, {2, 2}, {{"k", k}, {"t", t}});
    return run.windows.empty() ? std::vector<int32_t>{} : run.windows.back();
  };
  // Three above 0.5, at least the quota of 1: all three.
  EXPECT_EQ(window(1, 0.5), (std::vector<int32_t>{2, 2, 0, 1, 2, kMask}));
  // Fewer above than the quota of 4: the quota's most confident, every mask.
  EXPECT_EQ(window(4, 0.5), (std::vector<int32_t>{2, 2, 0, 1, 2, 0}));
  // Quota 2, none above 0.95: the two most confident.
  EXPECT_EQ(window(2, 0.95), (std::vector<int32_t>{2, 2, 0, 1, kMask, kMask}));
  // Quota 0 (past the schedule) and none above: nothing.
  EXPECT_EQ(window(0, 0.95), (std::vector<int32_t>{2, 2, kMask, kMask, kMask, kMask}));
}

// Leftmost (SDAR's sequential remasking): the quota's first masks by position, whatever their
// confidence (here rising to the right but for the last), at most every mask.
TEST(BlockRefinementRecords, LeftmostTakesTheQuotasFirstMasks) {
  std::string step = kCommitStep;
  const std::string rule = "rule=threshold_quota";
  step.replace(step.find(rule), rule.size(), "rule=leftmost");
  step.replace(step.find(" threshold=$t"), 13, "");
  const Script lowFirst = {{{2, {0, 0.3}}, {3, {1, 0.6}}, {4, {2, 0.9}}, {5, {0, 0.55}}}};
  auto window = [&](int64_t k) {
    StepsRun run = runSteps(step, lowFirst, {2, 2}, {{"k", k}});
    return run.windows.empty() ? std::vector<int32_t>{} : run.windows.back();
  };
  EXPECT_EQ(window(2), (std::vector<int32_t>{2, 2, 0, 1, kMask, kMask}));
  EXPECT_EQ(window(1), (std::vector<int32_t>{2, 2, 0, kMask, kMask, kMask}));
  EXPECT_EQ(window(9), (std::vector<int32_t>{2, 2, 0, 1, 2, 0}));
  EXPECT_EQ(window(0), (std::vector<int32_t>{2, 2, kMask, kMask, kMask, kMask}));
}

// Strictly above, and in float32 with precision=f32: 0.1 + 0.2 is above 0.3 in double, not in
// float32 (torch compares its float32 probabilities so).
TEST(BlockRefinementRecords, ThresholdQuotaIsStrictAndFloat32WhenAsked) {
  const std::string steps = "fill_row value=0.30000000000000004 -> out=%score\n"
                            "accept rule=threshold_quota candidates=masked score=%score k=0 "
                            "threshold=0.3 PRECISION-> keep=%keep\n"
                            "renoise noise=mask candidates=masked_only keep=%keep sampled=%kept "
                            "step=0\n";
  auto kept = [&](const std::string &precision) {
    std::string text = steps;
    text.replace(text.find("PRECISION"), 9, precision);
    text = "fill_row value=1 -> out=%kept\n" + text;
    StepsRun run = runSteps(text, kFirstStep, {2, 2});
    return run.windows.empty() ? std::vector<int32_t>{} : run.windows.back();
  };
  EXPECT_EQ(kept(""), (std::vector<int32_t>{2, 2, 1, 1, 1, 1}));
  EXPECT_EQ(kept("precision=f32 "), (std::vector<int32_t>{2, 2, kMask, kMask, kMask, kMask}));
}

const char *kEditStep =
    "forward mode=full count=6 keep=0 row_begin=0 row_end=6\n"
    "sample kind=gumbel_max temperature=0.0 excluded=-1 step=1 candidates=all "
    "-> token=%token2 confidence=%confidence2\n"
    "fill_row value=false -> out=%none\n"
    "edit score=%confidence2 sampled=%token2 threshold=$t -> edited=%edited count=%edits\n"
    "renoise noise=mask candidates=masked_only keep=%none sampled=%token2 step=1\n"
    "eos_stop keep=%none edited=%edited sampled=%token2 -> finished=%finished\n";

// After a first step that commits three masks (position 5 stays masked), the second step's argmax:
// the prompt's rows and the mask's are never edited, a row keeping its token is not, one below the
// threshold is not; the others are.
TEST(BlockRefinementRecords, EditReplacesOnlyGeneratedDecodedRows) {
  Script script = kFirstStep;
  script.push_back({{0, {0, 0.99}},
                    {1, {0, 0.99}},
                    {2, {2, 0.9}},
                    {3, {1, 0.9}},
                    {4, {0, 0.4}},
                    {5, {0, 0.99}}});
  StepsRun run = runSteps(std::string(kCommitStep) + kEditStep, script, {2, 2});
  ASSERT_EQ(run.windows.size(), 2u);
  EXPECT_EQ(run.windows[1], (std::vector<int32_t>{2, 2, 2, 1, 2, kMask}));
  EXPECT_EQ(run.counts["edits"], 1);
  EXPECT_FALSE(run.flags["finished"]) << "no EOS written";
}

// An edit that writes the EOS (1) at position 2 with nothing masked before it ends the request; not
// when the prompt holds the first EOS, nor when an EOS is written after a mask.
TEST(BlockRefinementRecords, EosStopNeedsTheFirstEosGeneratedWithNoMaskBeforeIt) {
  Script script = kFirstStep;
  script.push_back({{2, {1, 0.9}}});
  EXPECT_TRUE(runSteps(std::string(kCommitStep) + kEditStep, script, {2, 2}).flags["finished"]);
  EXPECT_FALSE(runSteps(std::string(kCommitStep) + kEditStep, script, {1, 2}).flags["finished"])
      << "the prompt holds the first EOS";
  Script maskBefore = {{{3, {1, 0.99}}}};
  const std::string commitEos =
      "forward mode=full count=6 keep=0 row_begin=0 row_end=6\n"
      "sample kind=gumbel_max temperature=0.0 excluded=-1 step=0 candidates=all "
      "-> token=%token confidence=%confidence\n"
      "accept rule=threshold_quota candidates=masked score=%confidence k=0 threshold=0.95 "
      "-> keep=%keep\n"
      "fill_row value=false -> out=%none\n"
      "renoise noise=mask candidates=masked_only keep=%keep sampled=%token step=0\n"
      "eos_stop keep=%keep edited=%none sampled=%token -> finished=%finished\n";
  EXPECT_FALSE(runSteps(commitEos, maskBefore, {2, 2}).flags["finished"])
      << "position 2 is still masked before the EOS at 3";
}

} // namespace
} // namespace dlm::program
