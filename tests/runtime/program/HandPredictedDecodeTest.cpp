// The decode programs dlmc embeds, run by the interpreter on a fake model whose logits the test
// chooses, so that every unmasking decision, forward and cache call can be predicted by hand.
#include "runtime/program/DecodeInterpreter.h"
#include "runtime/program/DecodeProgram.h"
#include "runtime/sampling/SamplingMath.h"
#include "tests/runtime/program/DecodeTestSupport.h"
#include "tests/runtime/sampling/FullCachedModel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

namespace dlm::sampling {
namespace {

using ::testing::ElementsAre;

constexpr int64_t kVocab = 10;
constexpr int32_t kMask = 9;

// Row for absolute position p: logit `score(p)` at token `target(p)`, 0 elsewhere.
class FakeModel : public dlm::sampling::testing::FullCachedModel {
public:
  struct Call {
    bool cached;
    int64_t count;
    int64_t keep;
    LogitRows rows;
    std::vector<int32_t> tokens;
    int64_t feedEnd = -1; // a window forward's; -1 for the others
  };

  std::function<int32_t(int64_t)> target = [](int64_t p) { return static_cast<int32_t>(p % 8); };
  std::function<float(int64_t)> score = [](int64_t p) { return 5.0f + p; };
  std::vector<Call> calls;
  int64_t cached = 0;

  int64_t vocabSize() const override { return kVocab; }
  Status reserve(int64_t, int64_t) override { return Status::ok(); }

  StatusOr<LogitsView> runFull(const int32_t *tokens, int64_t count, int64_t keep,
                               LogitRows rows) override {
    calls.push_back({false, count, keep, rows, {tokens, tokens + count}});
    cached = keep;
    return fill(rows, 0);
  }
  StatusOr<LogitsView> runCached(const int32_t *tokens, int64_t count, int64_t keep,
                                 LogitRows rows) override {
    if (keep != cached)
      return Status::error("fake: cache mismatch");
    calls.push_back({true, count, keep, rows, {tokens, tokens + count}});
    return fill(rows, keep);
  }
  StatusOr<LogitsView> forward(const ForwardSpec &spec) override {
    if (spec.mode != ForwardSpec::Mode::window)
      return FullCachedModel::forward(spec);
    if (cached != spec.count)
      return Status::error("fake: the window needs the whole sequence cached");
    calls.push_back({true,
                     spec.count,
                     spec.first,
                     spec.rows,
                     {spec.tokens, spec.tokens + spec.count},
                     spec.end});
    return fill(spec.rows, spec.first);
  }

private:
  LogitsView fill(LogitRows rows, int64_t firstPosition) {
    buffer_.assign(static_cast<size_t>(rows.count() * kVocab), 0.0f);
    for (int64_t r = 0; r < rows.count(); ++r) {
      const int64_t position = firstPosition + rows.begin + r;
      buffer_[r * kVocab + target(position)] = score(position);
    }
    return LogitsView{buffer_.data(), rows.count(), kVocab};
  }
  std::vector<float> buffer_;
};

TokenFacts facts(std::vector<int64_t> eos = {}) {
  TokenFacts f;
  f.maskTokenId = kMask;
  f.eosTokenIds = std::move(eos);
  return f;
}

// A request for the decode program of `policy` (compiler/programs/decode/<policy>.decode).
struct DecodeRequest {
  std::string policy = "low-confidence";
  program::ProgramRequest program;
  artifact::Attributes &knobs = program.knobs;

