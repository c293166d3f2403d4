// The `sample` record: one decision per window row from the last forward's logits, through
// sampling::decodeRow (gumbel_max) or sampling::temperedRow / temperedRowF32 (tempered), keyed
// by the counter RNG as the policy loops key them.
#include "runtime/program/DecodeProgramSpec.h"
#include "runtime/program/InterpreterState.h"
#include "runtime/sampling/CounterRng.h"
#include "runtime/sampling/SamplingMath.h"

namespace dlm::program::detail {

namespace dspec = spec::decode;

namespace {

using namespace dspec::sample_params;

// Logits a step's rows must hold before they go over the model's threads: 64 Ki logits at tens
// of nanoseconds each is milliseconds of work, against microseconds to wake the threads.
constexpr int64_t kParallelRowWork = int64_t{1} << 16;

// decide(j) for every row j, over the model's threads (DecodeModel::forEachRow) when the rows
// hold enough logits; decide gives each row the same result on any thread.
template <typename Decide> void forEachRow(State &state, size_t rows, Decide &decide) {
  if (static_cast<int64_t>(rows) * state.vocab < kParallelRowWork) {
    for (size_t j = 0; j < rows; ++j)
      decide(j);
    return;
  }
  auto row = [&](int64_t j) { decide(static_cast<size_t>(j)); };
  state.model.forEachRow(static_cast<int64_t>(rows), sampling::RowBody(row));
}

void gumbelMax(State &state, const Instruction &in, bool maskedOnly, uint64_t stepKey) {
  const size_t rows = static_cast<size_t>(state.rows());
  const double temperature = state.real(in[kTemperature]);
  const int64_t excluded = state.integer(in[kExcluded]);
  const int64_t topK = in[kTopK].given() ? state.integer(in[kTopK]) : 0;
  const double topP = in[kTopP].given() ? state.real(in[kTopP]) : 1.0;
  // At temperature 0 the draw is an argmax, which the warpers never change (transformers
  // ignores them when it does not sample).
  const bool filtered = temperature > 0 && (topK > 0 || topP < 1.0);
  std::vector<int32_t> &token = state.reg(in[kToken]).tokens;
  std::vector<double> &confidence = state.reg(in[kConfidence]).reals;
  token.resize(rows);
  confidence.resize(rows);
  auto decide = [&](size_t j) {
    const int64_t position = state.windowBegin + static_cast<int64_t>(j);
    if (maskedOnly && !state.isMask(static_cast<int64_t>(j))) {
      // Not a candidate: no decision, the row keeps its token.
      token[j] = state.seq[static_cast<size_t>(position)];
      confidence[j] = 0;
      return;
    }
    const float *logits = state.logits.row(static_cast<int64_t>(j));
    if (filtered)
      sampling::topKTopPFilter(logits, state.vocab, temperature, topK, topP, excluded,
                               state.allowedTokens, state.tokenOrder);
    const sampling::RowDecision decision =
        sampling::decodeRow(logits, state.vocab, temperature,
                            sampling::rng::positionKey(stepKey, position), excluded,
                            filtered ? state.allowedTokens.data() : nullptr);
    token[j] = decision.token;
    confidence[j] = decision.confidence;
  };
  // The filter's scratch (allowedTokens, tokenOrder) is the state's, one for every row.
  if (filtered)
    for (size_t j = 0; j < rows; ++j)
      decide(j);
  else
    forEachRow(state, rows, decide);
}

void tempered(State &state, const Instruction &in, bool maskedOnly, uint64_t stepKey) {
  const size_t rows = static_cast<size_t>(state.rows());
  const double temperature = state.real(in[kTemperature]);
  const bool f32 = isF32(in[kPrecision]);
  const ProgramTestHooks *hooks = state.request.testHooks;
  const int64_t step = state.integer(in[kStep]);
  const int64_t excluded = state.integer(in[kExcluded]);
  std::vector<int32_t> &sample = state.reg(in[kSample]).tokens;
  std::vector<int32_t> &argmax = state.reg(in[kArgmax]).tokens;
  std::vector<double> &entropy = state.reg(in[kEntropy]).reals;
  sample.resize(rows);
  argmax.resize(rows);
  entropy.resize(rows);
  auto decide = [&](size_t j) {
    const int64_t position = state.windowBegin + static_cast<int64_t>(j);
    if (maskedOnly && !state.isMask(static_cast<int64_t>(j))) {
      sample[j] = argmax[j] = state.seq[static_cast<size_t>(position)];
      entropy[j] = 0;
      return;
    }
    const float *logits = state.logits.row(static_cast<int64_t>(j));
    const uint64_t key = sampling::rng::positionKey(stepKey, position);
    const sampling::TemperedRow row =
        f32 ? sampling::temperedRowF32(logits, state.vocab, static_cast<float>(temperature), key,
                                       excluded)
            : sampling::temperedRow(logits, state.vocab, temperature, key, excluded);
    sample[j] = hooks && hooks->sampledToken ? hooks->sampledToken(step, position) : row.sample;
    argmax[j] = row.argmax;
    entropy[j] = row.entropy;
  };
  // A test's hook is called on this thread, in row order.
  if (hooks)
    for (size_t j = 0; j < rows; ++j)
      decide(j);
  else
    forEachRow(state, rows, decide);
}

} // namespace

Status runSample(State &state, const Instruction &in, size_t at) {
  if (!state.hasLogits || state.logits.rows != state.rows())
    return state.error(at, "no decoded logits for the window's " + std::to_string(state.rows()) +
                               " rows");
  const uint64_t stepKey = sampling::rng::stepKey(state.request.seed, state.request.request,
                                                  sampling::rng::kStreamGumbel,
                                                  static_cast<uint64_t>(state.integer(in[kStep])));
  const bool maskedOnly = in[kCandidates].choice == kCandidatesMasked;
  if (in[kKind].choice == kKindTempered)
    tempered(state, in, maskedOnly, stepKey);
  else
    gumbelMax(state, in, maskedOnly, stepKey);
  return Status::ok();
}

} // namespace dlm::program::detail
