// The `forward` record: a full, cached or window forward through sampling::ForwardRunner, which
// counts it, times it and captures the first decoded forward's logits exactly as the policy loops
// do.
#include "runtime/program/DecodeProgramSpec.h"
#include "runtime/program/InterpreterState.h"

namespace dlm::program::detail {

namespace dspec = spec::decode;

namespace {

std::string str(int64_t value) { return std::to_string(value); }

} // namespace

Status runForward(State &state, const Instruction &in, size_t at) {
  using namespace dspec::forward_params;
  const int mode = in[kMode].choice;
  const bool decoded = !in[kDecoded].given() || in[kDecoded].boolean;
  const int64_t count = state.integer(in[kCount]);
  const int64_t keep = state.integer(in[kKeep]);
  const int64_t rowBegin = state.integer(in[kRowBegin]);
  const int64_t rowEnd = state.integer(in[kRowEnd]);
  // What the forward feeds: a full forward all of [0, count), a cached one [keep, count), a
  // window [keep, feed_end).
  const int64_t feedBegin = mode == kModeFull ? 0 : keep;
  const int64_t feedEnd = mode == kModeWindow ? state.integer(in[kFeedEnd]) : count;
  // Rows are absolute; the model returns rows of the fed tokens.
  if (keep < 0 || keep > count || count > static_cast<int64_t>(state.seq.size()) ||
      feedEnd < feedBegin || feedEnd > count || rowBegin < feedBegin || rowBegin > rowEnd ||
      rowEnd > feedEnd)
    return state.error(at, "forward of " + str(count) + " tokens keeping " + str(keep) +
                               " and feeding [" + str(feedBegin) + ", " + str(feedEnd) +
                               ") cannot return rows [" + str(rowBegin) + ", " + str(rowEnd) +
                               ") of a sequence of " + str(static_cast<int64_t>(state.seq.size())));
  const sampling::LogitRows rows{rowBegin - feedBegin, rowEnd - feedBegin};
  StatusOr<sampling::LogitsView> logits =
      mode == kModeWindow   ? state.runner.window(state.seq, count, feedBegin, feedEnd, rows)
      : mode == kModeCached ? state.runner.cached(state.seq, count, keep, rows)
                            : state.runner.full(state.seq, count, keep, rows, decoded);
  if (!logits)
    return logits.status();
  state.logits = *logits;
  state.hasLogits = decoded;
  return Status::ok();
}

} // namespace dlm::program::detail
