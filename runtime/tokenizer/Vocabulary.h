// The "vocab" object of a tokenizer.json model ({"token": id, ...}), shared by BPE and WordLevel:
// token -> id for encoding, id -> token for decoding. Ids may have gaps, of bounded total size
// (largestAllowedTokenId). When several tokens share an id, each keeps it for encoding and the
// first in key order names it when decoding (Hugging Face keeps an arbitrary one).
#pragma once

#include "support/Status.h"

#include <nlohmann/json_fwd.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dlm::tokenizer {

// Ids above this are treated as a corrupt file rather than allocating a huge id table (32 bytes
// per id); the largest real vocabularies have about 2^18 entries.
inline constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;
// Ids may leave gaps, but the id table is as long as the largest id: two entries with ids 0 and
// 2^27 - 1 allocated 4 GiB. So the table may be at most kIdsPerEntry times as long as the number
// of entries, plus kIdsWithoutEntry; real vocabularies are dense (a few unused ids at most).
inline constexpr int64_t kIdsPerEntry = 4;
inline constexpr int64_t kIdsWithoutEntry = 65536;

// The largest id a vocabulary of `entries` tokens may use.
inline int64_t largestAllowedTokenId(int64_t entries) {
  return std::min(kMaxTokenId, kIdsPerEntry * entries + kIdsWithoutEntry - 1);
}

class Vocabulary {
public:
  // `vocab` is the model's "vocab" value; `model` ("BPE", "WordLevel") names it in errors.
  static StatusOr<Vocabulary> fromJson(const nlohmann::json &vocab, const std::string &model);

  std::optional<int32_t> find(std::string_view token) const {
    const auto it = idsByToken_.find(std::string(token));
    if (it == idsByToken_.end())
      return std::nullopt;
    return it->second;
  }
  // Null when no entry has this id.
  const std::string *token(int32_t id) const {
    if (id < 0 || id >= idLimit() || !idAssigned_[id])
      return nullptr;
    return &tokensById_[id];
  }
  // One more than the largest id.
  int32_t idLimit() const { return static_cast<int32_t>(tokensById_.size()); }
  // Number of entries (equal to idLimit() unless ids have gaps or repeat).
  int32_t entryCount() const { return static_cast<int32_t>(idsByToken_.size()); }

private:
  std::unordered_map<std::string, int32_t> idsByToken_;
  std::vector<std::string> tokensById_;
  std::vector<bool> idAssigned_;
};

} // namespace dlm::tokenizer
