// Resolving a denoise_loop's steps into a sampling::LoopPlan. The body is run "dry" once per
// step: the ALU records, list_at and the `if`s execute on the real registers (restored at the
// end), and the five step records are read into the step's plan instead of running. A register
// is dynamic when a row record writes it or an ALU record computes it from a dynamic one; no
// `if` and no step parameter may read one. Nothing here knows a policy or a knob.
#include "runtime/program/LoopPlanBuilder.h"

#include "runtime/program/DecodeProgramSpec.h"

#include <algorithm>
#include <string>
#include <vector>

namespace dlm::program::detail {

namespace dspec = spec::decode;

namespace {

// The loop plan's types (LoopPlan, StepPlan and its steps), which this file reads throughout.
using namespace sampling;

// Records the dry run evaluates rather than reads into the plan.
bool isEvaluated(OpKind op) { return isScalarOp(op) || op == OpKind::listAt; }

bool isControl(OpKind op) {
  return op == OpKind::ifThen || op == OpKind::elseBranch || op == OpKind::end;
}

constexpr OpKind kStepRecords[] = {OpKind::forward, OpKind::sample, OpKind::accept, OpKind::gate,
                                   OpKind::renoise};

bool sameRegister(const Operand &a, const Operand &b) {
  return a.source == Operand::Source::reg && b.source == Operand::Source::reg && a.index == b.index;
}

// The registers the step records wire together, as a device loop wires its buffers.
struct Wiring {
  bool tempered = false;
  const Operand *sampled = nullptr; // gumbel_max: token; tempered: sample
  const Operand *score = nullptr;   // gumbel_max: confidence; tempered: entropy
  const Operand *argmax = nullptr;  // tempered only
  const Operand *keep = nullptr;    // the accept's
  const Operand *converged = nullptr;
  const Operand *done = nullptr; // the gate's
  bool sampleMasked = false;
};

class PlanBuilder {
public:
  PlanBuilder(State &state, size_t loop)
      : state_(state), code_(state.program.code()), loop_(loop),
        // The loader put `until` last in the loop, before its `end`.
        until_(static_cast<size_t>(code_[loop].target) - 1), dynamic_(state.registers.size(), 0) {}

  StatusOr<LoopPlan> build(int64_t limit, bool capped, int64_t base) {
    DLM_RETURN_IF_ERROR(checkNothingReadOutside());
    markRowResults();
    std::vector<Scalar> saved(state_.registers.size());
    for (size_t r = 0; r < saved.size(); ++r)
      saved[r] = state_.registers[r].scalar;
    LoopPlan plan;
    Status resolved = resolveSteps(plan, limit, base);
    for (size_t r = 0; r < saved.size(); ++r)
      state_.registers[r].scalar = saved[r];
    DLM_RETURN_IF_ERROR(resolved);
    plan.capped = capped;
    plan.sequence = state_.seq.data();
    plan.total = static_cast<int64_t>(state_.seq.size());
    plan.begin = state_.windowBegin;
    plan.end = state_.windowEnd;
    plan.maskToken = static_cast<int32_t>(state_.mask);
    plan.seed = state_.request.seed;
    plan.request = state_.request.request;
    constexpr size_t kUnroll = dspec::paramIndex(dspec::kDenoiseLoopParams, "unroll");
    const Operand &unroll = code_[loop_][kUnroll];
    plan.unroll = unroll.given() ? unroll.integer : 0;
    return plan;
  }

private:
  Status whyNot(const std::string &message) const {
    return Status::error(state_.program.where(loop_) + ": no loop plan: " + message);
  }

  bool isBody(size_t pc) const { return pc > loop_ && pc <= until_; }

  // A device loop updates only seq[window] and `ran`: every other register the loop writes
  // (its index and global step included) must be dead after it.
  Status checkNothingReadOutside() const {
    namespace denoise = dspec::denoise_loop_params;
    std::vector<uint8_t> written(state_.registers.size(), 0);
    for (size_t p : {denoise::kIndex, denoise::kGlobal})
      written[static_cast<size_t>(code_[loop_][p].index)] = 1;
    for (size_t pc = loop_ + 1; pc <= until_; ++pc)
      for (size_t p = 0; p < code_[pc].operands.size(); ++p)
        if (code_[pc].writesParam(p))
          written[static_cast<size_t>(code_[pc][p].index)] = 1;
    for (size_t pc = 0; pc < code_.size(); ++pc) {
      if (isBody(pc))
        continue;
      const Instruction &in = code_[pc];
      for (size_t p = 0; p < in.operands.size(); ++p)
        if (in.readsParam(p) && written[static_cast<size_t>(in[p].index)])
          return whyNot(state_.program.where(pc) + " reads '%" +
                        state_.program.registers()[static_cast<size_t>(in[p].index)].name +
                        "', which the loop writes");
    }
    return Status::ok();
  }

