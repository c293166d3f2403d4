// The Metaspace component of tokenizer.json, which is both a pre-tokenizer and a decoder
// (SentencePiece conversions: Mistral, newer Llama 2 files). As a pre-tokenizer it writes each
// space as the replacement character ('▁'), puts one in front of a piece as prepend_scheme says,
// and, with split, cuts the piece before each replacement character (PreTokenizer does the cut).
// As a decoder it turns the character back into spaces.
#pragma once

#include "support/Status.h"

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <string_view>

namespace dlm::tokenizer {

class Metaspace {
public:
  // When the replacement character goes in front of a piece.
  enum class PrependScheme { Always, First, Never };

  // `config` is {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", ...};
  // `stage` ("pre_tokenizer", "decoder") names it in errors.
  static StatusOr<Metaspace> fromJson(const nlohmann::json &config, const std::string &stage);

  const std::string &replacement() const { return replacement_; }
  bool split() const { return split_; }

  // The piece with spaces replaced and the character prepended. `startAligned` counts the
  // piece's leading bytes that Hugging Face aligns with the start of the input (see
  // PreTokenizer::apply); "first" prepends only when it is not 0. It is updated for the result.
  std::string replaceSpaces(std::string_view piece, size_t &startAligned) const;

  // Appends the text of one token; `index` is its position in the token list. Hugging Face drops
  // every replacement character of the first token (not only a leading one) unless
  // prepend_scheme is "never"; elsewhere each becomes a space.
  void decodeToken(std::string &out, std::string_view token, size_t index) const;

private:
  std::string replacement_;
  PrependScheme prependScheme_ = PrependScheme::Always;
  bool split_ = true;
};

} // namespace dlm::tokenizer
