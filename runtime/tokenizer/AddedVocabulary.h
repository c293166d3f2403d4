// The "added_tokens" of tokenizer.json (special tokens such as <|endoftext|> and extra ordinary
// tokens). They are cut out of the text before normalization and pre-tokenization, matching
// leftmost-longest, honouring single_word, lstrip and rstrip; tokens with normalized=true are
// matched in a second pass over the normalized text. Ids are assigned as Hugging Face does.
#pragma once

#include "runtime/tokenizer/Tokenizer.h"
#include "support/Status.h"

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dlm::tokenizer {

class Model;
class Normalizer;

// Added tokens are matched from every offset of the text, at a cost up to their length: 20 KB
// ones made a 60 KB prompt take 5.7 s. Real added tokens are under 100 bytes (the longest are
// runs of white space or tags), so longer contents are refused.
inline constexpr size_t kMaxAddedTokenBytes = 512;

// A byte range of the text, either an added token (tokenId >= 0) or ordinary text (-1).
struct TextSpan {
  size_t begin;
  size_t end;
  int32_t tokenId;
};

class AddedVocabulary {
public:
  static StatusOr<AddedVocabulary> fromJson(const nlohmann::json &addedTokens,
                                            const Model &model, const Normalizer &normalizer);

  // Splits `text` (valid UTF-8) into non-empty spans. The raw pass matches tokens with
  // normalized=false on the original text; the normalized pass matches the others on text that
  // has already been normalized. With specialTokensAsText a special token's match is left in the
  // text (and the search resumes after it), as the tokenizers library does with
  // encode_special_tokens (transformers' split_special_tokens=True); ordinary added tokens still
  // match.
  std::vector<TextSpan> split(std::string_view text, bool normalizedPass,
                              bool specialTokensAsText = false) const;

  const std::vector<AddedToken> &tokens() const { return tokens_; }
  const AddedToken *findById(int32_t id) const;
  std::optional<int32_t> findByContent(std::string_view content) const;
  // One more than the largest added-token id (0 when there are none).
  int32_t idLimit() const { return idLimit_; }

private:
  // Byte trie over token contents for leftmost-longest matching.
  class Matcher {
  public:
    void insert(std::string_view pattern, int32_t tokenId);
    bool empty() const { return nodes_.size() == 1; }
    // Length and id of the longest pattern starting at text[offset]; {0, -1} when none does.
    std::pair<size_t, int32_t> longestAt(std::string_view text, size_t offset) const;

  private:
    struct Node {
      std::vector<std::pair<unsigned char, int32_t>> children;
      int32_t tokenId = -1;
    };
    std::vector<Node> nodes_{Node()};
    std::array<bool, 256> startsAPattern_{};
  };

  std::vector<AddedToken> tokens_; // one entry per id, in order of first appearance
  std::unordered_map<std::string, size_t> indexByContent_;
  std::unordered_map<int32_t, size_t> indexById_;
  Matcher rawMatcher_;
  Matcher normalizedMatcher_;
  int32_t idLimit_ = 0;
};

} // namespace dlm::tokenizer
