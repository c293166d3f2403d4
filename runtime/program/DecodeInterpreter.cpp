// The interpreter's control flow: loops, branches, exits and `until`, over the jump targets the
// loader computed. Everything else is a handler (ops/). Nothing here knows a policy or a knob.
#include "runtime/program/DecodeInterpreter.h"

#include "runtime/program/DecodeProgramSpec.h"
#include "runtime/program/InterpreterState.h"
#include "runtime/program/LoopPlanBuilder.h"

#include <algorithm>
#include <memory>
#include <optional>

namespace dlm::program {

namespace dspec = spec::decode;
using detail::State;

namespace {

namespace block = dspec::block_loop_params;
namespace denoise = dspec::denoise_loop_params;
using dspec::condition_params::kCond;

// A loop being run.
struct Frame {
  int64_t index = 0;
  int64_t limit = 0;   // iterations at most
  bool capped = false; // denoise_loop: reaching `limit` is its cap, not its bound
  int64_t base = 0;    // denoise_loop: the global index of step 0
  std::optional<profile::Scope> scope;
};

Status checkPrompt(const std::vector<int32_t> &prompt, int64_t vocab) {
  if (prompt.empty())
    return Status::error("empty prompt");
  for (int32_t id : prompt)
    if (id < 0 || id >= vocab)
      return Status::error("prompt token id " + std::to_string(id) +
                           " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  return Status::ok();
}

class Executor {
public:
  explicit Executor(State &state)
      : state_(state), code_(state.program.code()),
        frames_(std::make_unique<Frame[]>(code_.size())) {}

  Status run() {
    // A real program runs a few dozen records per forward; a loop that would run past this
    // (an artifact's block_loop of 2^63 empty iterations) fails instead of hanging the request.
    constexpr int64_t kMaxExecutedRecords = int64_t{1} << 28;
    size_t pc = 0;
    for (int64_t executed = 0; pc < code_.size(); ++executed) {
      if (executed == kMaxExecutedRecords)
        return state_.error(pc, "the decode program ran " + std::to_string(executed) +
                                    " records without finishing");
      StatusOr<size_t> next = step(pc);
      if (!next)
        return next.status();
      pc = *next;
    }
    return Status::ok();
  }

private:
  // Runs instruction `pc`; returns the next one.
  StatusOr<size_t> step(size_t pc) {
    const Instruction &in = code_[pc];
    switch (in.op) {
    case OpKind::blockLoop:
      return enterBlockLoop(pc);
    case OpKind::denoiseLoop:
      return enterDenoiseLoop(pc);
    case OpKind::until:
      return until(pc);
    case OpKind::end:
      return end(pc);
    case OpKind::ifThen:
      return state_.boolean(in[kCond]) ? pc + 1 : static_cast<size_t>(in.target) + 1;
    case OpKind::elseBranch:
      return static_cast<size_t>(in.target) + 1; // the then branch is done
    case OpKind::exitIf:
      if (!state_.boolean(in[kCond]))
        return pc + 1;
      frames_[static_cast<size_t>(in.target)].scope.reset();
      return static_cast<size_t>(code_[static_cast<size_t>(in.target)].target) + 1;
    default:
      DLM_RETURN_IF_ERROR(runHandler(in, pc));
      if (const ProgramTestHooks *hooks = state_.request.testHooks; hooks && hooks->afterRecord)
        hooks->afterRecord(state_.program.recordKind(pc), RegisterView(state_));
      return pc + 1;
    }
  }

  Status runHandler(const Instruction &in, size_t at) {
    switch (in.op) {
    case OpKind::check:
      return detail::runCheck(state_, in, at);
    case OpKind::reserve:
      return detail::runReserve(state_, in, at);
    case OpKind::seqExtend:
      return detail::runSeqExtend(state_, in, at);
    case OpKind::window:
      return detail::runWindow(state_, in, at);
    case OpKind::countEq:
      return detail::runCountEq(state_, in, at);
    case OpKind::transferSchedule:
      return detail::runTransferSchedule(state_, in, at);
    case OpKind::listAt:
      return detail::runListAt(state_, in, at);
    case OpKind::fillRow:
      return detail::runFillRow(state_, in, at);
    case OpKind::creditReset:
      return detail::runCreditReset(state_, in, at);
    case OpKind::holdLogits:
      return detail::runHoldLogits(state_, in, at);
    case OpKind::dropLogits:
      return detail::runDropLogits(state_, in, at);
    case OpKind::takeRows:
      return detail::runTakeRows(state_, in, at);
    case OpKind::narrowLogits:
      return detail::runNarrowLogits(state_, in, at);
    case OpKind::seqTruncate:
      return detail::runSeqTruncate(state_, in, at);
    case OpKind::seqWrite:
      return detail::runSeqWrite(state_, in, at);
    case OpKind::kvTrim:
      return detail::runKvTrim(state_, in, at);
    case OpKind::specVerify:
      return detail::runSpecVerify(state_, in, at);
    case OpKind::credit:
      return detail::runCredit(state_, in, at);
    case OpKind::forward:
      return detail::runForward(state_, in, at);
    case OpKind::sample:
      return detail::runSample(state_, in, at);
    case OpKind::accept:
      return detail::runAccept(state_, in, at);
    case OpKind::gate:
      return detail::runGate(state_, in, at);
    case OpKind::renoise:
      return detail::runRenoise(state_, in, at);
    case OpKind::edit:
      return detail::runEdit(state_, in, at);
    case OpKind::eosStop:
      return detail::runEosStop(state_, in, at);
    case OpKind::commit:
      return detail::runCommit(state_, in, at);
    case OpKind::finish:
      return detail::runFinish(state_, in, at);
    default:
      return detail::runScalarOp(state_, in, at);
    }
  }

  void openScope(const Instruction &in, Frame &frame, profile::Category category, int64_t index) {
    if (state_.request.profiler && !in.label.empty())
      frame.scope.emplace(state_.request.profiler, category, in.label.c_str(),
                          profile::TrackKind::request, state_.request.request, -1, -1, index);
  }

  void startBlock(size_t pc) {
    const Instruction &in = code_[pc];
    Frame &frame = frames_[pc];
    state_.reg(in[block::kIndex]).scalar.integer = frame.index;
    openScope(in, frame, profile::Category::block, frame.index);
  }

  size_t enterBlockLoop(size_t pc) {
    const Instruction &in = code_[pc];
    Frame &frame = frames_[pc];
    frame.index = 0;
    frame.limit = state_.integer(in[block::kCount]);
    if (frame.limit <= 0)
      return static_cast<size_t>(in.target) + 1;
    startBlock(pc);
    return pc + 1;
  }

  size_t end(size_t pc) {
    const size_t opener = static_cast<size_t>(code_[pc].target);
    if (code_[opener].op != OpKind::blockLoop)
      return pc + 1; // an if / else
    Frame &frame = frames_[opener];
    frame.scope.reset();
    if (++frame.index >= frame.limit)
      return pc + 1;
    startBlock(opener);
    return opener + 1;
  }

  void startStep(size_t pc) {
    const Instruction &in = code_[pc];
    Frame &frame = frames_[pc];
    const int64_t global = frame.base + frame.index;
    state_.reg(in[denoise::kIndex]).scalar.integer = frame.index;
    state_.reg(in[denoise::kGlobal]).scalar.integer = global;
    openScope(in, frame, profile::Category::step, global);
  }

  // Steps = min(cap, bound) at most (cap < 0: bound).
  StatusOr<size_t> enterDenoiseLoop(size_t pc) {
    const Instruction &in = code_[pc];
    Frame &frame = frames_[pc];
    const int64_t cap = state_.integer(in[denoise::kCap]);
    const int64_t bound = state_.integer(in[denoise::kBound]);
    frame.index = 0;
    frame.base = state_.integer(in[denoise::kBase]);
    frame.capped = cap >= 0 && cap <= bound;
    frame.limit = frame.capped ? cap : bound;
    if (frame.limit <= 0)
      return leaveDenoiseLoop(pc, false);
    DLM_ASSIGN_OR_RETURN(const bool ranOnDevice, runOnDevice(pc));
    if (ranOnDevice)
      return static_cast<size_t>(in.target) + 1;
    startStep(pc);
    return pc + 1;
  }

  // The whole loop on the model's device when its steps resolve into a plan the model serves
  // and no first-logits capture is pending (ForwardRunner::runOnDevice); false: the host runs
  // it. Timed by the enclosing block's scope: per-step timings do not exist there.
  StatusOr<bool> runOnDevice(size_t pc) {
    const Instruction &in = code_[pc];
    const Frame &frame = frames_[pc];
    // A plan holds every step the loop may run; a loop longer than any device loop captures
    // (a request's max_steps, say) runs on the host rather than allocating a plan that size.
    constexpr int64_t kMaxPlanSteps = int64_t{1} << 14;
    // Test hooks replace host draws and watch host records: the host runs the loop.
    if (frame.limit > kMaxPlanSteps || state_.request.testHooks)
      return false;
    StatusOr<sampling::LoopPlan> plan =
        detail::buildLoopPlan(state_, pc, frame.limit, frame.capped, frame.base);
    if (!plan)
      return false;
    StatusOr<std::optional<sampling::BlockLoopResult>> ran =
        state_.runner.runOnDevice(*plan, state_.seq.data() + plan->begin);
    if (!ran)
      return ran.status();
    if (!*ran)
      return false;
    if (!(*ran)->finished && !frame.capped)
      return state_.error(pc, "denoise loop exceeded its bound of " + std::to_string(frame.limit) +
                                  " steps");
    state_.reg(in[denoise::kRan]).scalar.integer = (*ran)->steps;
    // The last step's logits stayed on the device.
    state_.hasLogits = false;
    return true;
  }

  StatusOr<size_t> until(size_t pc) {
    const size_t loop = static_cast<size_t>(code_[pc].target);
    Frame &frame = frames_[loop];
    frame.scope.reset();
    ++frame.index;
    const bool done = state_.boolean(code_[pc][kCond]);
    if (done || frame.index >= frame.limit)
      return leaveDenoiseLoop(loop, done);
    startStep(loop);
    return loop + 1;
  }

  StatusOr<size_t> leaveDenoiseLoop(size_t loop, bool done) {
    const Instruction &in = code_[loop];
    const Frame &frame = frames_[loop];
    if (!done && !frame.capped)
      return state_.error(loop, "denoise loop exceeded its bound of " +
                                    std::to_string(frame.limit) + " steps");
    state_.reg(in[denoise::kRan]).scalar.integer = frame.index;
    return static_cast<size_t>(in.target) + 1;
  }

  State &state_;
  const std::vector<Instruction> &code_;
  std::unique_ptr<Frame[]> frames_;
};

} // namespace

StatusOr<sampling::DecodeOutcome>
DecodeInterpreter::run(sampling::DecodeModel &model, const sampling::TokenFacts &facts,
                       const ProgramRequest &request,
                       const sampling::BlockCallback &onBlock) const {
  profile::Scope timer(request.profiler, profile::Category::request, "request",
                       profile::TrackKind::request, request.request,
                       /*layer=*/-1, static_cast<int64_t>(request.prompt.size()));
  sampling::DecodeOutcome outcome;
  State state(program_, model, facts, request, onBlock, outcome);
  DLM_RETURN_IF_ERROR(
      resolveKnobs(program_, request.knobs, state.knobs, request.declaredElsewhere));
  DLM_RETURN_IF_ERROR(checkPrompt(request.prompt, model.vocabSize()));
  DLM_RETURN_IF_ERROR(Executor(state).run());
  if (!request.initialNoise.empty() && !state.initialNoiseUsed)
    return Status::error("the initial canvas was given, but the decode program never starts a "
                         "canvas from noise");
  return outcome;
}

} // namespace dlm::program
