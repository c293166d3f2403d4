// The loop plans of docs/design/decode-program.md §5: the interpreter hands a model whose device
// runs whole loops (DecodeModel::denoiseBlock) a plan of the loop's resolved records, and
//  * a model that executes plans on the host, record by record, then decodes exactly as the
//    interpreter's own host loop does (outcome, every forward, every committed block);
//  * the plan is the one the policy loops of runtime/sampling build for the same request, step
//    for step, over a grid of policies, knobs, cache modes and model facts.
#include "runtime/program/DecodeInterpreter.h"
#include "runtime/sampling/CounterRng.h"
#include "tests/runtime/program/DecodeTestSupport.h"
#include "tests/runtime/sampling/legacy/LegacyDecoding.h"
#include "runtime/sampling/SamplingMath.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

namespace dlm::program {
namespace {

using sampling::AcceptStep;
using sampling::BlockLoopResult;
using sampling::DecodeOutcome;
using sampling::ForwardStep;
using sampling::GateStep;
using sampling::LogitRows;
using sampling::LogitsView;
using sampling::LoopPlan;
using sampling::RenoiseStep;
using sampling::SampleStep;
using sampling::StepPlan;
using sampling::TokenFacts;

using testing::kEos;
using testing::kMask;
using testing::kVocab;
using testing::RandomModel;

// A "device" that runs a plan's steps on the host, from the plan alone: what a backend's device
// loop must do. Its forwards go through the same logged fake.
class PlanExecutingModel : public RandomModel {
public:
  using RandomModel::RandomModel;
  int64_t loops = 0;

  bool denoisesBlock(const LoopPlan &) const override { return true; }
  StatusOr<BlockLoopResult> denoiseBlock(const LoopPlan &plan, int32_t *canvas) override {
    ++loops;
    seq_.assign(plan.sequence, plan.sequence + plan.total);
    const size_t rows = static_cast<size_t>(plan.end - plan.begin);
    prev_.assign(rows, -1);
    run_ = 0;
    BlockLoopResult result{static_cast<int64_t>(plan.steps.size()), false};
    for (size_t s = 0; s < plan.steps.size() && !result.finished; ++s) {
      DLM_ASSIGN_OR_RETURN(const bool done, step(plan, plan.steps[s]));
      if (done)
        result = BlockLoopResult{static_cast<int64_t>(s) + 1, true};
    }
    std::copy(seq_.begin() + plan.begin, seq_.begin() + plan.end, canvas);
    return result;
  }

private:
  bool isMask(const LoopPlan &plan, size_t j) const {
    return seq_[static_cast<size_t>(plan.begin) + j] == plan.maskToken;
  }

  StatusOr<bool> step(const LoopPlan &plan, const StepPlan &step) {
    const ForwardStep &f = step.forward;
    const bool cached = f.mode == ForwardStep::Mode::cached;
    const int64_t first = cached ? f.keep : 0;
    const LogitRows wanted{f.rowBegin - first, f.rowEnd - first};
    DLM_ASSIGN_OR_RETURN(LogitsView logits,
                         cached ? forwardCached(seq_.data(), f.count, f.keep, wanted)
                                : forwardFull(seq_.data(), f.count, f.keep, wanted));
    sample(plan, step.sample, logits);
    const std::vector<uint8_t> keep = accept(plan, step.accept);
    return gateAndRenoise(plan, step, keep);
  }

