#include "tools/dlm-serve/OutputText.h"

namespace dlm::serve {

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

size_t completeUtf8Prefix(const std::string &text) {
  // Walk back over at most 3 continuation bytes to the last lead byte.
  size_t end = text.size();
  size_t i = end;
  int continuation = 0;
  while (i > 0 && continuation < 4) {
    const unsigned char byte = static_cast<unsigned char>(text[i - 1]);
    if ((byte & 0xC0) != 0x80)
      break;
    --i;
    ++continuation;
  }
  if (i == 0)
    return continuation ? 0 : end;
  const unsigned char lead = static_cast<unsigned char>(text[i - 1]);
  size_t need = 1;
  if ((lead & 0xE0) == 0xC0)
    need = 2;
  else if ((lead & 0xF0) == 0xE0)
    need = 3;
  else if ((lead & 0xF8) == 0xF0)
    need = 4;
  const size_t have = static_cast<size_t>(continuation) + 1;
  return have >= need ? end : i - 1;
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
  // Ids the tokenizer does not know (embedding rows past the vocabulary) have no text.
  std::vector<int32_t> known;
  known.reserve(ids_.size());
  for (int32_t id : ids_)
    if (id >= 0 && id < tokenizer_->vocabSize() && tokenizer_->idToToken(id))
      known.push_back(id);
  StatusOr<std::string> text = final ? tokenizer_->decode(known, /*skipSpecialTokens=*/true)
                                     : tokenizer_->decodeBytes(known, /*skipSpecialTokens=*/true);
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
  size_t limit = completeUtf8Prefix(text);
  if (longestStop_ > 1)
    limit = limit >= longestStop_ - 1 ? limit - (longestStop_ - 1) : 0;
  limit = completeUtf8Prefix(text.substr(0, limit));
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

} // namespace dlm::serve