  DecodeRequest() = default;
  DecodeRequest(const DecodeRequest &other) : policy(other.policy), program(other.program) {}
};

DecodeRequest request(int64_t gen, int64_t block, int64_t steps) {
  DecodeRequest r;
  r.program.prompt = {5, 6};
  r.knobs["gen_length"] = gen;
  r.knobs["block_length"] = block;
  r.knobs["steps"] = steps;
  return r;
}

StatusOr<DecodeOutcome> decode(DecodeModel &model, const TokenFacts &facts,
                               const DecodeRequest &request, const BlockCallback &onBlock) {
  StatusOr<program::DecodeProgramText> text =
      program::parseDecodeProgram(program::testing::readDecodeProgramText(request.policy +
                                                                          ".decode"));
  if (!text)
    return text.status();
  StatusOr<program::DecodeProgram> loaded = program::DecodeProgram::load(text->records, {});
  if (!loaded)
    return loaded.status();
  return program::DecodeInterpreter(*loaded).run(model, facts, request.program, onBlock);
}

TEST(LowConfidenceTest, FixedScheduleUnmasksTheMostConfidentFirst) {
  FakeModel model;
  const float scores[] = {0, 0, 1, 4, 3, 2};
  model.score = [&](int64_t p) { return scores[p]; };
  model.target = [](int64_t p) { return static_cast<int32_t>(p); };
  StatusOr<DecodeOutcome> out = decode(model, facts(), request(4, 4, 2), {});
  ASSERT_TRUE(out.isOk()) << out.status().message();
  EXPECT_THAT(out->outputIds, ElementsAre(2, 3, 4, 5));
  EXPECT_EQ(out->forwards, 2);
  EXPECT_EQ(out->decodeSteps, 2);
  ASSERT_EQ(model.calls.size(), 2u);
  EXPECT_THAT(model.calls[1].tokens, ElementsAre(5, 6, kMask, 3, 4, kMask));
  EXPECT_EQ(model.calls[0].rows.begin, 2);
  EXPECT_EQ(model.calls[0].rows.end, 6);
}

TEST(LowConfidenceTest, ThresholdUnmasksEveryConfidentCandidateAndAtLeastOne) {
  FakeModel model;
  const float scores[] = {0, 0, 10, 10, 1, 1};
  model.score = [&](int64_t p) { return scores[p]; };
  model.target = [](int64_t p) { return static_cast<int32_t>(p); };
  DecodeRequest r = request(4, 4, 4);
  r.knobs["threshold"] = 0.9;
  StatusOr<DecodeOutcome> out = decode(model, facts(), r, {});
  ASSERT_TRUE(out.isOk()) << out.status().message();
  EXPECT_THAT(out->outputIds, ElementsAre(2, 3, 4, 5));
  ASSERT_EQ(out->forwards, 3);
  EXPECT_THAT(model.calls[1].tokens, ElementsAre(5, 6, 2, 3, kMask, kMask));
  // Equal confidence: the lower position goes first.
  EXPECT_THAT(model.calls[2].tokens, ElementsAre(5, 6, 2, 3, 4, kMask));
}

// Fast-dLLM's threshold: the step count never forces tokens out; only an explicit step_cap does.
TEST(LowConfidenceTest, ThresholdIgnoresStepsAndHonoursAnExplicitStepCap) {
  FakeModel model;
  const float scores[] = {0, 0, 10, 10, 1, 1};
  model.score = [&](int64_t p) { return scores[p]; };
  DecodeRequest r = request(4, 4, 2);
  r.knobs["threshold"] = 0.9;
  StatusOr<DecodeOutcome> out = decode(model, facts(), r, {});
  ASSERT_TRUE(out.isOk());
  EXPECT_EQ(out->forwards, 3);
  model.calls.clear();
  r.knobs["step_cap"] = int64_t{2};
  out = decode(model, facts(), r, {});
  ASSERT_TRUE(out.isOk());
  EXPECT_EQ(out->forwards, 2);
}

TEST(LowConfidenceTest, StopsAfterTheBlockHoldingEos) {
  FakeModel model;
  model.target = [](int64_t p) { return static_cast<int32_t>(p == 3 ? 7 : 1); };
  std::vector<std::vector<int32_t>> blocks;
  StatusOr<DecodeOutcome> out =
      decode(model, facts({7}), request(8, 4, 8),
             [&](const CommittedBlock &b) { blocks.emplace_back(b.ids, b.ids + b.count); });
  ASSERT_TRUE(out.isOk()) << out.status().message();
  EXPECT_THAT(out->outputIds, ElementsAre(1, 7));
  EXPECT_EQ(out->forwards, 4); // one block of 4 masks, 4 steps per block
  EXPECT_EQ(out->blocks, 1);
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_THAT(blocks[0], ElementsAre(1, 7));
}

TEST(LowConfidenceTest, EveryBlockIsReportedInOrder) {
  FakeModel model;
  std::vector<int64_t> indices;
  StatusOr<DecodeOutcome> out =
      decode(model, facts(), request(8, 4, 4),
             [&](const CommittedBlock &b) { indices.push_back(b.index); });
  ASSERT_TRUE(out.isOk());
  EXPECT_THAT(indices, ElementsAre(0, 1));
  EXPECT_EQ(out->outputIds.size(), 8u);
}

TEST(LowConfidenceTest, PrefixCacheRunsOneFullForwardPerBlock) {
  FakeModel model;
  DecodeRequest r = request(8, 4, 4);
  r.knobs["cache"] = std::string("prefix");
  StatusOr<DecodeOutcome> out = decode(model, facts(), r, {});
  ASSERT_TRUE(out.isOk()) << out.status().message();
  ASSERT_EQ(model.calls.size(), 4u);
  EXPECT_FALSE(model.calls[0].cached);
  EXPECT_EQ(model.calls[0].keep, 2);
  EXPECT_TRUE(model.calls[1].cached);
  EXPECT_EQ(model.calls[1].rows.begin, 0);
  EXPECT_EQ(model.calls[1].rows.end, 4);
  EXPECT_FALSE(model.calls[2].cached);
  EXPECT_EQ(model.calls[2].keep, 6);
  EXPECT_TRUE(model.calls[3].cached);

  // The same tokens as without the cache: the fake's logits depend on positions only.
  FakeModel plain;
  StatusOr<DecodeOutcome> reference = decode(plain, facts(), request(8, 4, 4), {});
  ASSERT_TRUE(reference.isOk());
  EXPECT_EQ(out->outputIds, reference->outputIds);
}

// The dual cache: per block one full forward keeping the whole sequence, then windows of the
// block alone over it.
TEST(LowConfidenceTest, DualCacheFeedsTheBlockOverTheWholeSequence) {
  FakeModel model;
  DecodeRequest r = request(8, 4, 4);
  r.knobs["cache"] = std::string("dual");
  StatusOr<DecodeOutcome> out = decode(model, facts(), r, {});
  ASSERT_TRUE(out.isOk()) << out.status().message();
  ASSERT_EQ(model.calls.size(), 4u);
  EXPECT_FALSE(model.calls[0].cached);
  EXPECT_EQ(model.calls[0].keep, 10);
  EXPECT_EQ(model.calls[1].keep, 2); // the window [2, 6)
  EXPECT_EQ(model.calls[1].feedEnd, 6);
  EXPECT_EQ(model.calls[1].rows.begin, 0);
  EXPECT_EQ(model.calls[1].rows.end, 4);
  EXPECT_EQ(model.calls[2].keep, 10);
  EXPECT_EQ(model.calls[3].keep, 6); // the window [6, 10)
  EXPECT_EQ(model.calls[3].feedEnd, 10);
  FakeModel plain;
  StatusOr<DecodeOutcome> reference = decode(plain, facts(), request(8, 4, 4), {});
  ASSERT_TRUE(reference.isOk());
  EXPECT_EQ(out->outputIds, reference->outputIds);
}

// Confidence at score s: e^s / (e^s + 9). Positions 2..5 score 1, 4, 2, 3: confidences 0.23,
// 0.86, 0.45, 0.69.
TEST(LowConfidenceTest, HierarchicalDecodingTakesEachSegmentsMaximum) {
  const float scores[] = {0, 0, 1, 4, 2, 3};
  auto run = [&](int64_t depth, FakeModel &model) {
    model.score = [&](int64_t p) { return scores[p]; };
    model.target = [](int64_t p) { return static_cast<int32_t>(p); };
    DecodeRequest r = request(4, 4, 4);
    r.knobs["low_threshold"] = 0.4;
    r.knobs["depth"] = depth;
    return decode(model, facts(), r, {});
  };
  // Depth 1 (dInfer): step 0 takes 3, the one run's maximum; step 1 the runs [2] and [4, 5]
  // give 5; step 2 [2] and [4] give 4 (0.45 > 0.4); step 3 the top-1, 2.
  FakeModel one;
  StatusOr<DecodeOutcome> out = run(1, one);
  ASSERT_TRUE(out.isOk()) << out.status().message();
  EXPECT_EQ(out->forwards, 4);
  EXPECT_THAT(one.calls[1].tokens, ElementsAre(5, 6, kMask, 3, kMask, kMask));
  EXPECT_THAT(one.calls[2].tokens, ElementsAre(5, 6, kMask, 3, kMask, 5));
  // Depth 2: step 0 also splits at 3 and takes 5 from [4, 5]; step 1 takes 4; step 2 takes 2.
  FakeModel two;
  out = run(2, two);
  ASSERT_TRUE(out.isOk()) << out.status().message();
  EXPECT_EQ(out->forwards, 3);
  EXPECT_THAT(two.calls[1].tokens, ElementsAre(5, 6, kMask, 3, kMask, 5));
  EXPECT_THAT(out->outputIds, ElementsAre(2, 3, 4, 5));
}

// Every candidate at score 2 has confidence 0.45, under the threshold 0.5: one per step. With
// credit (alpha 1, gamma 1) step 0 fuses log(1 + 0.45) into each target's logit, which lifts
// its confidence to 0.54: the whole block at once.
TEST(LowConfidenceTest, CreditLiftsConsistentTokensOverTheThreshold) {
  auto run = [](bool credit) {
    FakeModel model;
    model.score = [](int64_t) { return 2.0f; };
    DecodeRequest r = request(4, 4, 4);
    r.knobs["threshold"] = 0.5;
    r.knobs["credit"] = credit;
    r.knobs["credit_alpha"] = 1.0;
    r.knobs["credit_gamma"] = 1.0;
    return decode(model, facts(), r, {});
  };
  StatusOr<DecodeOutcome> without = run(false);
  ASSERT_TRUE(without.isOk()) << without.status().message();
  EXPECT_EQ(without->forwards, 4);
  StatusOr<DecodeOutcome> with = run(true);
  ASSERT_TRUE(with.isOk()) << with.status().message();
  EXPECT_EQ(with->forwards, 1);
  EXPECT_EQ(with->outputIds, without->outputIds);
}

TEST(LowConfidenceTest, LogitShiftStartsTheCachedChunkOnePositionEarly) {
  FakeModel model;
  DecodeRequest r = request(4, 4, 2);
  r.knobs["cache"] = std::string("prefix");
  TokenFacts f = facts();
  f.logitShift = true;
  ASSERT_TRUE(decode(model, f, r, {}).isOk());
  ASSERT_EQ(model.calls.size(), 2u);
  EXPECT_EQ(model.calls[0].keep, 1);
  EXPECT_EQ(model.calls[1].keep, 1);
  EXPECT_EQ(model.calls[1].rows.begin, 1);
  EXPECT_EQ(model.calls[1].rows.end, 5);
}

TEST(LowConfidenceTest, CapturesTheWholeFirstForward) {
  FakeModel model;
  DecodeRequest r = request(4, 4, 2);
  r.program.captureFirstLogits = true;
  StatusOr<DecodeOutcome> out = decode(model, facts(), r, {});
  ASSERT_TRUE(out.isOk());
  EXPECT_EQ(out->firstLogitRows, 6);
  ASSERT_EQ(out->firstLogits.size(), static_cast<size_t>(6 * kVocab));
  EXPECT_EQ(out->firstLogits[0 * kVocab + 0], 5.0f); // position 0 -> token 0, score 5
  EXPECT_EQ(out->firstLogits[3 * kVocab + 3], 8.0f);
}

TEST(ValidateRequestTest, NamesEveryProblem) {
  auto message = [](DecodeRequest r, TokenFacts f = facts()) {
    FakeModel model;
    return decode(model, f, r, {}).status().message();
  };
  DecodeRequest empty = request(8, 4, 4);
  empty.program.prompt.clear();
  EXPECT_EQ(message(empty), "empty prompt");
  EXPECT_EQ(message(request(10, 4, 4)), "gen_length 10 is not a positive multiple of "
                                        "block_length 4");
  EXPECT_EQ(message(request(8, 4, 3)), "steps 3 is not divisible by the number of blocks 2");
  DecodeRequest outside = request(8, 4, 4);
  outside.program.prompt = {3, 10};
  EXPECT_EQ(message(outside), "prompt token id 10 is outside the vocabulary [0, 10)");
  TokenFacts noMask = facts();
  noMask.maskTokenId = -1;
  EXPECT_EQ(message(request(8, 4, 4), noMask),
            "the low-confidence policy needs a mask token; the model has none");
  DecodeRequest bound = request(8, 4, 4);
  bound.policy = "entropy-bound";
  bound.knobs.erase("steps");
  bound.knobs["entropy_bound"] = 0.0;
  EXPECT_EQ(message(bound), "entropy_bound must be > 0");
  EXPECT_EQ(message(request(8, 4, 4)), "");
}

DecodeRequest entropyRequest(int64_t gen, int64_t canvas) {
  DecodeRequest r = request(gen, canvas, 1);
  r.policy = "entropy-bound";
  r.knobs.erase("steps");
  return r;
}

TEST(EntropyBoundTest, ConfidentCanvasConvergesOnceTheArgmaxIsStable) {
  FakeModel model;
  model.score = [](int64_t) { return 60.0f; }; // entropy ~ 0
  StatusOr<DecodeOutcome> out = decode(model, facts(), entropyRequest(8, 4), {});
  ASSERT_TRUE(out.isOk()) << out.status().message();
  // Step 0 cannot be stable (the history starts at -1); step 1 is: two forwards per canvas.
  EXPECT_EQ(out->forwards, 4);
  EXPECT_EQ(out->decodeSteps, 4);
  EXPECT_THAT(out->outputIds, ElementsAre(2, 3, 4, 5, 6, 7, 0, 1));
  // Everything was accepted at step 0, so step 1 saw the sampled canvas.
  EXPECT_THAT(model.calls[1].tokens, ElementsAre(5, 6, 2, 3, 4, 5));
}

TEST(EntropyBoundTest, NoStabilityRequirementCommitsAfterOneStep) {
  FakeModel model;
  model.score = [](int64_t) { return 60.0f; };
  DecodeRequest r = entropyRequest(8, 4);
  r.knobs["stability_threshold"] = int64_t{0};
  StatusOr<DecodeOutcome> out = decode(model, facts(), r, {});
  ASSERT_TRUE(out.isOk());
  EXPECT_EQ(out->forwards, 2);
}

TEST(EntropyBoundTest, UnconfidentCanvasRunsToTheStepCap) {
  FakeModel model;
  model.score = [](int64_t) { return 0.5f; };
  DecodeRequest r = entropyRequest(4, 4);
  r.knobs["max_steps"] = int64_t{5};
  StatusOr<DecodeOutcome> out = decode(model, facts(), r, {});
  ASSERT_TRUE(out.isOk());
  EXPECT_EQ(out->forwards, 5);
  // The committed canvas is the last argmax, which is the target (the mask is excluded).
  EXPECT_THAT(out->outputIds, ElementsAre(2, 3, 4, 5));
}

TEST(EntropyBoundTest, RejectedPositionsAreRenoisedWithTheMask) {
  FakeModel model;
  // Position 2 is certain (entropy ~0), the others nearly uniform (~log 10) and tied: position 2
  // is accepted, then position 3 (the entropy before it is ~0), then the budget is spent.
  model.score = [](int64_t p) { return p == 2 ? 60.0f : 0.1f; };
  DecodeRequest r = entropyRequest(4, 4);
  r.knobs["max_steps"] = int64_t{3};
  ASSERT_TRUE(decode(model, facts(), r, {}).isOk());
  ASSERT_GE(model.calls.size(), 2u);
  const std::vector<int32_t> &fed = model.calls[1].tokens;
  EXPECT_EQ(fed[2], 2);
  EXPECT_NE(fed[3], kMask);
  EXPECT_EQ(fed[4], kMask);
  EXPECT_EQ(fed[5], kMask);
}

TEST(EntropyBoundTest, PrefixCacheAddsOneUndecodedForwardPerCanvas) {
  FakeModel model;
  model.score = [](int64_t) { return 60.0f; };
  DecodeRequest r = entropyRequest(8, 4);
  r.knobs["cache"] = std::string("prefix");
  StatusOr<DecodeOutcome> out = decode(model, facts(), r, {});
  ASSERT_TRUE(out.isOk()) << out.status().message();
  EXPECT_EQ(out->forwards, 6);
  EXPECT_EQ(out->decodeSteps, 4);
  ASSERT_EQ(model.calls.size(), 6u);
  EXPECT_FALSE(model.calls[0].cached);
  EXPECT_EQ(model.calls[0].count, 2);
  EXPECT_EQ(model.calls[0].rows.count(), 0);
  EXPECT_TRUE(model.calls[1].cached);
  EXPECT_EQ(model.calls[3].count, 6); // prompt + first canvas
  EXPECT_THAT(out->outputIds, ElementsAre(2, 3, 4, 5, 6, 7, 0, 1));
}

TEST(EntropyBoundTest, StopsAfterACanvasHoldingEos) {
  FakeModel model;
  model.score = [](int64_t) { return 60.0f; };
  StatusOr<DecodeOutcome> out = decode(model, facts({4}), entropyRequest(8, 4), {});
  ASSERT_TRUE(out.isOk());
  EXPECT_THAT(out->outputIds, ElementsAre(2, 3, 4));
  EXPECT_EQ(out->blocks, 1);
}

// A model whose device runs whole blocks: it records what the policy hands it and "denoises"
// each block to the fake's argmax tokens (what the host loop commits here) in `steps` steps.
class DeviceLoopModel : public FakeModel {
public:
  bool serves = true;
  int64_t steps = 3;
  std::vector<LoopPlan> loops;

