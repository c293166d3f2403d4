// The `forward` record: a full, cached, window, append or extend forward through
// sampling::ForwardRunner, which counts it, times it and captures the first decoded forward's
// logits exactly as the policy loops do; the float-rows registers a forward may take as its input
// or fill with its captured rows (hold_logits, drop_logits, take_rows, capture=); and which of its
// rows the row records read (narrow_logits).
#include "runtime/program/DecodeProgramSpec.h"
#include "runtime/program/InterpreterState.h"

#include <cmath>

namespace dlm::program::detail {

namespace dspec = spec::decode;

namespace {

std::string str(int64_t value) { return std::to_string(value); }

// The DecodeModel::forward of a record with a function, an input, a capture or mode=append,
// extend or window. `fed` tokens start at position feedBegin.
StatusOr<sampling::ForwardSpec> forwardSpec(State &state, const Instruction &in, size_t at,
                                            int64_t count, int64_t keep, int64_t feedBegin,
                                            int64_t fed, sampling::LogitRows rows) {
  using namespace dspec::forward_params;
  using Mode = sampling::ForwardSpec::Mode;
  const int mode = in[kMode].choice;
  sampling::ForwardSpec spec;
  spec.mode = mode == kModeFull     ? Mode::full
              : mode == kModeCached ? Mode::cached
              : mode == kModeExtend ? Mode::extend
              : mode == kModeWindow ? Mode::window
                                    : Mode::append;
  if (in[kFunction].given())
    spec.function = state.text(in[kFunction]);
  spec.tokens = state.seq.data();
  spec.count = count;
  spec.keep = keep;
  spec.first = mode == kModeExtend || mode == kModeWindow ? feedBegin : 0;
  spec.end = mode == kModeWindow ? feedBegin + fed : 0;
  spec.rows = rows;
  if (in[kInput].given()) {
    const Register &input = state.reg(in[kInput]);
    if (!input.logits.empty()) {
      // One row per fed token from input_at (the first fed one when absent), or fewer
      // (ForwardSpec::inputFirst, inputRows).
      const int64_t first =
          in[kInputAt].given() ? state.integer(in[kInputAt]) - feedBegin : int64_t{0};
      if (first < 0 || first > fed || input.rows() > fed - first)
        return state.error(
            at, "the input holds " + str(input.rows()) + " rows" +
                    (in[kInputAt].given() ? " from position " + str(feedBegin + first)
                                          : std::string()) +
                    " for " + str(fed) + " fed tokens" +
                    (in[kInputAt].given() ? " from position " + str(feedBegin) : std::string()));
      spec.input = input.logits.data();
      spec.inputWidth = input.width;
      spec.inputFirst = first;
      spec.inputRows = input.rows() == fed - first ? -1 : input.rows();
    }
  }
  if (in[kInputScale].given()) {
    const double scale = state.real(in[kInputScale]);
    if (!std::isfinite(scale))
      return state.error(at, "input scale " + std::to_string(scale) + " is not finite");
    spec.inputScale = static_cast<float>(scale);
  }
  return spec;
}

// capture=%c: the forward's captured rows, copied into the register.
Status takeCapture(State &state, const Instruction &in, size_t at) {
  const sampling::LogitsView captured = state.model.capturedRows();
  if (!captured.data || captured.vocab <= 0)
    return state.error(at, "the forward's function captures no rows (it has no capture record)");
  Register &out = state.reg(in[dspec::forward_params::kCapture]);
  out.logits.assign(captured.data, captured.data + captured.rows * captured.vocab);
  out.width = captured.vocab;
  return Status::ok();
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
  // [keep, count), an extend [first, count), a window [keep, feed_end).
  const int64_t feedBegin = mode == kModeFull     ? 0
                            : mode == kModeExtend ? state.integer(in[kFirst])
                                                  : keep;
  const int64_t feedEnd = mode == kModeWindow ? state.integer(in[kFeedEnd]) : count;
  // Rows are absolute; the model returns rows of the fed tokens.
  if (keep < 0 || keep > count || count > static_cast<int64_t>(state.seq.size()) ||
      (mode == kModeExtend && (feedBegin < 0 || feedBegin > keep)) ||
      feedEnd < feedBegin || feedEnd > count || rowBegin < feedBegin || rowBegin > rowEnd ||
      rowEnd > feedEnd)
    return state.error(at, "forward of " + str(count) + " tokens keeping " + str(keep) +
                               " and feeding [" + str(feedBegin) + ", " + str(feedEnd) +
                               ") cannot return rows [" + str(rowBegin) + ", " + str(rowEnd) +
                               ") of a sequence of " + str(static_cast<int64_t>(state.seq.size())));
  const sampling::LogitRows rows{rowBegin - feedBegin, rowEnd - feedBegin};
  if (mode == kModeAppend || mode == kModeExtend || in[kFunction].given() || in[kInput].given() ||
      in[kInputScale].given() || in[kInputAt].given() || in[kCapture].given()) {
    StatusOr<sampling::ForwardSpec> spec =
        forwardSpec(state, in, at, count, keep, feedBegin, feedEnd - feedBegin, rows);
    if (!spec)
      return spec.status();
    StatusOr<sampling::LogitsView> logits = state.runner.forward(*spec, decoded);
    if (!logits)
      return logits.status();
    state.logits = state.forwardLogits = *logits;
    state.hasLogits = decoded;
    return in[kCapture].given() ? takeCapture(state, in, at) : Status::ok();
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
  Register &held = state.reg(in[kOut]);
  std::vector<float> &out = held.logits;
  held.width = state.logits.vocab;
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

Status runTakeRows(State &state, const Instruction &in, size_t at) {
  using namespace dspec::take_rows_params;
  Register &of = state.reg(in[kOf]);
  const int64_t rows = state.integer(in[kRows]);
  if (rows < 0 || rows > of.rows())
    return state.error(at, "cannot take " + str(rows) + " rows of a register holding " +
                               str(of.rows()));
  of.logits.resize(static_cast<size_t>(rows * of.width));
  return Status::ok();
}

} // namespace dlm::program::detail
