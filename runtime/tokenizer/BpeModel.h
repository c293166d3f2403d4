// The BPE "model" of tokenizer.json: a vocabulary and ranked merges. A word is split into its
// characters, then the adjacent pair with the lowest merge rank (leftmost on ties) is merged until
// no pair merges, exactly as Hugging Face's BPE does with its priority queue. With byte_fallback
// (SentencePiece conversions), a character missing from the vocabulary becomes the <0xNN> tokens
// of its UTF-8 bytes. Results for words seen before come from a cache, so repeated words cost one
// lookup.
#pragma once

#include "runtime/tokenizer/Model.h"
#include "runtime/tokenizer/Vocabulary.h"
#include "support/Status.h"

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dlm::tokenizer {

class BpeModel final : public Model {
public:
  // `config` is the "model" value of tokenizer.json.
  static StatusOr<BpeModel> fromJson(const nlohmann::json &config);

  BpeModel(BpeModel &&) noexcept;
  BpeModel &operator=(BpeModel &&) noexcept;
  ~BpeModel();

  // Appends the ids of one pre-token to `ids`. A character missing from the vocabulary becomes its
  // byte tokens with byte_fallback (when all of them exist), else the unknown token when the
  // model has one, and is dropped otherwise (as Hugging Face does).
  void tokenize(std::string_view word, std::vector<int32_t> &ids) const override;

private:
  struct MergeResult {
    int32_t rank;
    int32_t id;
  };
  struct WordCache;

  explicit BpeModel(Vocabulary vocabulary);
  static uint64_t pairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  Status loadMerges(const nlohmann::json &merges);
  std::vector<int32_t> mergeWord(std::string_view word) const;

  std::unordered_map<uint64_t, MergeResult> merges_;
  bool ignoreMerges_ = false;
  std::optional<int32_t> unknownId_;
  bool fuseUnknown_ = false;
  bool byteFallback_ = false;
  std::array<int32_t, 256> byteTokenIds_; // id of "<0xNN>" for each byte, or -1
  std::unique_ptr<WordCache> cache_;
};

} // namespace dlm::tokenizer