  void sample(const LoopPlan &plan, const SampleStep &s, const LogitsView &logits) {
    const size_t rows = static_cast<size_t>(plan.end - plan.begin);
    sampled_.assign(rows, 0);
    argmax_.assign(rows, 0);
    score_.assign(rows, 0);
    const uint64_t key = sampling::rng::stepKey(
        plan.seed, plan.request, sampling::rng::kStreamGumbel, static_cast<uint64_t>(s.rngStep));
    for (size_t j = 0; j < rows; ++j) {
      const int64_t position = plan.begin + static_cast<int64_t>(j);
      const uint64_t rowKey = sampling::rng::positionKey(key, position);
      if (s.kind == SampleStep::Kind::gumbelMax) {
        const sampling::RowDecision d = sampling::decodeRow(
            logits.row(static_cast<int64_t>(j)), kVocab, s.temperature, rowKey, s.excluded);
        sampled_[j] = d.token;
        score_[j] = d.confidence;
      } else {
        const sampling::TemperedRow t = sampling::temperedRow(
            logits.row(static_cast<int64_t>(j)), kVocab, s.temperature, rowKey, s.excluded);
        sampled_[j] = t.sample;
        argmax_[j] = t.argmax;
        score_[j] = t.entropy;
      }
    }
  }

  std::vector<uint8_t> accept(const LoopPlan &plan, const AcceptStep &a) {
    const size_t rows = sampled_.size();
    std::vector<int64_t> candidates, positions, order;
    std::vector<double> scores;
    for (size_t j = 0; j < rows; ++j) {
      if (a.candidates == AcceptStep::Candidates::masked && !isMask(plan, j))
        continue;
      candidates.push_back(static_cast<int64_t>(j));
      positions.push_back(plan.begin + static_cast<int64_t>(j));
      scores.push_back(score_[j]);
    }
    std::vector<uint8_t> keep(rows, 0);
    if (a.rule == AcceptStep::Rule::entropyBound) {
      std::vector<uint8_t> accepted;
      sampling::entropyAccept(scores, a.bound, order, accepted);
      for (size_t c = 0; c < accepted.size(); ++c)
        keep[static_cast<size_t>(candidates[c])] = accepted[c];
    } else {
      int64_t take = a.k;
      if (a.rule == AcceptStep::Rule::threshold)
        take = std::max<int64_t>(
            std::count_if(scores.begin(), scores.end(), [&](double c) { return c >= a.threshold; }),
            1);
      sampling::confidenceOrder(scores, positions, order);
      take = std::min<int64_t>(take, static_cast<int64_t>(candidates.size()));
      for (int64_t s = 0; s < take; ++s)
        keep[static_cast<size_t>(candidates[static_cast<size_t>(order[s])])] = 1;
    }
    converged_ = false;
    if (a.converge == AcceptStep::Converge::stableConfident) {
      run_ = prev_ == argmax_ ? run_ + 1 : 0;
      prev_ = argmax_;
      double sum = 0;
      for (double s : score_)
        sum += s;
      converged_ = run_ >= a.stability && sum / static_cast<double>(score_.size()) < a.confidence;
    }
    return keep;
  }

  bool gateAndRenoise(const LoopPlan &plan, const StepPlan &step, std::vector<uint8_t> keep) {
    const size_t rows = keep.size();
    bool done = true;
    if (step.gate.rule == GateStep::Rule::noMaskLeft) {
      for (size_t j = 0; j < rows; ++j)
        done = done && !(isMask(plan, j) && !keep[j]);
    } else {
      done = converged_ || step.gate.last;
      if (done) {
        keep.assign(rows, 1);
        sampled_ = argmax_;
      }
    }
    const RenoiseStep &r = step.renoise;
    const uint64_t key = sampling::rng::stepKey(
        plan.seed, plan.request, sampling::rng::kStreamRenoise, static_cast<uint64_t>(r.rngStep));
    for (size_t j = 0; j < rows; ++j) {
      if (r.candidates == RenoiseStep::Candidates::maskedOnly && !isMask(plan, j))
        continue;
      const int64_t position = plan.begin + static_cast<int64_t>(j);
      int32_t &token = seq_[static_cast<size_t>(position)];
      if (keep[j])
        token = sampled_[j];
      else if (r.noise == RenoiseStep::Noise::uniform)
        token = static_cast<int32_t>(
            sampling::rng::randomToken(sampling::rng::positionKey(key, position), kVocab));
      else
        token = plan.maskToken;
    }
    return done;
  }

