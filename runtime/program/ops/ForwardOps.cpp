// The `forward` record: a full or cached forward through sampling::ForwardRunner, which counts
// it, times it and captures the first decoded forward's logits exactly as the policy loops do.
#include "runtime/program/DecodeProgramSpec.h"
#include "runtime/program/InterpreterState.h"

namespace dlm::program::detail {

namespace dspec = spec::decode;

Status runForward(State &state, const Instruction &in, size_t at) {
  using namespace dspec::forward_params;
  const bool cached = in[kMode].choice == kModeCached;
  const bool decoded = !in[kDecoded].given() || in[kDecoded].boolean;
  const int64_t count = state.integer(in[kCount]);
  const int64_t keep = state.integer(in[kKeep]);
  const int64_t rowBegin = state.integer(in[kRowBegin]);
  const int64_t rowEnd = state.integer(in[kRowEnd]);
  // Rows are absolute; a cached forward returns rows of the fed tokens [keep, count).
  const int64_t firstRow = cached ? keep : 0;
  if (keep < 0 || keep > count || count > static_cast<int64_t>(state.seq.size()) ||
      rowBegin < firstRow || rowBegin > rowEnd || rowEnd > count)
    return state.error(at, "forward of " + std::to_string(count) + " tokens keeping " +
                               std::to_string(keep) + " cannot return rows [" +
                               std::to_string(rowBegin) + ", " + std::to_string(rowEnd) +
                               ") of a sequence of " + std::to_string(state.seq.size()));
  const sampling::LogitRows rows{rowBegin - firstRow, rowEnd - firstRow};
  StatusOr<sampling::LogitsView> logits =
      cached ? state.runner.cached(state.seq, count, keep, rows)
             : state.runner.full(state.seq, count, keep, rows, decoded);
  if (!logits)
    return logits.status();
  state.logits = *logits;
  state.hasLogits = decoded;
  return Status::ok();
}

} // namespace dlm::program::detail
