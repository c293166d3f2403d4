// Credit decoding's records: `fill_matrix` starts a block's credit, `credit` accumulates it and
// fuses it into the logits the next `sample` reads (sampling::addCredit, sampling::fuseCredit).
#include "runtime/program/DecodeProgramSpec.h"
#include "runtime/program/InterpreterState.h"
#include "runtime/sampling/SamplingMath.h"

#include <algorithm>

namespace dlm::program::detail {

namespace dspec = spec::decode;

Status runFillMatrix(State &state, const Instruction &in, size_t at) {
  using namespace dspec::fill_matrix_params;
  // A program may come from anywhere: bound what it allocates.
  constexpr int64_t kMaxElements = int64_t{1} << 28;
  const int64_t columns = state.integer(in[kColumns]);
  if (columns < 0 || (columns > 0 && state.rows() > kMaxElements / columns))
    return state.error(at, "a matrix of " + std::to_string(state.rows()) + " rows by " +
                               std::to_string(columns) + " columns is not allowed");
  state.reg(in[kOut]).reals.assign(static_cast<size_t>(state.rows() * columns),
                                   state.real(in[kValue]));
  return Status::ok();
}

Status runCredit(State &state, const Instruction &in, size_t at) {
  using namespace dspec::credit_params;
  const int64_t rows = state.rows();
  const int64_t vocab = state.vocab;
  std::vector<double> &credit = state.reg(in[kCredit]).reals;
  if (static_cast<int64_t>(credit.size()) != rows * vocab)
    return state.error(at, "the credit matrix holds " + std::to_string(credit.size()) +
                               " values, not the window's " + std::to_string(rows) + " rows by " +
                               std::to_string(vocab));
  if (!state.hasLogits || state.logits.rows != rows)
    return state.error(at, "no decoded logits for the window's " + std::to_string(rows) + " rows");
  const double decay = state.real(in[kDecay]);
  const double gamma = state.real(in[kGamma]);
  const double alpha = state.real(in[kAlpha]);
  const bool maskedOnly = in[kCandidates].choice == kCandidatesMasked;
  std::transform(credit.begin(), credit.end(), credit.begin(),
                 [decay](double c) { return c * decay; });
  // The fused rows replace the forward's (which the model owns) as the logits `sample` reads.
  state.fusedLogits.resize(static_cast<size_t>(rows * vocab));
  for (int64_t j = 0; j < rows; ++j) {
    double *row = credit.data() + j * vocab;
    if (!maskedOnly || state.isMask(j))
      sampling::addCredit(state.logits.row(j), vocab, gamma, row);
    sampling::fuseCredit(state.logits.row(j), row, vocab, alpha,
                         state.fusedLogits.data() + j * vocab);
  }
  state.logits = sampling::LogitsView{state.fusedLogits.data(), rows, vocab};
  return Status::ok();
}

} // namespace dlm::program::detail