  void markRowResults() {
    for (size_t pc = loop_ + 1; pc <= until_; ++pc)
      if (!isEvaluated(code_[pc].op))
        for (size_t p = 0; p < code_[pc].operands.size(); ++p)
          if (code_[pc].writesParam(p))
            dynamic_[static_cast<size_t>(code_[pc][p].index)] = 1;
  }

  bool isDynamic(const Operand &operand) const {
    return operand.source == Operand::Source::reg && dynamic_[static_cast<size_t>(operand.index)];
  }

  Status requireStatic(const Instruction &in, size_t pc, std::initializer_list<size_t> params) {
    for (size_t p : params)
      if (in[p].given() && isDynamic(in[p]))
        return whyNot(state_.program.where(pc) + " reads a value computed from the rows");
    return Status::ok();
  }

  Status resolveSteps(LoopPlan &plan, int64_t limit, int64_t base) {
    namespace denoise = dspec::denoise_loop_params;
    const Instruction &loop = code_[loop_];
    plan.steps.resize(static_cast<size_t>(limit));
    for (int64_t i = 0; i < limit; ++i) {
      state_.reg(loop[denoise::kIndex]).scalar.integer = i;
      state_.reg(loop[denoise::kGlobal]).scalar.integer = base + i;
      DLM_RETURN_IF_ERROR(resolveStep(i, plan.steps[static_cast<size_t>(i)]));
    }
    return Status::ok();
  }

  Status resolveStep(int64_t i, StepPlan &step) {
    Wiring wiring;
    size_t found = 0;
    size_t pc = loop_ + 1;
    while (pc < until_) {
      const Instruction &in = code_[pc];
      if (isEvaluated(in.op)) {
        DLM_RETURN_IF_ERROR(evaluate(in, pc));
        ++pc;
        continue;
      }
      if (isControl(in.op)) {
        DLM_ASSIGN_OR_RETURN(pc, branch(in, pc));
        continue;
      }
      if (found == std::size(kStepRecords) || in.op != kStepRecords[found])
        return whyNot("step " + std::to_string(i) + " runs " + state_.program.where(pc) +
                      " out of forward, sample, accept, gate, renoise order");
      DLM_RETURN_IF_ERROR(readRecord(in, pc, step, wiring));
      ++found;
      ++pc;
    }
    if (found != std::size(kStepRecords))
      return whyNot("step " + std::to_string(i) + " lacks a step record");
    if (!sameRegister(code_[until_][dspec::condition_params::kCond], *wiring.done))
      return whyNot("'until' does not test the gate's verdict");
    return Status::ok();
  }

  // An ALU record or list_at: run it, its result dynamic when an input is.
  Status evaluate(const Instruction &in, size_t pc) {
    bool anyDynamic = false;
    for (size_t p = 0; p < in.operands.size(); ++p)
      if (in.readsParam(p) && isDynamic(in[p]))
        anyDynamic = true;
    Status ran = in.op == OpKind::listAt ? runListAt(state_, in, pc) : runScalarOp(state_, in, pc);
    // The host may never reach the failing step; it runs the loop and fails there if it does.
    if (!ran.isOk())
      return whyNot(ran.message());
    for (size_t p = 0; p < in.operands.size(); ++p)
      if (in.writesParam(p))
        dynamic_[static_cast<size_t>(in[p].index)] = anyDynamic;
    return Status::ok();
  }

  StatusOr<size_t> branch(const Instruction &in, size_t pc) {
    if (in.op == OpKind::end)
      return pc + 1;
    if (in.op == OpKind::elseBranch)
      return static_cast<size_t>(in.target) + 1;
    const Operand &cond = in[dspec::condition_params::kCond];
    if (isDynamic(cond))
      return whyNot(state_.program.where(pc) + " branches on a value computed from the rows");
    return state_.boolean(cond) ? pc + 1 : static_cast<size_t>(in.target) + 1;
  }

