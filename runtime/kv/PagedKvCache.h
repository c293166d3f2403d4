// The bookkeeping of a paged KV cache: a pool of fixed-size pages, one block table per sequence
// (page of token t = table[t / pageTokens]), a reference count per page so that forked sequences
// share their common prefix, and the sequence operations below as the only way to change any of
// it. Where the K/V bytes of a page live (host memory, a GPU buffer) is the backend's business:
// this class only hands out page indices and asks the backend to copy a page when a shared page
// is about to be written (copy-on-write).
//
// Token slots of a sequence are either committed (final: a fork shares them) or pending (written
// by the forward that appended them, typically dropped again by trim()). Not thread-safe.
//
// Prefix sharing across sequences (docs/design/serving.md §4), once enabled: full committed pages
// are published by their content (the token ids of the page and of every page before it,
// PrefixIndex.h), and a new sequence adopts the published pages of its prompt's longest
// published prefix instead of computing them. The index holds a reference to each page it
// publishes; a page only it holds is cached, counts as free and is evicted, least recently used
// first, when a page is needed. Exact only when a slot's K/V depend on the tokens up to it alone
// (causal attention): the caller decides when to publish and adopt.
#pragma once

#include "runtime/kv/PrefixIndex.h"
#include "support/Status.h"

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

namespace dlm::kv {

using SequenceId = int32_t;
using PageIndex = int32_t;

class PagedKvCache {
public:
  // Copies the K/V contents of page `from` to page `to` (copy-on-write of a shared page).
  using PageCopier = std::function<void(PageIndex from, PageIndex to)>;

  PagedKvCache(int32_t pageCount, int32_t pageTokens, PageCopier copyPage);

  int32_t pageCount() const { return static_cast<int32_t>(refCounts_.size()); }
  int32_t pageTokens() const { return pageTokens_; }
  // Free pages, cached ones included (they are evicted on demand).
  int32_t freePages() const {
    return static_cast<int32_t>(freeList_.size()) + static_cast<int32_t>(cachedPages_);
  }
  // Published pages no sequence holds.
  int64_t cachedPages() const { return cachedPages_; }
  // How many block tables hold `page` (0 = free).
  int32_t refCount(PageIndex page) const { return refCounts_[static_cast<size_t>(page)]; }

  // ---- Sequence operations -----------------------------------------------------------------
  // A new, empty sequence.
  SequenceId create();
  // Adds `tokens` pending slots at the end of `sequence`, allocating pages as needed and copying
  // a shared last page before it is written. On "KV cache exhausted: need N pages, M free" the
  // cache is left unchanged.
  Status append(SequenceId sequence, int64_t tokens);
  // Makes every slot of `sequence` committed.
  Status commit(SequenceId sequence);
  // Makes slots [begin, end) of `sequence` writable again: every slot from `begin` on becomes
  // pending, and a page of the range that a fork shares is copied first (copy-on-write). On
  // "KV cache exhausted" the cache is left unchanged.
  Status rewrite(SequenceId sequence, int64_t begin, int64_t end);
  // Keeps the first `length` slots (committed or not) and releases pages no longer used.
  Status trim(SequenceId sequence, int64_t length);
  // A new sequence sharing the committed slots of `source` (pages are shared, not copied).
  StatusOr<SequenceId> fork(SequenceId source);
  // Releases every page of `sequence` and forgets it.
  Status remove(SequenceId sequence);

  // ---- Prefix sharing ------------------------------------------------------------------------
  void enablePrefixSharing() { sharing_ = true; }
  bool sharesPrefixes() const { return sharing_; }
  // An empty `sequence` takes the published pages of the longest published whole-page prefix of
  // tokens[0, maxTokens), as committed slots; returns how many tokens it took (0 when sharing is
  // off or nothing matches).
  StatusOr<int64_t> adoptPrefix(SequenceId sequence, const int32_t *tokens, int64_t maxTokens);
  // Publishes the full committed pages of `sequence` not yet published or adopted, whose slots
  // hold the K/V of tokens[0, committed) (pages hashed before are not read again: a forward
  // publishes what it computed, at its end).
  Status publishPrefix(SequenceId sequence, const int32_t *tokens);
  // Tokens adopted so far, all sequences together.
  int64_t adoptedTokens() const { return adoptedTokens_; }

  // ---- Queries -------------------------------------------------------------------------------
  bool contains(SequenceId sequence) const { return sequences_.count(sequence) != 0; }
  // 0 for an unknown sequence.
  int64_t length(SequenceId sequence) const;
  int64_t committedLength(SequenceId sequence) const;
  // Page indices in token order; empty for an unknown sequence.
  const std::vector<PageIndex> &blockTable(SequenceId sequence) const;
  // Pages a sequence of `tokens` slots occupies.
  int64_t pagesFor(int64_t tokens) const { return (tokens + pageTokens_ - 1) / pageTokens_; }

private:
  struct Sequence {
    int64_t length = 0;
    int64_t committed = 0;
    std::vector<PageIndex> pages;
    // The prefix hash of each leading page published or adopted, while its slots stay as they
    // were (trim and rewrite cut it back).
    std::vector<uint64_t> hashes;
  };
  // Forgets the hashes of the pages from the one holding slot `slot` on.
  void forgetHashesFrom(Sequence &seq, int64_t slot) const;

  StatusOr<Sequence *> find(SequenceId sequence, const char *operation);
  // A free page, evicting the least recently used cached page when none is on the free list.
  PageIndex takePage();
  void retainPage(PageIndex page);
  void releasePage(PageIndex page);
  // Whether the prefix index is the only other holder of `page`.
  bool onlyIndexShares(PageIndex page) const;
  // `page` (of a sequence that holds it), made safe to write: itself when nobody else holds it;
  // a copy when another sequence does, or when only the index does and more than `keepFree`
  // pages are free; else the index stops publishing it (a full pool never fails for a page
  // only the prefix cache shares).
  PageIndex writablePage(PageIndex page, int64_t keepFree);

  int32_t pageTokens_;
  PageCopier copyPage_;
  std::vector<int32_t> refCounts_;
  // Free pages, taken from the back: the lowest indices are handed out first.
  std::vector<PageIndex> freeList_;
  std::unordered_map<SequenceId, Sequence> sequences_;
  SequenceId nextSequence_ = 0;
  bool sharing_ = false;
  PrefixIndex index_;
  // Published pages held by the index alone.
  int64_t cachedPages_ = 0;
  int64_t adoptedTokens_ = 0;
};

} // namespace dlm::kv
