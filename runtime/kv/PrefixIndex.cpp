#include "runtime/kv/PrefixIndex.h"

#include <algorithm>

namespace dlm::kv {

// FNV-1a over the parent hash and the token ids; entries compare contents, so a collision only
// costs a miss.
uint64_t PrefixIndex::pageHash(uint64_t parent, const int32_t *tokens, int64_t pageTokens) {
  uint64_t hash = 1469598103934665603ull;
  auto mix = [&](uint64_t value) {
    for (int byte = 0; byte < 8; ++byte) {
      hash ^= (value >> (8 * byte)) & 0xff;
      hash *= 1099511628211ull;
    }
  };
  mix(parent);
  for (int64_t i = 0; i < pageTokens; ++i)
    mix(static_cast<uint32_t>(tokens[i]));
  // 0 stands for "no parent".
  return hash == 0 ? 1 : hash;
}

std::optional<PageIndex> PrefixIndex::find(uint64_t hash, uint64_t parent, PageIndex parentPage,
                                           const int32_t *tokens, int64_t pageTokens) const {
  auto it = entries_.find(hash);
  if (it == entries_.end() || it->second.parent != parent ||
      it->second.parentPage != parentPage ||
      !std::equal(it->second.tokens.begin(), it->second.tokens.end(), tokens, tokens + pageTokens))
    return std::nullopt;
  return it->second.page;
}

std::optional<PageIndex> PrefixIndex::pageOf(uint64_t hash) const {
  auto it = entries_.find(hash);
  if (it == entries_.end())
    return std::nullopt;
  return it->second.page;
}

bool PrefixIndex::insert(uint64_t hash, uint64_t parent, PageIndex parentPage,
                         const int32_t *tokens, int64_t pageTokens, PageIndex page) {
  if (entries_.count(hash) || pageHashes_.count(page))
    return false;
  entries_.emplace(hash, Entry{page, parent, parentPage,
                               std::vector<int32_t>(tokens, tokens + pageTokens), ++clock_});
  pageHashes_.emplace(page, hash);
  return true;
}

void PrefixIndex::touch(const std::vector<uint64_t> &chain) {
  for (auto hash = chain.rbegin(); hash != chain.rend(); ++hash) {
    auto it = entries_.find(*hash);
    if (it != entries_.end())
      it->second.lastUse = ++clock_;
  }
}

void PrefixIndex::forget(PageIndex page) {
  auto it = pageHashes_.find(page);
  if (it == pageHashes_.end())
    return;
  entries_.erase(it->second);
  pageHashes_.erase(it);
}

} // namespace dlm::kv
