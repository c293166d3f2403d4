// Credit decoding's records: `credit_reset` starts a block's credit, `credit` accumulates it and
// fuses it into the logits the next `sample` reads. A row gains at most one credited token a
// step, so the credit is kept sparse: `capacity` (token, credit) slots per row in the register's
// tokens and reals, the slots used per row in its list.
#include "runtime/program/DecodeProgramSpec.h"
#include "runtime/program/InterpreterState.h"
#include "runtime/sampling/SamplingMath.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace dlm::program::detail {

namespace dspec = spec::decode;

namespace {

constexpr int64_t kMaxCreditCapacity = int64_t{1} << 16;

std::string str(int64_t value) { return std::to_string(value); }

// Adds `amount` to row j's credit of `token`, in a new slot when it has none.
Status addCredit(State &state, size_t at, Register &credit, int64_t capacity, int64_t j,
                 int32_t token, double amount) {
  int64_t &used = credit.list[static_cast<size_t>(j)];
  const size_t first = static_cast<size_t>(j * capacity);
  for (size_t s = first; s < first + static_cast<size_t>(used); ++s)
    if (credit.tokens[s] == token) {
      credit.reals[s] += amount;
      return Status::ok();
    }
  if (used == capacity)
    return state.error(at, "row " + str(j) + " credits more than its capacity of " +
                               str(capacity) + " tokens");
  credit.tokens[first + static_cast<size_t>(used)] = token;
  credit.reals[first + static_cast<size_t>(used)] = amount;
  ++used;
  return Status::ok();
}

} // namespace

Status runCreditReset(State &state, const Instruction &in, size_t at) {
  using namespace dspec::credit_reset_params;
  const int64_t capacity = state.integer(in[kCapacity]);
  const int64_t rows = state.rows();
  if (capacity < 0 || capacity > kMaxCreditCapacity)
    return state.error(at, "a credit capacity of " + str(capacity) + " tokens is outside [0, " +
                               str(kMaxCreditCapacity) + "]");
  Register &credit = state.reg(in[kOut]);
  credit.tokens.assign(static_cast<size_t>(rows * capacity), -1);
  credit.reals.assign(static_cast<size_t>(rows * capacity), 0.0);
  credit.list.assign(static_cast<size_t>(rows), 0);
  // The fused rows `credit` writes: at most what the model's logits hold.
  state.fusedLogits.reserve(static_cast<size_t>(rows * state.vocab));
  return Status::ok();
}

Status runCredit(State &state, const Instruction &in, size_t at) {
  using namespace dspec::credit_params;
  const int64_t rows = state.rows();
  const int64_t vocab = state.vocab;
  Register &credit = state.reg(in[kCredit]);
  if (static_cast<int64_t>(credit.list.size()) != rows)
    return state.error(at, "the credit was reset for " + str(static_cast<int64_t>(credit.list.size())) +
                               " rows, not the window's " + str(rows));
  if (!state.hasLogits || state.logits.rows != rows)
    return state.error(at, "no decoded logits for the window's " + str(rows) + " rows");
  const double decay = state.real(in[kDecay]);
  const double gamma = state.real(in[kGamma]);
  const double alpha = state.real(in[kAlpha]);
  if (!(decay >= 0.0 && decay <= 1.0) || !std::isfinite(gamma) || !std::isfinite(alpha))
    return state.error(at, "credit needs a decay in [0, 1] and a finite gamma and alpha");
  const int64_t capacity = rows > 0 ? static_cast<int64_t>(credit.tokens.size()) / rows : 0;
  for (double &c : credit.reals)
    c *= decay;
  const bool maskedOnly = in[kCandidates].choice == kCandidatesMasked;
  for (int64_t j = 0; j < rows; ++j) {
    if (maskedOnly && !state.isMask(j))
      continue;
    const sampling::TopProbability top = sampling::topProbability(state.logits.row(j), vocab);
    DLM_RETURN_IF_ERROR(
        addCredit(state, at, credit, capacity, j, top.token, std::pow(top.probability, gamma)));
  }
  // The fused rows replace the forward's (which the model owns) as the logits `sample` reads;
  // a token without credit keeps its logit, so only credited ones are rewritten.
  state.fusedLogits.resize(static_cast<size_t>(rows * vocab));
  std::memcpy(state.fusedLogits.data(), state.logits.data,
              static_cast<size_t>(rows * vocab) * sizeof(float));
  for (int64_t j = 0; j < rows; ++j) {
    float *fused = state.fusedLogits.data() + j * vocab;
    const size_t first = static_cast<size_t>(j * capacity);
    for (size_t s = first; s < first + static_cast<size_t>(credit.list[static_cast<size_t>(j)]); ++s)
      fused[credit.tokens[s]] = sampling::creditedLogit(fused[credit.tokens[s]], credit.reals[s], alpha);
  }
  state.logits = sampling::LogitsView{state.fusedLogits.data(), rows, vocab};
  return Status::ok();
}

} // namespace dlm::program::detail
