// Which page holds the K/V of which token prefix (docs/design/serving.md §4): a page is found by
// the hash of its token ids chained with its parent page's hash, and each entry keeps its tokens
// and its parent's page so that a lookup compares contents, never trusting a hash alone: a walk
// from the first page checks each page's tokens and that it follows the page found before it. The
// PagedKvCache owns one and counts the references; this class only maps contents to pages and
// remembers when each was last used.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

namespace dlm::kv {

using PageIndex = int32_t;

class PrefixIndex {
public:
  // The hash of a page of `tokens` (pageTokens of them) after the page hashed `parent` (0 for
  // the first page).
  static uint64_t pageHash(uint64_t parent, const int32_t *tokens, int64_t pageTokens);

  // No parent page: the first page of a prefix.
  static constexpr PageIndex kNoParent = -1;

  // The page published for these tokens after the page `parentPage` (hashed `parent`).
  std::optional<PageIndex> find(uint64_t hash, uint64_t parent, PageIndex parentPage,
                                const int32_t *tokens, int64_t pageTokens) const;
  // The page published for `hash`, if any.
  std::optional<PageIndex> pageOf(uint64_t hash) const;
  // Publishes `page` for `hash`; false when the hash is already published (the caller keeps its
  // own page).
  bool insert(uint64_t hash, uint64_t parent, PageIndex parentPage, const int32_t *tokens,
              int64_t pageTokens, PageIndex page);
  // Marks a chain of pages (first page first) as used now, its last page least recently: the
  // least recently used page evicted first is then a leaf, never a prefix others continue.
  void touch(const std::vector<uint64_t> &chain);
  // Whether `page` is published.
  bool publishes(PageIndex page) const { return pageHashes_.count(page) != 0; }
  // Stops publishing `page`.
  void forget(PageIndex page);
  // Forgets the least recently used page for which `evictable(page)` holds; returns it.
  template <typename Evictable> std::optional<PageIndex> evict(Evictable &&evictable) {
    auto oldest = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (evictable(it->second.page) &&
          (oldest == entries_.end() || it->second.lastUse < oldest->second.lastUse))
        oldest = it;
    if (oldest == entries_.end())
      return std::nullopt;
    const PageIndex page = oldest->second.page;
    pageHashes_.erase(page);
    entries_.erase(oldest);
    return page;
  }

private:
  struct Entry {
    PageIndex page = 0;
    uint64_t parent = 0;
    PageIndex parentPage = kNoParent;
    std::vector<int32_t> tokens;
    uint64_t lastUse = 0;
  };
  std::unordered_map<uint64_t, Entry> entries_;
  std::unordered_map<PageIndex, uint64_t> pageHashes_;
  uint64_t clock_ = 0;
};

} // namespace dlm::kv