  Status readRecord(const Instruction &in, size_t pc, StepPlan &step, Wiring &wiring) {
    switch (in.op) {
    case OpKind::forward:
      return readForward(in, pc, step.forward);
    case OpKind::sample:
      return readSample(in, pc, step.sample, wiring);
    case OpKind::accept:
      return readAccept(in, pc, step.accept, wiring);
    case OpKind::gate:
      return readGate(in, pc, step.gate, wiring);
    default:
      return readRenoise(in, pc, step.renoise, wiring);
    }
  }

  Status readForward(const Instruction &in, size_t pc, ForwardStep &forward) {
    using namespace dspec::forward_params;
    DLM_RETURN_IF_ERROR(requireStatic(in, pc, {kCount, kKeep, kFeedEnd, kRowBegin, kRowEnd}));
    if (in[kDecoded].given() && !in[kDecoded].boolean)
      return whyNot(state_.program.where(pc) + " is not decoded");
    const int mode = in[kMode].choice;
    if (mode == kModeAppend || mode == kModeExtend || in[kFunction].given() || in[kInput].given() ||
        in[kInputScale].given() || in[kInputAt].given() || in[kCapture].given())
      return whyNot(state_.program.where(pc) + " runs a named function, an input, a capture, an "
                                               "append or an extend, which no device loop does");
    forward.mode = mode == kModeWindow   ? ForwardStep::Mode::window
                   : mode == kModeCached ? ForwardStep::Mode::cached
                                         : ForwardStep::Mode::full;
    forward.count = state_.integer(in[kCount]);
    forward.keep = state_.integer(in[kKeep]);
    forward.feedEnd = mode == kModeWindow ? state_.integer(in[kFeedEnd]) : forward.count;
    forward.rowBegin = state_.integer(in[kRowBegin]);
    forward.rowEnd = state_.integer(in[kRowEnd]);
    // The device samples the window's rows from the forward's.
    if (forward.rowBegin != state_.windowBegin || forward.rowEnd != state_.windowEnd)
      return whyNot(state_.program.where(pc) + " returns rows other than the window's");
    return Status::ok();
  }

  Status readSample(const Instruction &in, size_t pc, SampleStep &sample, Wiring &wiring) {
    using namespace dspec::sample_params;
    DLM_RETURN_IF_ERROR(requireStatic(in, pc, {kTemperature, kExcluded, kStep}));
    if (isF32(in[kPrecision]))
      return whyNot(state_.program.where(pc) + " samples in float32, which no device loop does");
    if (in[kTopK].given() || in[kTopP].given())
      return whyNot(state_.program.where(pc) + " filters by top-k / top-p, which no device loop "
                                               "does");
    wiring.tempered = in[kKind].choice == kKindTempered;
    sample.kind = wiring.tempered ? SampleStep::Kind::tempered : SampleStep::Kind::gumbelMax;
    sample.temperature = state_.real(in[kTemperature]);
    sample.excluded = state_.integer(in[kExcluded]);
    sample.rngStep = state_.integer(in[kStep]);
    wiring.sampled = &in[wiring.tempered ? kSample : kToken];
    wiring.score = &in[wiring.tempered ? kEntropy : kConfidence];
    wiring.argmax = wiring.tempered ? &in[kArgmax] : nullptr;
    wiring.sampleMasked = in[kCandidates].choice == kCandidatesMasked;
    return Status::ok();
  }

  Status readAccept(const Instruction &in, size_t pc, AcceptStep &accept, Wiring &wiring) {
    using namespace dspec::accept_params;
    DLM_RETURN_IF_ERROR(
        requireStatic(in, pc, {kTopK, kThreshold, kBound, kStability, kConfidence}));
    if (isF32(in[kPrecision]))
      return whyNot(state_.program.where(pc) + " decides in float32, which no device loop does");
    if (!sameRegister(in[kScore], *wiring.score))
      return whyNot(state_.program.where(pc) + " scores other than the sample's score");
    accept.candidates = in[kCandidates].choice == kCandidatesMasked ? AcceptStep::Candidates::masked
                                                                    : AcceptStep::Candidates::all;
    if ((accept.candidates == AcceptStep::Candidates::masked) != wiring.sampleMasked)
      return whyNot(state_.program.where(pc) + " has other candidates than the sample");
    const int rule = in[kRule].choice;
    if (rule == kRuleTopK) {
      accept.rule = AcceptStep::Rule::topK;
      accept.k = state_.integer(in[kTopK]);
    } else if (rule == kRuleThreshold) {
      accept.rule = AcceptStep::Rule::threshold;
      accept.threshold = state_.real(in[kThreshold]);
    } else if (rule == kRuleEntropyBound) {
      accept.rule = AcceptStep::Rule::entropyBound;
      accept.bound = state_.real(in[kBound]);
    } else {
      return whyNot(state_.program.where(pc) + " has a rule no device loop runs");
    }
    wiring.keep = &in[kKeep];
    wiring.converged = nullptr;
    if (in[kConverge].given() && in[kConverge].choice == kConvergeStableConfident)
      return readConvergence(in, pc, accept, wiring);
    return Status::ok();
  }

