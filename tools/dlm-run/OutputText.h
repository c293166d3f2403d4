// Committed ids as the text a user receives (dlm-serve's responses, dlm-run's output), streamed
// or not (so the chunks of a stream concatenate to the whole text): decoded as the ids come, up
// to the first EOS, at most maxTokens ids (a block program generates whole blocks, and
// --max-new-tokens / max_tokens keep the first N), cut before the first stop string. Text goes
// out only once it is final: whole UTF-8 characters, and not a tail that could still become a
// stop string.
#pragma once

#include "runtime/tokenizer/Tokenizer.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dlm::tools {

enum class FinishReason { none, stop, length };
const char *finishReasonName(FinishReason reason);

class OutputText {
public:
  // `tokenizer` may be null (no text, ids only); `isEos` names the EOS ids; maxTokens -1: no cap.
  OutputText(const Tokenizer *tokenizer, std::function<bool(int32_t)> isEos, int64_t maxTokens,
             std::vector<std::string> stop);

  // Takes the next committed ids; returns the text that became final. After finished() more
  // ids are ignored.
  std::string push(const int32_t *ids, int64_t count);
  // The generation ended: returns the rest of the text, and the finish reason becomes "length"
  // unless an EOS or a stop string ended it.
  std::string finish();

  // An EOS, a stop string or maxTokens ended the output: the generation may be stopped.
  bool finished() const { return reason_ != FinishReason::none; }
  FinishReason reason() const { return reason_; }
  // The ids kept (an EOS included; those after a stop string too).
  int64_t completionTokens() const { return static_cast<int64_t>(ids_.size()); }
  const std::vector<int32_t> &ids() const { return ids_; }
  const std::string &text() const { return emittedText_; }

private:
  std::string decoded(bool final) const;
  // Emits decoded text up to `limit` bytes.
  std::string emitUpTo(const std::string &text, size_t limit);
  // Whether `text` holds a stop string at or after `from`; cuts `text` there.
  bool cutAtStop(std::string &text) const;

  const Tokenizer *tokenizer_;
  std::function<bool(int32_t)> isEos_;
  int64_t maxTokens_;
  std::vector<std::string> stop_;
  size_t longestStop_ = 0;
  std::vector<int32_t> ids_;
  std::string emittedText_;
  FinishReason reason_ = FinishReason::none;
  bool done_ = false;
};

} // namespace dlm::tools
