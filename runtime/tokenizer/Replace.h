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

// A tokenizer.json chooses its steps, so a chain of them could grow text without bound ("a" ->
// "aa" forty times is 2^40): a normalizer's or decoder's steps may multiply a text's length by
// at most kMaxTextGrowth in all, add at most kMaxAddedBytes (Prepend), and number at most
// kMaxSteps. Real files stay far below (Gemma: ' ' -> '▁' is 3-fold).
inline constexpr double kMaxTextGrowth = 256;
inline constexpr size_t kMaxAddedBytes = 1024;
inline constexpr size_t kMaxSteps = 64;

// "not supported yet: ..." naming `stage` when `growth`, `added` bytes or `steps` pass the limits.
Status checkTextGrowth(const std::string &stage, double growth, size_t added, size_t steps);

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

  // The most one application multiplies a text's length by: content bytes over the fewest bytes
  // a match spans (at least 1).
  double growth() const;

private:
  std::vector<std::pair<size_t, size_t>> matches(std::string_view text) const;

  std::string literal_;        // the pattern when it is a String
  std::optional<Regex> regex_; // the pattern when it is a Regex
  std::string content_;
};

} // namespace dlm::tokenizer
