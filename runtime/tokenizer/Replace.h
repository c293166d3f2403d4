// The Replace component of tokenizer.json, which is both a normalizer and a decoder: every match
// of a literal string or a regex becomes fixed content. SentencePiece-converted tokenizers
// (Gemma, Llama 2, Mistral) write spaces as '▁' with it and turn '▁' back into spaces when
// decoding. Matches are leftmost and do not overlap, as in Hugging Face's NormalizedString::replace
// and Replace::decode_chain.
#pragma once

#include "runtime/tokenizer/Regex.h"
#include "support/Status.h"

#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dlm::tokenizer {

class Replace {
public:
  // `config` is {"type": "Replace", "pattern": {"String": s} or {"Regex": r}, "content": c};
  // `stage` ("normalizer", "decoder") names it in errors. A pattern that can match empty text is
  // refused: Hugging Face inserts the content at every empty match, which no real file relies on.
  static StatusOr<Replace> fromJson(const nlohmann::json &config, const std::string &stage);

  // `text` must be valid UTF-8. `startAligned`, when given, counts the leading bytes of `text`
  // that Hugging Face aligns with the first character of the original text, and is updated to
  // count them in the result (see Normalizer::apply).
  std::string apply(std::string_view text, size_t *startAligned = nullptr) const;

private:
  std::vector<std::pair<size_t, size_t>> matches(std::string_view text) const;

  std::string literal_;        // the pattern when it is a String
  std::optional<Regex> regex_; // the pattern when it is a Regex
  std::string content_;
};

} // namespace dlm::tokenizer