  // A device loop starts every loop's convergence state afresh: prev all -1, run 0.
  Status readConvergence(const Instruction &in, size_t pc, AcceptStep &accept, Wiring &wiring) {
    using namespace dspec::accept_params;
    if (!wiring.argmax || !sameRegister(in[kArgmax], *wiring.argmax))
      return whyNot(state_.program.where(pc) + " converges on other than the sample's argmax");
    const std::vector<int32_t> &prev = state_.reg(in[kPrev]).tokens;
    const bool fresh = static_cast<int64_t>(prev.size()) == state_.rows() &&
                       std::all_of(prev.begin(), prev.end(), [](int32_t t) { return t == -1; }) &&
                       state_.reg(in[kRun]).scalar.integer == 0;
    if (!fresh)
      return whyNot(state_.program.where(pc) + " does not start its convergence afresh");
    accept.converge = AcceptStep::Converge::stableConfident;
    accept.stability = state_.integer(in[kStability]);
    accept.confidence = state_.real(in[kConfidence]);
    wiring.converged = &in[kConverged];
    return Status::ok();
  }

  Status readGate(const Instruction &in, size_t pc, GateStep &gate, Wiring &wiring) {
    using namespace dspec::gate_params;
    DLM_RETURN_IF_ERROR(requireStatic(in, pc, {kLast}));
    if (!sameRegister(in[kKeep], *wiring.keep))
      return whyNot(state_.program.where(pc) + " gates other than the accept's keep");
    wiring.done = &in[kDone];
    if (in[kRule].choice == kRuleNoMaskLeft) {
      gate.rule = GateStep::Rule::noMaskLeft;
      return Status::ok();
    }
    gate.rule = GateStep::Rule::convergedOrLast;
    gate.last = in[kLast].given() && state_.boolean(in[kLast]);
    // Finished, the device commits the sampler's argmax over its sample.
    if (!wiring.converged || !sameRegister(in[kConverged], *wiring.converged) || !wiring.argmax ||
        !sameRegister(in[kFinal], *wiring.argmax) || !sameRegister(in[kSampled], *wiring.sampled))
      return whyNot(state_.program.where(pc) + " is not wired to the sample and accept");
    return Status::ok();
  }

  Status readRenoise(const Instruction &in, size_t pc, RenoiseStep &renoise, Wiring &wiring) {
    using namespace dspec::renoise_params;
    DLM_RETURN_IF_ERROR(requireStatic(in, pc, {kNoise, kStep}));
    if (!sameRegister(in[kKeep], *wiring.keep) || !sameRegister(in[kSampled], *wiring.sampled))
      return whyNot(state_.program.where(pc) + " is not wired to the sample and accept");
    const int noise = state_.choice(in[kNoise], dspec::kRenoiseParams[kNoise].choices);
    if (noise < 0)
      return whyNot(state_.program.where(pc) + " has an unknown noise");
    renoise.noise = noise == kNoiseUniform ? RenoiseStep::Noise::uniform : RenoiseStep::Noise::mask;
    renoise.candidates = in[kCandidates].choice == kCandidatesMaskedOnly
                             ? RenoiseStep::Candidates::maskedOnly
                             : RenoiseStep::Candidates::everyRejected;
    renoise.rngStep = state_.integer(in[kStep]);
    return Status::ok();
  }

  State &state_;
  const std::vector<Instruction> &code_;
  const size_t loop_;
  const size_t until_;
  std::vector<uint8_t> dynamic_;
};

} // namespace

StatusOr<LoopPlan> buildLoopPlan(State &state, size_t loop, int64_t limit, bool capped,
                                 int64_t base) {
  return PlanBuilder(state, loop).build(limit, capped, base);
}

} // namespace dlm::program::detail
