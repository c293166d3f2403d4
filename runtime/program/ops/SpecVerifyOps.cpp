// The `spec_verify` record (runtime/schema/DecodeOps.td): the target's logit rows judge the
// window's draft tokens in order; the first that fails is replaced, and when none fails the last
// row gives a bonus token. The arithmetic is runtime/sampling/SpeculativeVerify.h's.
#include "runtime/program/DecodeProgramSpec.h"
#include "runtime/program/InterpreterState.h"
#include "runtime/sampling/CounterRng.h"
#include "runtime/sampling/SamplingMath.h"
#include "runtime/sampling/SpeculativeVerify.h"

#include <cmath>

namespace dlm::program::detail {

namespace dspec = spec::decode;

namespace {

using namespace dspec::spec_verify_params;

struct Verification {
  bool topLogitsRule = false; // fast_verify
  int64_t topLogits = 0;
  int64_t verifyCount = -1; // -1: every draft
  double temperature = 0;
  double alpha = 1;
  int64_t topK = 0;
  double topP = 1;
  uint64_t stepKey = 0;
  const std::vector<float> *draftLogits = nullptr;
};

int32_t argmaxOf(const float *logits, int64_t vocab) {
  return sampling::decodeRow(logits, vocab, 0.0, 0, sampling::kNoExcludedToken).token;
}

// p (or q) of one row: the temperature, then the top-k / top-p filter when one is set.
void distribution(State &state, const Verification &v, const float *logits, double temperature,
                  std::vector<double> &out) {
  const bool filtered = v.topK > 0 || v.topP < 1.0;
  if (filtered)
    sampling::topKTopPFilter(logits, state.vocab, temperature, v.topK, v.topP,
                             sampling::kNoExcludedToken, state.allowedTokens, state.tokenOrder);
  sampling::rowDistribution(logits, state.vocab, temperature,
                            filtered ? state.allowedTokens.data() : nullptr, out);
}

double drawUniform(const Verification &v, int64_t position, uint64_t which) {
  return sampling::rng::uniform(sampling::rng::positionKey(v.stepKey, position), which);
}

// fast_verify: the draft's logit is at least the k-th largest of its row.
bool amongTopLogits(const float *row, int64_t vocab, int32_t draft, int64_t k) {
  int64_t above = 0;
  for (int64_t t = 0; t < vocab; ++t)
    above += row[t] > row[draft];
  return above < k;
}

// Row j of the window: whether its draft passes; when it does not, `token` replaces it.
bool verifyRow(State &state, const Verification &v, int64_t j, int32_t &token) {
  const int64_t position = state.windowBegin + j;
  const int32_t draft = state.seq[static_cast<size_t>(position)];
  const float *target = state.logits.row(j);
  if (v.verifyCount >= 0 && j >= v.verifyCount)
    return true;
  if (v.topLogitsRule) {
    token = argmaxOf(target, state.vocab);
    return amongTopLogits(target, state.vocab, draft, v.topLogits);
  }
  if (v.temperature <= 0) {
    token = argmaxOf(target, state.vocab);
    return token == draft;
  }
  distribution(state, v, target, v.temperature, state.targetProbabilities);
  const float *draftRow = v.draftLogits->data() + j * state.vocab;
  distribution(state, v, draftRow, 1.0, state.draftProbabilities);
  const size_t d = static_cast<size_t>(draft);
  if (sampling::draftPasses(state.targetProbabilities[d], state.draftProbabilities[d], v.alpha,
                            drawUniform(v, position, 0)))
    return true;
  const ProgramTestHooks *hooks = state.request.testHooks;
  const double u = drawUniform(v, position, 1);
  token = hooks && hooks->verifyWithoutResidual
              ? sampling::drawFromWeights(state.targetProbabilities, u)
              : sampling::drawResidual(state.targetProbabilities, state.draftProbabilities, u,
                                       state.residual);
  return false;
}

// The token after K passed drafts: row K's argmax, or a draw from its p.
int32_t bonusToken(State &state, const Verification &v, int64_t rows) {
  const float *target = state.logits.row(rows);
  if (v.temperature <= 0)
    return argmaxOf(target, state.vocab);
  distribution(state, v, target, v.temperature, state.targetProbabilities);
  return sampling::drawFromWeights(state.targetProbabilities,
                                   drawUniform(v, state.windowBegin + rows, 1));
}

StatusOr<Verification> verification(State &state, const Instruction &in, size_t at) {
  Verification v;
  v.temperature = state.real(in[kTemperature]);
  if (!(v.temperature >= 0) || !std::isfinite(v.temperature))
    return state.error(at, "temperature must be finite and >= 0");
  if (in[kAlpha].given())
    v.alpha = state.real(in[kAlpha]);
  if (in[kTopK].given())
    v.topK = state.integer(in[kTopK]);
  if (in[kTopP].given())
    v.topP = state.real(in[kTopP]);
  if (!std::isfinite(v.alpha) || v.topK < 0 || !(v.topP > 0 && v.topP <= 1))
    return state.error(at, "alpha must be finite, top_k >= 0 and top_p in (0, 1]");
  if (in[kVerifyCount].given() && (v.verifyCount = state.integer(in[kVerifyCount])) < 0)
    return state.error(at, "verify_count must be >= 0, got " + std::to_string(v.verifyCount));
  v.topLogitsRule = in[kRule].given() && in[kRule].choice == dspec::spec_verify_params::kRuleTopLogits;
  if (v.topLogitsRule && (v.topLogits = state.integer(in[kTopLogits])) < 1)
    return state.error(at, "top_logits must be >= 1, got " + std::to_string(v.topLogits));
  v.stepKey = sampling::rng::stepKey(state.request.seed, state.request.request,
                                     sampling::rng::kStreamVerify,
                                     static_cast<uint64_t>(state.integer(in[kStep])));
  if (v.temperature > 0 && !v.topLogitsRule) {
    if (!in[kDraftLogits].given())
      return state.error(at, "a sampled verification needs the draft's logits (draft_logits)");
    v.draftLogits = &state.reg(in[kDraftLogits]).logits;
    if (static_cast<int64_t>(v.draftLogits->size()) != state.rows() * state.vocab)
      return state.error(at, "draft_logits holds " +
                                 std::to_string(static_cast<int64_t>(v.draftLogits->size()) /
                                                state.vocab) +
                                 " rows for " + std::to_string(state.rows()) + " drafts");
  }
  return v;
}

} // namespace

Status runSpecVerify(State &state, const Instruction &in, size_t at) {
  const int64_t drafts = state.rows();
  if (!state.hasLogits || state.logits.rows != drafts + 1)
    return state.error(at, "verifying " + std::to_string(drafts) + " drafts needs " +
                               std::to_string(drafts + 1) + " logit rows, not " +
                               std::to_string(state.hasLogits ? state.logits.rows : 0));
  StatusOr<Verification> v = verification(state, in, at);
  if (!v)
    return v.status();
  int64_t accepted = 0;
  int32_t token = -1;
  while (accepted < drafts && verifyRow(state, *v, accepted, token))
    ++accepted;
  if (accepted == drafts)
    token = bonusToken(state, *v, drafts);
  state.reg(in[kAccepted]).scalar.integer = accepted;
  state.reg(in[kToken]).scalar.integer = token;
  return Status::ok();
}

} // namespace dlm::program::detail