  bool denoisesBlock(const LoopPlan &) const override { return serves; }
  StatusOr<BlockLoopResult> denoiseBlock(const LoopPlan &loop, int32_t *canvas) override {
    loops.push_back(loop);
    loops.back().sequence = nullptr; // not owned past the call
    for (int64_t j = 0; j < loop.end - loop.begin; ++j)
      canvas[j] = target(loop.begin + j);
    return BlockLoopResult{steps, true};
  }
};

TEST(DeviceBlockLoopTest, LowConfidenceHandsEveryBlockToTheDevice) {
  DeviceLoopModel model;
  DecodeRequest r = request(8, 4, 4);
  r.knobs["cache"] = std::string("prefix");
  r.program.seed = 7;
  StatusOr<DecodeOutcome> out = decode(model, facts(), r, {});
  ASSERT_TRUE(out.isOk()) << out.status().message();
  EXPECT_TRUE(model.calls.empty()); // no forward from the host
  ASSERT_EQ(model.loops.size(), 2u);
  const LoopPlan &second = model.loops[1];
  EXPECT_EQ(second.begin, 6);
  EXPECT_EQ(second.end, 10);
  EXPECT_EQ(second.total, 10);
  EXPECT_EQ(second.seed, 7u);
  // Steps per block: the cap; the prefix kept by the first step's full forward.
  ASSERT_EQ(second.steps.size(), 2u);
  EXPECT_TRUE(second.capped);
  std::vector<int64_t> ks, rngSteps;
  for (const StepPlan &step : second.steps) {
    ks.push_back(step.accept.k);
    rngSteps.push_back(step.sample.rngStep);
    EXPECT_EQ(step.accept.rule, AcceptStep::Rule::topK);
    EXPECT_EQ(step.sample.excluded, kMask);
    EXPECT_EQ(step.forward.keep, 6);
    EXPECT_EQ(step.forward.count, 10);
  }
  EXPECT_EQ(second.steps[0].forward.mode, ForwardStep::Mode::full);
  EXPECT_EQ(second.steps[1].forward.mode, ForwardStep::Mode::cached);
  EXPECT_THAT(ks, ElementsAre(2, 2));       // the transfer schedule
  EXPECT_THAT(rngSteps, ElementsAre(3, 4)); // after the first block's device steps
  EXPECT_EQ(out->forwards, 6);
  EXPECT_EQ(out->decodeSteps, 6);
  // The host loop commits the same tokens on this fake.
  FakeModel host;
  StatusOr<DecodeOutcome> reference = decode(host, facts(), r, {});
  ASSERT_TRUE(reference.isOk());
  EXPECT_EQ(out->outputIds, reference->outputIds);
}

TEST(DeviceBlockLoopTest, FirstLogitsCaptureKeepsTheFirstBlockOnTheHost) {
  DeviceLoopModel model;
  DecodeRequest r = request(8, 4, 4);
  r.program.captureFirstLogits = true;
  StatusOr<DecodeOutcome> out = decode(model, facts(), r, {});
  ASSERT_TRUE(out.isOk()) << out.status().message();
  EXPECT_EQ(model.calls.size(), 2u); // block 0: two host steps
  ASSERT_EQ(model.loops.size(), 1u);
  EXPECT_EQ(model.loops[0].begin, 6);
  EXPECT_EQ(model.loops[0].steps.front().sample.rngStep, 2);
  EXPECT_EQ(out->forwards, 2 + 3);
  EXPECT_EQ(out->firstLogitRows, 10);
}

TEST(DeviceBlockLoopTest, ModelThatDoesNotServeTheBlockRunsTheHostLoop) {
  DeviceLoopModel model;
  model.serves = false;
  StatusOr<DecodeOutcome> out = decode(model, facts(), request(8, 4, 4), {});
  ASSERT_TRUE(out.isOk());
  EXPECT_TRUE(model.loops.empty());
  EXPECT_EQ(model.calls.size(), 4u);
}

TEST(DeviceBlockLoopTest, EntropyBoundRunsThePrefixForwardThenHandsTheCanvasOver) {
  DeviceLoopModel model;
  DecodeRequest r = entropyRequest(8, 4);
  r.knobs["cache"] = std::string("prefix");
  r.knobs["max_steps"] = int64_t{6};
  r.knobs["noise"] = std::string("uniform");
  StatusOr<DecodeOutcome> out = decode(model, facts(), r, {});
  ASSERT_TRUE(out.isOk()) << out.status().message();
  // Per canvas the host's undecoded prefix forward, then the device's steps.
  ASSERT_EQ(model.calls.size(), 2u);
  EXPECT_EQ(model.calls[1].count, 6);
  EXPECT_EQ(model.calls[1].rows.count(), 0);
  ASSERT_EQ(model.loops.size(), 2u);
  const LoopPlan &second = model.loops[1];
  EXPECT_EQ(second.total, 10);
  ASSERT_EQ(second.steps.size(), 6u); // max_steps
  EXPECT_EQ(second.steps[0].forward.mode, ForwardStep::Mode::cached);
  EXPECT_EQ(second.steps[0].forward.keep, 6);
  EXPECT_EQ(second.steps[0].sample.rngStep, 3);
  EXPECT_EQ(second.steps[0].sample.excluded, kNoExcludedToken);
  EXPECT_EQ(second.steps[0].renoise.noise, RenoiseStep::Noise::uniform);
  EXPECT_FALSE(second.steps[4].gate.last);
  EXPECT_TRUE(second.steps[5].gate.last);
  EXPECT_EQ(out->forwards, 2 * (1 + 3));
  EXPECT_EQ(out->decodeSteps, 6);
  EXPECT_THAT(out->outputIds, ElementsAre(2, 3, 4, 5, 6, 7, 0, 1));
}

} // namespace
} // namespace dlm::sampling
