// The `forward` record: a full, cached, window or append forward through sampling::ForwardRunner,
// which counts it, times it and captures the first decoded forward's logits exactly as the policy
// loops do; the logits registers a forward may take as its input (hold_logits, drop_logits); and
// which of its rows the row records read (narrow_logits).
#include "runtime/program/DecodeProgramSpec.h"
#include "runtime/program/InterpreterState.h"

#include <cmath>

namespace dlm::program::detail {

namespace dspec = spec::decode;

namespace {

std::string str(int64_t value) { return std::to_string(value); }

// The DecodeModel::forward of a record with a function, an input or mode=append (full, cached
// or append; a window forward has no such form yet).
StatusOr<sampling::ForwardSpec> forwardSpec(State &state, const Instruction &in, size_t at,
                                            int64_t count, int64_t keep,
                                            sampling::LogitRows rows) {
  using namespace dspec::forward_params;
  const int mode = in[kMode].choice;
  if (mode == kModeWindow)
    return state.error(at, "not supported yet: a window forward with a function or an input");
  sampling::ForwardSpec spec;
  spec.mode = mode == kModeFull     ? sampling::ForwardSpec::Mode::full
              : mode == kModeCached ? sampling::ForwardSpec::Mode::cached
                                    : sampling::ForwardSpec::Mode::append;
  if (in[kFunction].given())
    spec.function = state.text(in[kFunction]);
  spec.tokens = state.seq.data();
  spec.count = count;
  spec.keep = keep;
  spec.rows = rows;
  if (in[kInput].given()) {
    const std::vector<float> &input = state.reg(in[kInput]).logits;
    const int64_t fed = mode == kModeFull ? count : count - keep;
    if (!input.empty()) {
      if (static_cast<int64_t>(input.size()) != fed * state.vocab)
        return state.error(at, "the input holds " +
                                   str(static_cast<int64_t>(input.size()) / state.vocab) +
                                   " logit rows for " + str(fed) + " fed tokens");
      spec.input = input.data();
      spec.inputWidth = state.vocab;
    }
  }
  return spec;
}

} // namespace

Status runForward(State &state, const Instruction &in, size_t at) {
  using namespace dspec::forward_params;
  const int mode = in[kMode].choice;
  const bool decoded = !in[kDecoded].given() || in[kDecoded].boolean;
  const int64_t count = state.integer(in[kCount]);
  const int64_t keep = state.integer(in[kKeep]);
  const int64_t rowBegin = state.integer(in[kRowBegin]);
  const int64_t rowEnd = state.integer(in[kRowEnd]);
  // What the forward feeds: a full forward all of [0, count), a cached or append one
  // [keep, count), a window [keep, feed_end).
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
  if (mode == kModeAppend || in[kFunction].given() || in[kInput].given()) {
    StatusOr<sampling::ForwardSpec> spec = forwardSpec(state, in, at, count, keep, rows);
    if (!spec)
      return spec.status();
    StatusOr<sampling::LogitsView> logits = state.runner.forward(*spec, decoded);
    if (!logits)
      return logits.status();
    state.logits = state.forwardLogits = *logits;
    state.hasLogits = decoded;
    return Status::ok();
  }
  StatusOr<sampling::LogitsView> logits =
      mode == kModeWindow   ? state.runner.window(state.seq, count, feedBegin, feedEnd, rows)
      : mode == kModeCached ? state.runner.cached(state.seq, count, keep, rows)
                            : state.runner.full(state.seq, count, keep, rows, decoded);
  if (!logits)
    return logits.status();
  state.logits = state.forwardLogits = *logits;
  state.hasLogits = decoded;
  return Status::ok();
}

} // namespace dlm::program::detail

namespace dlm::program::detail {

Status runHoldLogits(State &state, const Instruction &in, size_t at) {
  using namespace dspec::hold_logits_params;
  if (!state.hasLogits)
    return state.error(at, "no decoded forward's logits to hold");
  const float temperature = static_cast<float>(state.real(in[kTemperature]));
  if (!(temperature > 0.0f) || !std::isfinite(temperature))
    return state.error(at, "temperature " + std::to_string(state.real(in[kTemperature])) +
                               " is not positive and finite");
  std::vector<float> &out = state.reg(in[kOut]).logits;
  const int64_t count = state.logits.rows * state.logits.vocab;
  out.resize(static_cast<size_t>(count));
  // One float32 division per element, as transformers' temperature processor divides.
  for (int64_t i = 0; i < count; ++i)
    out[static_cast<size_t>(i)] = state.logits.data[i] / temperature;
  return Status::ok();
}

Status runNarrowLogits(State &state, const Instruction &in, size_t at) {
  using namespace dspec::narrow_logits_params;
  if (!state.hasLogits)
    return state.error(at, "no decoded forward's logits to narrow");
  const int64_t begin = state.integer(in[kBegin]);
  const int64_t end = state.integer(in[kEnd]);
  const sampling::LogitsView &all = state.forwardLogits;
  if (begin < 0 || begin > end || end > all.rows)
    return state.error(at, "logit rows [" + str(begin) + ", " + str(end) +
                               ") are outside the forward's " + str(all.rows));
  state.logits = sampling::LogitsView{all.row(begin), end - begin, all.vocab};
  return Status::ok();
}

Status runDropLogits(State &state, const Instruction &in, size_t /*at*/) {
  state.reg(in[dspec::drop_logits_params::kOut]).logits.clear();
  return Status::ok();
}

} // namespace dlm::program::detail