  std::vector<int32_t> seq_, prev_, sampled_, argmax_;
  std::vector<double> score_;
  int64_t run_ = 0;
  bool converged_ = false;
};

// A device that records the plans it is offered and declines them (the host then runs the loop).
class PlanRecordingModel : public RandomModel {
public:
  using RandomModel::RandomModel;
  mutable std::vector<std::string> plans;

  bool denoisesBlock(const LoopPlan &plan) const override {
    plans.push_back(sampling::loopPlanText(plan));
    return false;
  }
};

DecodeProgram loadProgram(const std::string &name) {
  StatusOr<DecodeProgramText> parsed = parseDecodeProgram(testing::readDecodeProgramText(name));
  if (!parsed) {
    ADD_FAILURE() << name << ": " << parsed.status().message();
    return DecodeProgram();
  }
  StatusOr<DecodeProgram> program = DecodeProgram::load(parsed->records);
  if (!program) {
    ADD_FAILURE() << name << ": " << program.status().message();
    return DecodeProgram();
  }
  return std::move(*program);
}

// One request, as the policy loops' DecodeRequest and as the program's knobs.
struct Case {
  bool entropy = false;
  int64_t gen = 8, block = 4, steps = 4;
  std::optional<double> threshold;
  std::optional<int64_t> stepCap;
  bool prefix = false, shift = false, eos = false, capture = false;
  double temperature = 0;
  int64_t stability = 1;
  std::string noise;
  double entropyBound = 0.1, confidenceThreshold = 0.005;
  uint64_t seed = 1;

  std::string describe() const {
    std::ostringstream out;
    out << (entropy ? "entropy-bound" : "low-confidence") << " gen=" << gen << " block=" << block
        << " steps=" << steps << " threshold=" << threshold.value_or(-1)
        << " step_cap=" << stepCap.value_or(-1) << " prefix=" << prefix << " shift=" << shift
        << " eos=" << eos << " T=" << temperature << " stability=" << stability
        << " noise=" << noise << " capture=" << capture << " seed=" << seed;
    return out.str();
  }

  TokenFacts facts() const {
    TokenFacts f;
    f.maskTokenId = kMask;
    if (eos)
      f.eosTokenIds = {kEos};
    f.logitShift = shift;
    return f;
  }

  sampling::DecodeRequest legacyRequest() const {
    sampling::DecodeRequest r;
    r.prompt = {1, 5, 2};
    r.seed = seed;
    r.request = seed * 31 + 7;
    r.cache = prefix ? sampling::CacheMode::prefix : sampling::CacheMode::none;
    r.captureFirstLogits = capture;
    sampling::DecodingKnobs &k = r.knobs;
    k.policy = entropy ? sampling::Policy::entropyBound : sampling::Policy::lowConfidence;
    k.genLength = gen;
    k.blockLength = block;
    k.steps = steps;
    k.maxSteps = steps;
    k.threshold = threshold;
    k.stepCap = stepCap;
    k.temperature = temperature;
    k.stabilityThreshold = stability;
    k.noise = noise;
    k.entropyBound = entropyBound;
    k.confidenceThreshold = confidenceThreshold;
    k.unrollSteps = 4; // the programs' unroll
    return r;
  }

