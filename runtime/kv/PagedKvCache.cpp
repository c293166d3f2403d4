#include "runtime/kv/PagedKvCache.h"

#include <algorithm>
#include <cassert>
#include <optional>
#include <string>

namespace dlm::kv {

PagedKvCache::PagedKvCache(int32_t pageCount, int32_t pageTokens, PageCopier copyPage)
    : pageTokens_(std::max(pageTokens, 1)), copyPage_(std::move(copyPage)),
      refCounts_(static_cast<size_t>(std::max(pageCount, 0)), 0) {
  freeList_.reserve(refCounts_.size());
  for (PageIndex page = pageCount - 1; page >= 0; --page)
    freeList_.push_back(page);
}

SequenceId PagedKvCache::create() {
  SequenceId id = nextSequence_++;
  sequences_.emplace(id, Sequence{});
  return id;
}

StatusOr<PagedKvCache::Sequence *> PagedKvCache::find(SequenceId sequence, const char *operation) {
  auto it = sequences_.find(sequence);
  if (it == sequences_.end())
    return Status::error(std::string("KV cache ") + operation + ": unknown sequence " +
                         std::to_string(sequence));
  return &it->second;
}

PageIndex PagedKvCache::takePage() {
  if (freeList_.empty()) {
    std::optional<PageIndex> evicted =
        index_.evict([&](PageIndex page) { return refCount(page) == 1; });
    assert(evicted && "takePage without a free or cached page");
    refCounts_[static_cast<size_t>(*evicted)] = 0;
    --cachedPages_;
    freeList_.push_back(*evicted);
  }
  PageIndex page = freeList_.back();
  freeList_.pop_back();
  refCounts_[static_cast<size_t>(page)] = 1;
  return page;
}

void PagedKvCache::retainPage(PageIndex page) {
  int32_t &count = refCounts_[static_cast<size_t>(page)];
  if (++count == 2 && index_.publishes(page))
    --cachedPages_; // a sequence holds it again
}

bool PagedKvCache::onlyIndexShares(PageIndex page) const {
  return refCount(page) == 2 && index_.publishes(page);
}

PageIndex PagedKvCache::writablePage(PageIndex page, int64_t keepFree) {
  if (refCount(page) <= 1)
    return page;
  if (onlyIndexShares(page) && freePages() <= keepFree) {
    index_.forget(page);
    --refCounts_[static_cast<size_t>(page)];
    return page;
  }
  PageIndex copy = takePage();
  copyPage_(page, copy);
  releasePage(page);
  return copy;
}

void PagedKvCache::releasePage(PageIndex page) {
  int32_t &count = refCounts_[static_cast<size_t>(page)];
  assert(count > 0);
  --count;
  if (count == 1 && index_.publishes(page))
    ++cachedPages_; // only the index holds it now
  else if (count == 0)
    freeList_.push_back(page);
}

Status PagedKvCache::append(SequenceId sequence, int64_t tokens) {
  StatusOr<Sequence *> found = find(sequence, "append");
  if (!found)
    return found.status();
  if (tokens < 0)
    return Status::error("KV cache append: negative token count " + std::to_string(tokens));
  Sequence &seq = **found;
  const int64_t newLength = seq.length + tokens;
  const int64_t newPages = pagesFor(newLength) - static_cast<int64_t>(seq.pages.size());
  // The first new slot lands in the current last page when that page is partly filled; if a
  // fork shares that page it must be copied first, which costs one more page.
  const bool writesSharedPage =
      tokens > 0 && seq.length % pageTokens_ != 0 && refCount(seq.pages.back()) > 1;
  const int64_t needed =
      newPages + (writesSharedPage && !onlyIndexShares(seq.pages.back()) ? 1 : 0);
  if (needed > freePages())
    return Status::error("KV cache exhausted: need " + std::to_string(needed) + " pages, " +
                         std::to_string(freePages()) + " free");
  if (writesSharedPage)
    seq.pages.back() = writablePage(seq.pages.back(), newPages);
  for (int64_t i = 0; i < newPages; ++i)
    seq.pages.push_back(takePage());
  seq.length = newLength;
  return Status::ok();
}

Status PagedKvCache::commit(SequenceId sequence) {
  StatusOr<Sequence *> found = find(sequence, "commit");
  if (!found)
    return found.status();
  (*found)->committed = (*found)->length;
  return Status::ok();
}

Status PagedKvCache::rewrite(SequenceId sequence, int64_t begin, int64_t end) {
  StatusOr<Sequence *> found = find(sequence, "rewrite");
  if (!found)
    return found.status();
  Sequence &seq = **found;
  if (begin < 0 || begin > end || end > seq.length)
    return Status::error("KV cache rewrite: slots [" + std::to_string(begin) + ", " +
                         std::to_string(end) + ") are outside [0, " + std::to_string(seq.length) +
                         ")");
  if (begin == end)
    return Status::ok();
  const size_t first = static_cast<size_t>(begin / pageTokens_);
  const size_t last = static_cast<size_t>(pagesFor(end));
  // Pages a fork shares must be copied; a page only the prefix index shares is copied while
  // pages are free, else it stops being published.
  int64_t copies = 0;
  for (size_t p = first; p < last; ++p)
    copies += refCount(seq.pages[p]) > 1 && !onlyIndexShares(seq.pages[p]) ? 1 : 0;
  if (copies > freePages())
    return Status::error("KV cache exhausted: need " + std::to_string(copies) + " pages, " +
                         std::to_string(freePages()) + " free");
  for (size_t p = first; p < last; ++p) {
    if (refCount(seq.pages[p]) <= 1)
      continue;
    if (!onlyIndexShares(seq.pages[p]))
      --copies;
    seq.pages[p] = writablePage(seq.pages[p], copies);
  }
  seq.committed = std::min(seq.committed, begin);
  forgetHashesFrom(seq, begin);
  return Status::ok();
}

void PagedKvCache::forgetHashesFrom(Sequence &seq, int64_t slot) const {
  seq.hashes.resize(std::min(seq.hashes.size(), static_cast<size_t>(slot / pageTokens_)));
}

Status PagedKvCache::trim(SequenceId sequence, int64_t length) {
  StatusOr<Sequence *> found = find(sequence, "trim");
  if (!found)
    return found.status();
  Sequence &seq = **found;
  if (length < 0 || length > seq.length)
    return Status::error("KV cache trim: length " + std::to_string(length) + " is outside [0, " +
                         std::to_string(seq.length) + "]");
  const size_t keepPages = static_cast<size_t>(pagesFor(length));
  while (seq.pages.size() > keepPages) {
    releasePage(seq.pages.back());
    seq.pages.pop_back();
  }
  seq.length = length;
  seq.committed = std::min(seq.committed, length);
  forgetHashesFrom(seq, length);
  return Status::ok();
}

StatusOr<SequenceId> PagedKvCache::fork(SequenceId source) {
  StatusOr<Sequence *> found = find(source, "fork");
  if (!found)
    return found.status();
  Sequence copy;
  copy.length = (*found)->committed;
  copy.committed = copy.length;
  copy.pages.assign((*found)->pages.begin(),
                    (*found)->pages.begin() + static_cast<ptrdiff_t>(pagesFor(copy.length)));
  copy.hashes = (*found)->hashes;
  forgetHashesFrom(copy, copy.length);
  for (PageIndex page : copy.pages)
    retainPage(page);
  SequenceId id = nextSequence_++;
  sequences_.emplace(id, std::move(copy));
  return id;
}

Status PagedKvCache::remove(SequenceId sequence) {
  StatusOr<Sequence *> found = find(sequence, "remove");
  if (!found)
    return found.status();
  for (PageIndex page : (*found)->pages)
    releasePage(page);
  sequences_.erase(sequence);
  return Status::ok();
}

StatusOr<int64_t> PagedKvCache::adoptPrefix(SequenceId sequence, const int32_t *tokens,
                                             int64_t maxTokens) {
  StatusOr<Sequence *> found = find(sequence, "adopt a prefix");
  if (!found)
    return found.status();
  Sequence &seq = **found;
  if (seq.length != 0)
    return Status::error("KV cache adopt a prefix: sequence " + std::to_string(sequence) +
                         " is not empty");
  if (!sharing_)
    return int64_t(0);
  uint64_t parent = 0;
  PageIndex parentPage = PrefixIndex::kNoParent;
  for (int64_t first = 0; first + pageTokens_ <= maxTokens; first += pageTokens_) {
    const uint64_t hash = PrefixIndex::pageHash(parent, tokens + first, pageTokens_);
    std::optional<PageIndex> page =
        index_.find(hash, parent, parentPage, tokens + first, pageTokens_);
    if (!page)
      break;
    retainPage(*page);
    seq.pages.push_back(*page);
    seq.hashes.push_back(hash);
    parent = hash;
    parentPage = *page;
  }
  index_.touch(seq.hashes);
  seq.length = seq.committed = static_cast<int64_t>(seq.pages.size()) * pageTokens_;
  adoptedTokens_ += seq.length;
  return seq.length;
}

Status PagedKvCache::publishPrefix(SequenceId sequence, const int32_t *tokens) {
  StatusOr<Sequence *> found = find(sequence, "publish a prefix");
  if (!found)
    return found.status();
  if (!sharing_)
    return Status::ok();
  Sequence &seq = **found;
  for (int64_t p = static_cast<int64_t>(seq.hashes.size());
       (p + 1) * pageTokens_ <= seq.committed; ++p) {
    const uint64_t parent = seq.hashes.empty() ? 0 : seq.hashes.back();
    const int32_t *pageTokens = tokens + p * pageTokens_;
    const uint64_t hash = PrefixIndex::pageHash(parent, pageTokens, pageTokens_);
    const PageIndex page = seq.pages[static_cast<size_t>(p)];
    // A page follows the page the index publishes for its parent (another sequence's, when that
    // one published the same tokens first); none once the parent is evicted: it could never be
    // found.
    std::optional<PageIndex> parentPage =
        p == 0 ? std::optional<PageIndex>(PrefixIndex::kNoParent) : index_.pageOf(parent);
    // The index's own reference: the sequence still holds the page, so it is not cached yet.
    if (parentPage && index_.insert(hash, parent, *parentPage, pageTokens, pageTokens_, page))
      ++refCounts_[static_cast<size_t>(page)];
    seq.hashes.push_back(hash);
  }
  index_.touch(seq.hashes);
  return Status::ok();
}

int64_t PagedKvCache::length(SequenceId sequence) const {
  auto it = sequences_.find(sequence);
  return it == sequences_.end() ? 0 : it->second.length;
}

int64_t PagedKvCache::committedLength(SequenceId sequence) const {
  auto it = sequences_.find(sequence);
  return it == sequences_.end() ? 0 : it->second.committed;
}

const std::vector<PageIndex> &PagedKvCache::blockTable(SequenceId sequence) const {
  static const std::vector<PageIndex> none;
  auto it = sequences_.find(sequence);
  return it == sequences_.end() ? none : it->second.pages;
}

} // namespace dlm::kv
