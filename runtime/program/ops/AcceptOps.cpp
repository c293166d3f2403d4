// The records that turn a step's decisions into the next canvas: `accept` (which candidates a
// step keeps, and whether an entropy-bound canvas has converged), `gate` (whether the step ends
// its block) and `renoise` (writing the canvas). The rules are sampling::confidenceOrder,
// sampling::entropyAccept and sampling::hierarchicalAccept (SamplingMath.h).
#include "runtime/program/DecodeProgramSpec.h"
#include "runtime/program/InterpreterState.h"
#include "runtime/sampling/CounterRng.h"
#include "runtime/sampling/SamplingMath.h"

#include <algorithm>

namespace dlm::program::detail {

namespace dspec = spec::decode;

namespace {

namespace accept = dspec::accept_params;

// Gathers the candidates' rows, positions and scores into the state's scratch.
void gatherCandidates(State &state, bool maskedOnly, const std::vector<double> &score) {
  state.candidateRows.clear();
  state.positions.clear();
  state.scores.clear();
  for (int64_t j = 0; j < state.rows(); ++j) {
    if (maskedOnly && !state.isMask(j))
      continue;
    state.candidateRows.push_back(j);
    state.positions.push_back(state.windowBegin + j);
    state.scores.push_back(score[static_cast<size_t>(j)]);
  }
}

// The first `take` candidates by descending score (ties to the lower position).
void keepMostConfident(State &state, int64_t take, std::vector<uint8_t> &keep) {
  sampling::confidenceOrder(state.scores, state.positions, state.order);
  take = std::min(take, static_cast<int64_t>(state.positions.size()));
  for (int64_t s = 0; s < take; ++s)
    keep[static_cast<size_t>(state.candidateRows[static_cast<size_t>(state.order[s])])] = 1;
}

// The first `take` candidates by position (gatherCandidates lists them in row order).
void keepLeftmost(State &state, int64_t take, std::vector<uint8_t> &keep) {
  take = std::min(take, static_cast<int64_t>(state.candidateRows.size()));
  for (int64_t s = 0; s < take; ++s)
    keep[static_cast<size_t>(state.candidateRows[static_cast<size_t>(s)])] = 1;
}

// keep[row] for every candidate the rule accepted (state.accepted, in candidate order).
void keepAccepted(const State &state, std::vector<uint8_t> &keep) {
  for (size_t c = 0; c < state.accepted.size(); ++c)
    keep[static_cast<size_t>(state.candidateRows[c])] = state.accepted[c];
}

bool isF32(const Instruction &in) { return program::isF32(in[accept::kPrecision]); }

// score > threshold, both rounded to float32 when `f32` (as torch compares a float32 tensor with
// a Python float).
bool exceeds(double score, double threshold, bool f32) {
  return f32 ? static_cast<float>(score) > static_cast<float>(threshold) : score > threshold;
}

// run := (argmax == prev) ? run + 1 : 0; prev := argmax; converged when the argmax canvas has
// been the same for `stability` steps and the mean score (entropy) is below `confidence`.
Status converge(State &state, const Instruction &in, size_t at, const std::vector<double> &score) {
  using namespace accept;
  StatusOr<const std::vector<int32_t> *> argmax = state.tokensRow(in[kArgmax], at);
  if (!argmax)
    return argmax.status();
  std::vector<int32_t> &prev = state.reg(in[kPrev]).tokens;
  int64_t &run = state.reg(in[kRun]).scalar.integer;
  run = prev == **argmax ? run + 1 : 0;
  prev = **argmax;
  double sum = 0;
  for (double s : score)
    sum += s;
  const double mean = sum / static_cast<double>(score.size());
  // precision=f32: the float32 mean against the threshold rounded to float32. The float32
  // scores are summed in double and rounded once, which can differ from torch's float32
  // reduction in the last bit; only a mean within an ulp of the threshold would decide otherwise.
  const bool confident =
      isF32(in) ? static_cast<float>(mean) < static_cast<float>(state.real(in[kConfidence]))
                : mean < state.real(in[kConfidence]);
  state.reg(in[kConverged]).scalar.boolean = run >= state.integer(in[kStability]) && confident;
  return Status::ok();
}

} // namespace

Status runAccept(State &state, const Instruction &in, size_t at) {
  using namespace accept;
  StatusOr<const std::vector<double> *> score = state.realsRow(in[kScore], at);
  if (!score)
    return score.status();
  gatherCandidates(state, in[kCandidates].choice == kCandidatesMasked, **score);
  std::vector<uint8_t> &keep = state.reg(in[kKeep]).flags;
  keep.assign(static_cast<size_t>(state.rows()), 0);
  const int rule = in[kRule].choice;
  if (rule == kRuleTopK) {
    keepMostConfident(state, state.integer(in[kTopK]), keep);
  } else if (rule == kRuleThreshold) {
    const double threshold = state.real(in[kThreshold]);
    const int64_t confident = std::count_if(state.scores.begin(), state.scores.end(),
                                            [&](double c) { return c >= threshold; });
    keepMostConfident(state, std::max<int64_t>(confident, 1), keep);
  } else if (rule == kRuleThresholdQuota) {
    const double threshold = state.real(in[kThreshold]);
    const bool f32 = isF32(in);
    const int64_t above = std::count_if(state.scores.begin(), state.scores.end(),
                                        [&](double c) { return exceeds(c, threshold, f32); });
    keepMostConfident(state, std::max(above, state.integer(in[kTopK])), keep);
  } else if (rule == kRuleLeftmost) {
    keepLeftmost(state, state.integer(in[kTopK]), keep);
  } else if (rule == kRuleHierarchical) {
    const sampling::HierarchicalRule hierarchical{
        state.real(in[kThreshold]), state.real(in[kLowThreshold]), state.integer(in[kDepth])};
    sampling::hierarchicalAccept(state.scores, state.positions, hierarchical, state.segments,
                                 state.accepted);
    keepAccepted(state, keep);
  } else if (isF32(in)) {
    sampling::entropyAcceptF32(state.scores, static_cast<float>(state.real(in[kBound])),
                               state.order, state.accepted);
    keepAccepted(state, keep);
  } else {
    sampling::entropyAccept(state.scores, state.real(in[kBound]), state.order, state.accepted);
    keepAccepted(state, keep);
  }
  if (in[kConverge].given() && in[kConverge].choice == kConvergeStableConfident)
    return converge(state, in, at, **score);
  return Status::ok();
}

Status runGate(State &state, const Instruction &in, size_t at) {
  using namespace dspec::gate_params;
  StatusOr<const std::vector<uint8_t> *> keep = state.flagsRow(in[kKeep], at);
  if (!keep)
    return keep.status();
  bool &done = state.reg(in[kDone]).scalar.boolean;
  if (in[kRule].choice == kRuleNoMaskLeft) {
    done = true;
    for (int64_t j = 0; j < state.rows() && done; ++j)
      done = !(state.isMask(j) && !(**keep)[static_cast<size_t>(j)]);
    return Status::ok();
  }
  done = state.boolean(in[kConverged]) || state.boolean(in[kLast]);
  if (!done)
    return Status::ok();
  StatusOr<const std::vector<int32_t> *> final = state.tokensRow(in[kFinal], at);
  if (!final)
    return final.status();
  // The block ends on the final canvas: every row kept, taking `final`.
  state.reg(in[kKeep]).flags.assign(static_cast<size_t>(state.rows()), 1);
  state.reg(in[kSampled]).tokens = **final;
  return Status::ok();
}

Status runEdit(State &state, const Instruction &in, size_t at) {
  using namespace dspec::edit_params;
  StatusOr<const std::vector<double> *> score = state.realsRow(in[kScore], at);
  if (!score)
    return score.status();
  StatusOr<const std::vector<int32_t> *> sampled = state.tokensRow(in[kSampled], at);
  if (!sampled)
    return sampled.status();
  const double threshold = state.real(in[kThreshold]);
  const bool f32 = program::isF32(in[kPrecision]);
  std::vector<uint8_t> &edited = state.reg(in[kEdited]).flags;
  edited.assign(static_cast<size_t>(state.rows()), 0);
  int64_t &count = state.reg(in[kCount]).scalar.integer;
  count = 0;
  for (int64_t j = 0; j < state.rows(); ++j) {
    const int64_t position = state.windowBegin + j;
    const int32_t token = (**sampled)[static_cast<size_t>(j)];
    const double c = (**score)[static_cast<size_t>(j)];
    if (state.isMask(j) || position < state.promptLength || !exceeds(c, threshold, f32) ||
        token == state.seq[static_cast<size_t>(position)])
      continue;
    if (token < 0 || token >= state.vocab)
      return state.error(at, "token " + std::to_string(token) + " is outside the vocabulary");
    state.seq[static_cast<size_t>(position)] = token;
    edited[static_cast<size_t>(j)] = 1;
    ++count;
  }
  return Status::ok();
}

Status runEosStop(State &state, const Instruction &in, size_t at) {
  using namespace dspec::eos_stop_params;
  StatusOr<const std::vector<uint8_t> *> keep = state.flagsRow(in[kKeep], at);
  if (!keep)
    return keep.status();
  StatusOr<const std::vector<uint8_t> *> edited = state.flagsRow(in[kEdited], at);
  if (!edited)
    return edited.status();
  StatusOr<const std::vector<int32_t> *> sampled = state.tokensRow(in[kSampled], at);
  if (!sampled)
    return sampled.status();
  bool &finished = state.reg(in[kFinished]).scalar.boolean;
  finished = false;
  bool wroteEos = false;
  for (int64_t j = 0; j < state.rows() && !wroteEos; ++j)
    wroteEos = ((**keep)[static_cast<size_t>(j)] || (**edited)[static_cast<size_t>(j)]) &&
               state.facts.isEos((**sampled)[static_cast<size_t>(j)]);
  if (!wroteEos)
    return Status::ok();
  // The first EOS of the sequence up to the window's end: finished when it is generated and
  // every position between the prompt and it is decoded.
  for (int64_t position = 0; position < state.windowEnd; ++position) {
    const int32_t token = state.seq[static_cast<size_t>(position)];
    if (position >= state.promptLength && token == state.mask)
      return Status::ok();
    if (state.facts.isEos(token)) {
      finished = position >= state.promptLength;
      return Status::ok();
    }
  }
  return Status::ok();
}

Status runRenoise(State &state, const Instruction &in, size_t at) {
  using namespace dspec::renoise_params;
  StatusOr<const std::vector<uint8_t> *> keep = state.flagsRow(in[kKeep], at);
  if (!keep)
    return keep.status();
  StatusOr<const std::vector<int32_t> *> sampled = state.tokensRow(in[kSampled], at);
  if (!sampled)
    return sampled.status();
  const int noise = state.choice(in[kNoise], dspec::kRenoiseParams[kNoise].choices);
  if (noise < 0)
    return state.error(at, "unknown noise '" + state.text(in[kNoise]) + "'");
  const bool maskedOnly = in[kCandidates].choice == kCandidatesMaskedOnly;
  const int64_t step = state.integer(in[kStep]);
  const uint64_t stepKey = sampling::rng::stepKey(state.request.seed, state.request.request,
                                                  sampling::rng::kStreamRenoise,
                                                  static_cast<uint64_t>(step));
  const ProgramTestHooks *hooks = state.request.testHooks;
  const bool hooked = hooks && hooks->renoiseToken;
  for (int64_t j = 0; j < state.rows(); ++j) {
    if (maskedOnly && !state.isMask(j))
      continue;
    const int64_t position = state.windowBegin + j;
    int32_t &token = state.seq[static_cast<size_t>(position)];
    if ((**keep)[static_cast<size_t>(j)])
      token = (**sampled)[static_cast<size_t>(j)];
    else if (noise == kNoiseUniform && hooked)
      token = hooks->renoiseToken(step, position);
    else if (noise == kNoiseUniform)
      token = static_cast<int32_t>(
          sampling::rng::randomToken(sampling::rng::positionKey(stepKey, position), state.vocab));
    else
      token = static_cast<int32_t>(state.mask);
  }
  return Status::ok();
}

} // namespace dlm::program::detail
