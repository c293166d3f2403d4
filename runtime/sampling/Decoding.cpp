#include "runtime/sampling/Decoding.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace dlm::sampling {

namespace {
std::string str(int64_t value) { return std::to_string(value); }
} // namespace

bool TokenFacts::isEos(int64_t token) const {
  return std::find(eosTokenIds.begin(), eosTokenIds.end(), token) != eosTokenIds.end();
}

StatusOr<LogitsView> ForwardRunner::full(const std::vector<int32_t> &tokens, int64_t count,
                                         int64_t keep, LogitRows rows, bool decoded) {
  const bool captureNow = decoded && capture_;
  LogitRows asked = captureNow ? LogitRows{0, count} : rows;
  profile::Scope timer = scope(profile::Category::forward, decoded ? "forward" : "prefix_forward");
  return finish(model_.forwardFull(tokens.data(), count, keep, asked), rows, captureNow);
}

StatusOr<LogitsView> ForwardRunner::cached(const std::vector<int32_t> &tokens, int64_t count,
                                           int64_t keep, LogitRows rows) {
  LogitRows asked = capture_ ? LogitRows{0, count - keep} : rows;
  profile::Scope timer = scope(profile::Category::forward, "cached_forward");
  return finish(model_.forwardCached(tokens.data(), count, keep, asked), rows, capture_);
}

StatusOr<LogitsView> ForwardRunner::window(const std::vector<int32_t> &tokens, int64_t count,
                                           int64_t feedBegin, int64_t feedEnd, LogitRows rows) {
  LogitRows asked = capture_ ? LogitRows{0, feedEnd - feedBegin} : rows;
  profile::Scope timer = scope(profile::Category::forward, "window_forward");
  return finish(
      model_.forward(ForwardSpec::window(tokens.data(), count, feedBegin, feedEnd, asked)), rows,
      capture_);
}

StatusOr<LogitsView> ForwardRunner::forward(const ForwardSpec &spec, bool decoded) {
  const bool captureNow = decoded && capture_;
  ForwardSpec asked = spec;
  if (captureNow)
    asked.rows = LogitRows{0, spec.fed()};
  profile::Scope timer = scope(profile::Category::forward, decoded ? "forward" : "prefix_forward");
  return finish(model_.forward(asked), spec.rows, captureNow);
}

StatusOr<std::optional<BlockLoopResult>> ForwardRunner::runOnDevice(const LoopPlan &plan,
                                                                    int32_t *canvas) {
  if (capture_ || !model_.denoisesBlock(plan))
    return std::optional<BlockLoopResult>();
  // Timed by the caller's block scope: per-step and per-forward timings do not exist here.
  StatusOr<BlockLoopResult> result = model_.denoiseBlock(plan, canvas);
  if (!result)
    return result.status();
  outcome_.forwards += result->steps;
  return std::optional<BlockLoopResult>(*result);
}

StatusOr<std::optional<int64_t>> ForwardRunner::denoiseBlockOnDevice(const LoopPlan &plan,
                                                                     int32_t *canvas) {
  StatusOr<std::optional<BlockLoopResult>> ran = runOnDevice(plan, canvas);
  if (!ran)
    return ran.status();
  if (!*ran)
    return std::optional<int64_t>();
  if (!(*ran)->finished)
    return Status::error("device block loop: the block did not finish within its " +
                         str(static_cast<int64_t>(plan.steps.size())) + " steps");
  return std::optional<int64_t>((*ran)->steps);
}

StatusOr<LogitsView> ForwardRunner::finish(StatusOr<LogitsView> logits, LogitRows wanted,
                                           bool captured) {
  if (!logits)
    return logits;
  ++outcome_.forwards;
  if (!captured)
    return logits;
  // The first decoded forward: keep every row, then hand the policy the rows it asked for.
  capture_ = false;
  const LogitsView all = *logits;
  outcome_.firstLogits.assign(all.data, all.data + all.rows * all.vocab);
  outcome_.firstLogitRows = all.rows;
  return LogitsView{all.row(wanted.begin), wanted.count(), all.vocab};
}

void finishOutput(const std::vector<int32_t> &sequence, size_t promptLength,
                  const TokenFacts &facts, DecodeOutcome &outcome) {
  outcome.outputIds.clear();
  for (size_t i = promptLength; i < sequence.size(); ++i) {
    outcome.outputIds.push_back(sequence[i]);
    if (facts.isEos(sequence[i]))
      break;
  }
}

bool reportBlock(const std::vector<int32_t> &sequence, int64_t begin, int64_t end, int64_t index,
                 bool last, const TokenFacts &facts, const BlockCallback &onBlock) {
  int64_t stop = end;
  bool hasEos = false;
  for (int64_t i = begin; i < end; ++i) {
    if (facts.isEos(sequence[i])) {
      stop = i + 1;
      hasEos = true;
      break;
    }
  }
  if (onBlock)
    onBlock(CommittedBlock{index, sequence.data() + begin, stop - begin, last || hasEos});
  return hasEos;
}

} // namespace dlm::sampling