  ProgramRequest programRequest() const {
    ProgramRequest r;
    r.prompt = {1, 5, 2};
    r.seed = seed;
    r.request = seed * 31 + 7;
    r.captureFirstLogits = capture;
    artifact::Attributes &k = r.knobs;
    k["gen_length"] = gen;
    k["block_length"] = block;
    k["temperature"] = temperature;
    k["cache"] = std::string(prefix ? "prefix" : "none");
    if (!entropy) {
      k["steps"] = steps;
      if (threshold)
        k["threshold"] = *threshold;
      if (stepCap)
        k["step_cap"] = *stepCap;
    } else {
      k["max_steps"] = steps;
      k["stability_threshold"] = stability;
      k["entropy_bound"] = entropyBound;
      k["confidence_threshold"] = confidenceThreshold;
      if (!noise.empty())
        k["noise"] = noise;
    }
    return r;
  }
};

// Every case of the grid: low-confidence fixed count, threshold and threshold with a step cap;
// entropy-bound with each noise and stability; both caches, shifts, EOS and capture.
std::vector<Case> grid() {
  std::vector<Case> cases;
  struct Shape {
    int64_t gen, block, steps;
  };
  const Shape shapes[] = {{8, 4, 8}, {8, 4, 16}, {12, 4, 3}, {8, 8, 8}};
  uint64_t seed = 0;
  for (int mode = 0; mode < 5; ++mode)
    for (int prefix = 0; prefix < 2; ++prefix)
      for (int shift = 0; shift < 2; ++shift)
        for (const Shape &shape : shapes)
          for (int eos = 0; eos < 2; ++eos) {
            Case c;
            c.seed = ++seed;
            c.gen = shape.gen;
            c.block = shape.block;
            c.steps = shape.steps;
            c.prefix = prefix;
            c.shift = shift;
            c.eos = eos;
            c.capture = seed % 7 == 0;
            c.temperature = seed % 2 ? 0.7 : 0.0;
            if (mode == 1 || mode == 2)
              c.threshold = seed % 3 == 0 ? 0.3 : 0.8;
            if (mode == 2)
              c.stepCap = static_cast<int64_t>(seed % 3 * 2 + 1); // 1, 3, 5
            if (mode >= 3) {
              c.entropy = true;
              c.steps = shape.steps / 2 + 1;
              c.noise = mode == 3 ? "mask" : "uniform";
              c.stability = static_cast<int64_t>(seed % 3);
              if (seed % 2) {
                c.entropyBound = 1.5;
                c.confidenceThreshold = 0.4;
              }
            }
            cases.push_back(c);
          }
  return cases;
}

struct Decoded {
  StatusOr<DecodeOutcome> outcome = Status::error("not run");
  std::vector<RandomModel::Call> calls;
  std::vector<std::pair<int64_t, std::vector<int32_t>>> blocks;
};

Decoded runProgram(const DecodeProgram &program, RandomModel &model, const Case &c) {
  Decoded run;
  run.outcome = DecodeInterpreter(program).run(
      model, c.facts(), c.programRequest(), [&](const sampling::CommittedBlock &b) {
        run.blocks.emplace_back(b.index, std::vector<int32_t>(b.ids, b.ids + b.count));
      });
  run.calls = model.calls;
  return run;
}

TEST(DeviceLoopPlanTest, APlanRunOnTheDeviceDecodesAsTheHostLoop) {
  const DecodeProgram lowConfidence = loadProgram("low-confidence.decode");
  const DecodeProgram entropyBound = loadProgram("entropy-bound.decode");
  int64_t deviceLoops = 0;
  for (const Case &c : grid()) {
    SCOPED_TRACE(c.describe());
    const DecodeProgram &program = c.entropy ? entropyBound : lowConfidence;
    RandomModel host(c.seed);
    PlanExecutingModel device(c.seed);
    const Decoded expected = runProgram(program, host, c);
    const Decoded actual = runProgram(program, device, c);
    ASSERT_TRUE(expected.outcome.isOk()) << expected.outcome.status().message();
    ASSERT_TRUE(actual.outcome.isOk()) << actual.outcome.status().message();
    EXPECT_EQ(expected.outcome->outputIds, actual.outcome->outputIds);
    EXPECT_EQ(expected.outcome->forwards, actual.outcome->forwards);
    EXPECT_EQ(expected.outcome->decodeSteps, actual.outcome->decodeSteps);
    EXPECT_EQ(expected.outcome->blocks, actual.outcome->blocks);
    EXPECT_EQ(expected.blocks, actual.blocks);
    ASSERT_EQ(expected.calls.size(), actual.calls.size());
    for (size_t i = 0; i < expected.calls.size(); ++i)
      ASSERT_TRUE(expected.calls[i] == actual.calls[i]) << "forward " << i << " differs";
    // Every block on the device, but the first when its logits are captured.
    EXPECT_EQ(device.loops, actual.outcome->blocks - (c.capture ? 1 : 0));
    deviceLoops += device.loops;
    if (HasFatalFailure() || HasNonfatalFailure())
      return;
  }
  EXPECT_GT(deviceLoops, 0);
}

DecodeProgram loadText(const std::string &text) {
  StatusOr<DecodeProgramText> parsed = parseDecodeProgram(text);
  EXPECT_TRUE(parsed.isOk()) << parsed.status().message();
  if (!parsed)
    return DecodeProgram();
  StatusOr<DecodeProgram> program = DecodeProgram::load(parsed->records);
  EXPECT_TRUE(program.isOk()) << program.status().message();
  return program ? std::move(*program) : DecodeProgram();
}

// A loop whose steps do not resolve into the five step records, or whose registers are read after
// it, runs on the host, as it would without a device.
TEST(DeviceLoopPlanTest, LoopsWithoutAPlanRunOnTheHost) {
  const std::string text = testing::readDecodeProgramText("low-confidence.decode");
  auto edited = [](std::string source, const std::string &from, const std::string &to) {
    const size_t at = source.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return at == std::string::npos ? source : source.replace(at, from.size(), to);
  };
  const std::string gate = "    gate rule=no_mask_left";
  const std::string after = "  add a=%step b=%ran -> out=%step\n";
  const std::string loop = "  denoise_loop:denoise_step";
  const std::string programs[] = {
      // A record a device loop does not run.
      edited(text, gate, "    count_eq value=@mask -> out=%left\n" + gate),
      // A register the loop writes, read after it.
      edited(edited(edited(text, loop, "  set a=-1 -> out=%seen\n" + loop), gate,
                    "    set a=%i -> out=%seen\n" + gate),
             after, after + "  set a=%seen -> out=%lastSeen\n"),
  };
  for (size_t v = 0; v < std::size(programs); ++v) {
    SCOPED_TRACE("variant " + std::to_string(v));
    const DecodeProgram program = loadText(programs[v]);
    Case c;
    c.steps = 8;
    RandomModel host(c.seed);
    PlanExecutingModel device(c.seed);
    const Decoded expected = runProgram(program, host, c);
    const Decoded actual = runProgram(program, device, c);
    ASSERT_TRUE(expected.outcome.isOk()) << expected.outcome.status().message();
    ASSERT_TRUE(actual.outcome.isOk()) << actual.outcome.status().message();
    EXPECT_EQ(device.loops, 0);
    EXPECT_EQ(expected.outcome->outputIds, actual.outcome->outputIds);
    EXPECT_EQ(expected.outcome->forwards, actual.outcome->forwards);
  }
}

TEST(DeviceLoopPlanTest, TheInterpretersPlanIsThePolicyLoopsPlan) {
  const DecodeProgram lowConfidence = loadProgram("low-confidence.decode");
  const DecodeProgram entropyBound = loadProgram("entropy-bound.decode");
  size_t plans = 0;
  for (const Case &c : grid()) {
    SCOPED_TRACE(c.describe());
    PlanRecordingModel legacy(c.seed);
    StatusOr<DecodeOutcome> legacyOutcome =
        sampling::decode(legacy, c.facts(), c.legacyRequest(), nullptr);
    ASSERT_TRUE(legacyOutcome.isOk()) << legacyOutcome.status().message();
    PlanRecordingModel interpreted(c.seed);
    const Decoded run = runProgram(c.entropy ? entropyBound : lowConfidence, interpreted, c);
    ASSERT_TRUE(run.outcome.isOk()) << run.outcome.status().message();
    ASSERT_EQ(legacy.plans.size(), interpreted.plans.size());
    for (size_t i = 0; i < legacy.plans.size(); ++i)
      ASSERT_EQ(legacy.plans[i], interpreted.plans[i]) << "plan " << i;
    plans += legacy.plans.size();
  }
  EXPECT_GT(plans, 100u);
}

} // namespace
} // namespace dlm::program
