#include "tools/dlm-run/OutputText.h"

namespace dlm::tools {

const char *finishReasonName(FinishReason reason) {
  switch (reason) {
  case FinishReason::stop:
    return "stop";
  case FinishReason::length:
    return "length";
  case FinishReason::none:
    break;
  }
  return "";
}

OutputText::OutputText(const Tokenizer *tokenizer, std::function<bool(int32_t)> isEos,
                       int64_t maxTokens, std::vector<std::string> stop)
    : tokenizer_(tokenizer), isEos_(std::move(isEos)), maxTokens_(maxTokens),
      stop_(std::move(stop)) {
  for (const std::string &text : stop_)
    longestStop_ = std::max(longestStop_, text.size());
}

std::string OutputText::decoded(bool final) const {
  if (!tokenizer_)
    return "";
  StatusOr<std::string> text = tokenizer_->decodeGenerated(ids_, final);
  return text ? std::move(*text) : std::string();
}

bool OutputText::cutAtStop(std::string &text) const {
  // A stop string may start in the text already emitted (its last longestStop_ - 1 bytes were
  // held back, so it cannot end there).
  const size_t from = emittedText_.size() >= longestStop_ ? emittedText_.size() - longestStop_ + 1
                                                          : 0;
  size_t cut = std::string::npos;
  for (const std::string &stop : stop_) {
    size_t at = text.find(stop, from);
    if (at != std::string::npos && at < cut)
      cut = at;
  }
  if (cut == std::string::npos)
    return false;
  text.resize(cut);
  return true;
}

std::string OutputText::emitUpTo(const std::string &text, size_t limit) {
  // Text that changed under what was emitted (a tokenizer that revises earlier text) waits for
  // the end.
  if (limit <= emittedText_.size() || text.compare(0, emittedText_.size(), emittedText_) != 0)
    return "";
  std::string delta = text.substr(emittedText_.size(), limit - emittedText_.size());
  emittedText_ += delta;
  return delta;
}

std::string OutputText::push(const int32_t *ids, int64_t count) {
  if (finished() || done_)
    return "";
  for (int64_t i = 0; i < count; ++i) {
    if (maxTokens_ >= 0 && static_cast<int64_t>(ids_.size()) >= maxTokens_) {
      reason_ = FinishReason::length;
      break;
    }
    ids_.push_back(ids[i]);
    if (isEos_ && isEos_(ids[i])) {
      reason_ = FinishReason::stop;
      break;
    }
  }
  if (reason_ == FinishReason::none && maxTokens_ >= 0 &&
      static_cast<int64_t>(ids_.size()) >= maxTokens_)
    reason_ = FinishReason::length;
  if (finished())
    return finish();
  std::string text = decoded(false);
  if (cutAtStop(text)) {
    reason_ = FinishReason::stop;
    done_ = true;
    return emitUpTo(text, text.size());
  }
  size_t limit = Tokenizer::streamableLength(text);
  if (longestStop_ > 1)
    limit = limit >= longestStop_ - 1 ? limit - (longestStop_ - 1) : 0;
  limit = Tokenizer::streamableLength(std::string_view(text).substr(0, limit));
  return emitUpTo(text, limit);
}

std::string OutputText::finish() {
  if (done_)
    return "";
  done_ = true;
  if (reason_ == FinishReason::none)
    reason_ = FinishReason::length;
  std::string text = decoded(true);
  if (cutAtStop(text))
    reason_ = FinishReason::stop;
  if (text.compare(0, emittedText_.size(), emittedText_) != 0)
    return ""; // cannot happen with the supported tokenizers; never send text twice
  return emitUpTo(text, text.size());
}

} // namespace dlm::tools
