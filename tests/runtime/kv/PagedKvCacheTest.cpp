#include "runtime/kv/PagedKvCache.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace dlm::kv {
namespace {

// A cache of 8 pages of 4 tokens that records the copy-on-write copies it is asked for.
class PagedKvCacheTest : public ::testing::Test {
protected:
  PagedKvCacheTest()
      : cache(8, 4, [this](PageIndex from, PageIndex to) { copies.emplace_back(from, to); }) {}

  std::vector<std::pair<PageIndex, PageIndex>> copies;
  PagedKvCache cache;
};

TEST_F(PagedKvCacheTest, AppendAllocatesPagesAsTokensArrive) {
  SequenceId s = cache.create();
  EXPECT_EQ(cache.length(s), 0);
  ASSERT_TRUE(cache.append(s, 3).isOk());
  EXPECT_EQ(cache.blockTable(s).size(), 1u);
  ASSERT_TRUE(cache.append(s, 1).isOk()); // fills the first page exactly
  EXPECT_EQ(cache.blockTable(s).size(), 1u);
  ASSERT_TRUE(cache.append(s, 5).isOk());
  EXPECT_EQ(cache.length(s), 9);
  EXPECT_EQ(cache.blockTable(s).size(), 3u);
  EXPECT_EQ(cache.freePages(), 5);
  for (PageIndex page : cache.blockTable(s))
    EXPECT_EQ(cache.refCount(page), 1);
  EXPECT_TRUE(copies.empty());
}

TEST_F(PagedKvCacheTest, TrimReleasesWholePagesOnly) {
  SequenceId s = cache.create();
  ASSERT_TRUE(cache.append(s, 10).isOk());
  ASSERT_TRUE(cache.commit(s).isOk());
  ASSERT_TRUE(cache.trim(s, 5).isOk());
  EXPECT_EQ(cache.length(s), 5);
  EXPECT_EQ(cache.committedLength(s), 5);
  EXPECT_EQ(cache.blockTable(s).size(), 2u);
  EXPECT_EQ(cache.freePages(), 6);
  ASSERT_TRUE(cache.trim(s, 0).isOk());
  EXPECT_EQ(cache.freePages(), 8);
  EXPECT_TRUE(cache.blockTable(s).empty());
}

TEST_F(PagedKvCacheTest, TrimBeyondLengthIsAnError) {
  SequenceId s = cache.create();
  ASSERT_TRUE(cache.append(s, 3).isOk());
  Status status = cache.trim(s, 4);
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.message(), "KV cache trim: length 4 is outside [0, 3]");
  EXPECT_FALSE(cache.trim(s, -1).isOk());
}

TEST_F(PagedKvCacheTest, CommitMarksEverythingAppendedSoFar) {
  SequenceId s = cache.create();
  ASSERT_TRUE(cache.append(s, 6).isOk());
  EXPECT_EQ(cache.committedLength(s), 0);
  ASSERT_TRUE(cache.commit(s).isOk());
  ASSERT_TRUE(cache.append(s, 2).isOk());
  EXPECT_EQ(cache.committedLength(s), 6);
  EXPECT_EQ(cache.length(s), 8);
}

TEST_F(PagedKvCacheTest, ForkSharesCommittedPagesAndCountsReferences) {
  SequenceId a = cache.create();
  ASSERT_TRUE(cache.append(a, 8).isOk());
  ASSERT_TRUE(cache.commit(a).isOk());
  ASSERT_TRUE(cache.append(a, 3).isOk()); // pending: not shared
  StatusOr<SequenceId> b = cache.fork(a);
  ASSERT_TRUE(b.isOk());
  EXPECT_EQ(cache.length(*b), 8);
  EXPECT_EQ(cache.committedLength(*b), 8);
  ASSERT_EQ(cache.blockTable(*b).size(), 2u);
  EXPECT_EQ(cache.blockTable(*b)[0], cache.blockTable(a)[0]);
  EXPECT_EQ(cache.blockTable(*b)[1], cache.blockTable(a)[1]);
  EXPECT_EQ(cache.refCount(cache.blockTable(a)[0]), 2);
  EXPECT_EQ(cache.refCount(cache.blockTable(a)[2]), 1);
  EXPECT_EQ(cache.freePages(), 5);

  // Removing the source keeps the shared pages alive for the fork.
  ASSERT_TRUE(cache.remove(a).isOk());
  EXPECT_FALSE(cache.contains(a));
  EXPECT_EQ(cache.refCount(cache.blockTable(*b)[0]), 1);
  EXPECT_EQ(cache.freePages(), 6);
  ASSERT_TRUE(cache.remove(*b).isOk());
  EXPECT_EQ(cache.freePages(), 8);
}

TEST_F(PagedKvCacheTest, AppendingIntoASharedPartialPageCopiesItFirst) {
  SequenceId a = cache.create();
  ASSERT_TRUE(cache.append(a, 6).isOk()); // page 0 full, page 1 half
  ASSERT_TRUE(cache.commit(a).isOk());
  StatusOr<SequenceId> b = cache.fork(a);
  ASSERT_TRUE(b.isOk());
  const PageIndex shared = cache.blockTable(a)[1];
  ASSERT_TRUE(cache.append(*b, 1).isOk());
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].first, shared);
  EXPECT_NE(cache.blockTable(*b)[1], shared);
  EXPECT_EQ(copies[0].second, cache.blockTable(*b)[1]);
  EXPECT_EQ(cache.blockTable(*b)[0], cache.blockTable(a)[0]); // full page stays shared
  EXPECT_EQ(cache.refCount(shared), 1);
  // The source writing into its own (now unshared) page copies nothing.
  ASSERT_TRUE(cache.append(a, 1).isOk());
  EXPECT_EQ(copies.size(), 1u);
}

TEST_F(PagedKvCacheTest, AppendingAtAPageBoundaryOfASharedSequenceCopiesNothing) {
  SequenceId a = cache.create();
  ASSERT_TRUE(cache.append(a, 4).isOk());
  ASSERT_TRUE(cache.commit(a).isOk());
  StatusOr<SequenceId> b = cache.fork(a);
  ASSERT_TRUE(b.isOk());
  ASSERT_TRUE(cache.append(*b, 2).isOk());
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(cache.blockTable(*b).size(), 2u);
}

TEST_F(PagedKvCacheTest, ExhaustionIsANamedErrorAndChangesNothing) {
  SequenceId a = cache.create();
  ASSERT_TRUE(cache.append(a, 20).isOk()); // 5 pages
  SequenceId b = cache.create();
  Status status = cache.append(b, 13); // needs 4, 3 free
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.message(), "KV cache exhausted: need 4 pages, 3 free");
  EXPECT_EQ(cache.length(b), 0);
  EXPECT_EQ(cache.freePages(), 3);
  ASSERT_TRUE(cache.append(b, 12).isOk());
  EXPECT_EQ(cache.freePages(), 0);
}

TEST_F(PagedKvCacheTest, CopyOnWriteCountsTowardsExhaustion) {
  SequenceId a = cache.create();
  ASSERT_TRUE(cache.append(a, 30).isOk()); // 8 pages, last one half full
  ASSERT_TRUE(cache.commit(a).isOk());
  StatusOr<SequenceId> b = cache.fork(a);
  ASSERT_TRUE(b.isOk());
  Status status = cache.append(*b, 1);
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.message(), "KV cache exhausted: need 1 pages, 0 free");
  EXPECT_TRUE(copies.empty());
}

// A window forward (the dual cache) rewrites slots in place: from the window on nothing is final,
// and a page of the window that a fork shares is copied before it is written.
TEST_F(PagedKvCacheTest, RewriteMakesTheRangePendingAndCopiesSharedPages) {
  SequenceId a = cache.create();
  ASSERT_TRUE(cache.append(a, 12).isOk()); // pages 0, 1, 2
  ASSERT_TRUE(cache.commit(a).isOk());
  StatusOr<SequenceId> b = cache.fork(a);
  ASSERT_TRUE(b.isOk());
  const std::vector<PageIndex> before = cache.blockTable(*b);
  ASSERT_TRUE(cache.rewrite(*b, 5, 7).isOk()); // inside page 1 only
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].first, before[1]);
  EXPECT_EQ(cache.blockTable(*b)[0], before[0]);
  EXPECT_NE(cache.blockTable(*b)[1], before[1]);
  EXPECT_EQ(cache.blockTable(*b)[2], before[2]);
  EXPECT_EQ(cache.committedLength(*b), 5);
  EXPECT_EQ(cache.length(*b), 12);
  EXPECT_EQ(cache.committedLength(a), 12); // the source is untouched
  // Unshared now: rewriting it again copies nothing; an empty range changes nothing.
  ASSERT_TRUE(cache.rewrite(*b, 4, 8).isOk());
  EXPECT_EQ(copies.size(), 1u);
  EXPECT_EQ(cache.committedLength(*b), 4);
  ASSERT_TRUE(cache.rewrite(*b, 2, 2).isOk());
  EXPECT_EQ(cache.committedLength(*b), 4);
  EXPECT_EQ(cache.rewrite(*b, 10, 13).message(),
            "KV cache rewrite: slots [10, 13) are outside [0, 12)");
}

TEST_F(PagedKvCacheTest, RewriteOfSharedPagesCountsTowardsExhaustion) {
  SequenceId a = cache.create();
  ASSERT_TRUE(cache.append(a, 28).isOk()); // 7 of 8 pages
  ASSERT_TRUE(cache.commit(a).isOk());
  StatusOr<SequenceId> b = cache.fork(a);
  ASSERT_TRUE(b.isOk());
  EXPECT_EQ(cache.rewrite(*b, 0, 8).message(), "KV cache exhausted: need 2 pages, 1 free");
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(cache.committedLength(*b), 28); // unchanged
}

TEST_F(PagedKvCacheTest, UnknownSequencesAreNamed) {
  Status status = cache.append(42, 1);
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.message(), "KV cache append: unknown sequence 42");
  EXPECT_FALSE(cache.trim(42, 0).isOk());
  EXPECT_FALSE(cache.commit(42).isOk());
  EXPECT_FALSE(cache.fork(42).isOk());
  EXPECT_FALSE(cache.remove(42).isOk());
  EXPECT_EQ(cache.length(42), 0);
  EXPECT_TRUE(cache.blockTable(42).empty());
}

TEST_F(PagedKvCacheTest, RemovedSequenceCannotBeUsedAgain) {
  SequenceId a = cache.create();
  ASSERT_TRUE(cache.append(a, 5).isOk());
  ASSERT_TRUE(cache.remove(a).isOk());
  EXPECT_FALSE(cache.append(a, 1).isOk());
  EXPECT_FALSE(cache.remove(a).isOk());
  EXPECT_EQ(cache.freePages(), 8);
}

TEST_F(PagedKvCacheTest, NegativeAppendIsRejected) {
  SequenceId a = cache.create();
  EXPECT_FALSE(cache.append(a, -1).isOk());
}

// ---- Prefix sharing ----------------------------------------------------------------------

// Sequence `s` holds tokens[0, n) committed and published.
void fillAndPublish(PagedKvCache &cache, SequenceId s, const std::vector<int32_t> &tokens) {
  ASSERT_TRUE(cache.append(s, static_cast<int64_t>(tokens.size())).isOk());
  ASSERT_TRUE(cache.commit(s).isOk());
  ASSERT_TRUE(cache.publishPrefix(s, tokens.data()).isOk());
}

TEST_F(PagedKvCacheTest, ASequenceAdoptsThePublishedPagesOfItsPrefix) {
  cache.enablePrefixSharing();
  const std::vector<int32_t> first = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  SequenceId a = cache.create();
  fillAndPublish(cache, a, first); // two full pages published, the third partial
  // The same first page, a different second one: only the first is shared.
  const std::vector<int32_t> second = {1, 2, 3, 4, 5, 6, 0, 8, 9, 10};
  SequenceId b = cache.create();
  StatusOr<int64_t> adopted = cache.adoptPrefix(b, second.data(), 9);
  ASSERT_TRUE(adopted.isOk());
  EXPECT_EQ(*adopted, 4);
  EXPECT_EQ(cache.blockTable(b)[0], cache.blockTable(a)[0]);
  EXPECT_EQ(cache.length(b), 4);
  EXPECT_EQ(cache.committedLength(b), 4);
  EXPECT_EQ(cache.refCount(cache.blockTable(a)[0]), 3); // a, b, the index
  // The same tokens: both pages; never more than maxTokens allow.
  SequenceId c = cache.create();
  EXPECT_EQ(*cache.adoptPrefix(c, first.data(), 10), 8);
  SequenceId d = cache.create();
  EXPECT_EQ(*cache.adoptPrefix(d, first.data(), 7), 4);
  EXPECT_EQ(cache.adoptedTokens(), 16);
  // Adopting into a sequence that holds slots is refused.
  EXPECT_FALSE(cache.adoptPrefix(a, first.data(), 10).isOk());
}

TEST_F(PagedKvCacheTest, CachedPagesCountAsFreeAndAreEvictedLeastRecentlyUsedFirst) {
  cache.enablePrefixSharing();
  const std::vector<int32_t> old = {1, 1, 1, 1, 2, 2, 2, 2};
  const std::vector<int32_t> recent = {3, 3, 3, 3};
  SequenceId a = cache.create();
  fillAndPublish(cache, a, old);
  SequenceId b = cache.create();
  fillAndPublish(cache, b, recent);
  ASSERT_TRUE(cache.remove(a).isOk());
  ASSERT_TRUE(cache.remove(b).isOk());
  EXPECT_EQ(cache.cachedPages(), 3);
  EXPECT_EQ(cache.freePages(), 8);
  // Six new pages take the five on the free list and evict the least recently used cached page:
  // the old chain's second page (a chain's last page counts as used before its first).
  SequenceId c = cache.create();
  ASSERT_TRUE(cache.append(c, 24).isOk());
  EXPECT_EQ(cache.cachedPages(), 2);
  SequenceId d = cache.create();
  EXPECT_EQ(*cache.adoptPrefix(d, old.data(), 8), 4) << "only the old chain's leaf was evicted";
  EXPECT_EQ(cache.cachedPages(), 1); // d holds the old first page again
  // The next page evicts the recent page; then every page is held and an append fails.
  SequenceId e = cache.create();
  ASSERT_TRUE(cache.append(e, 4).isOk());
  EXPECT_EQ(cache.cachedPages(), 0);
  SequenceId f = cache.create();
  EXPECT_EQ(*cache.adoptPrefix(f, recent.data(), 4), 0);
  EXPECT_FALSE(cache.append(d, 4).isOk());
}

TEST_F(PagedKvCacheTest, APublishedPageIsCopiedBeforeARewrite) {
  cache.enablePrefixSharing();
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  SequenceId a = cache.create();
  fillAndPublish(cache, a, tokens);
  const PageIndex published = cache.blockTable(a)[0];
  ASSERT_TRUE(cache.rewrite(a, 0, 4).isOk());
  EXPECT_NE(cache.blockTable(a)[0], published);
  EXPECT_EQ(copies.size(), 1u);
  SequenceId b = cache.create();
  EXPECT_EQ(*cache.adoptPrefix(b, tokens.data(), 4), 4);
  EXPECT_EQ(cache.blockTable(b)[0], published);
}

// A page trimmed away and written again is published with its new tokens; the pages before it
// keep their hashes.
TEST_F(PagedKvCacheTest, ATrimmedPageIsPublishedAgainWithItsNewTokens) {
  cache.enablePrefixSharing();
  const std::vector<int32_t> first = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<int32_t> second = {1, 2, 3, 4, 9, 9, 9, 9};
  SequenceId a = cache.create();
  fillAndPublish(cache, a, first);
  ASSERT_TRUE(cache.trim(a, 6).isOk());
  ASSERT_TRUE(cache.append(a, 2).isOk());
  ASSERT_TRUE(cache.commit(a).isOk());
  ASSERT_TRUE(cache.publishPrefix(a, second.data()).isOk());
  SequenceId b = cache.create();
  EXPECT_EQ(*cache.adoptPrefix(b, second.data(), 8), 8);
  EXPECT_EQ(cache.blockTable(b)[1], cache.blockTable(a)[1]);
  SequenceId c = cache.create();
  EXPECT_EQ(*cache.adoptPrefix(c, first.data(), 8), 8) << "the first version stays published";
  EXPECT_NE(cache.blockTable(c)[1], cache.blockTable(a)[1]);
}

// With every page in use, a write into a page only the index shares takes the page back from
// the index instead of failing for want of a copy.
TEST_F(PagedKvCacheTest, AFullPoolUnpublishesAPageInsteadOfCopyingIt) {
  cache.enablePrefixSharing();
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  SequenceId a = cache.create();
  fillAndPublish(cache, a, tokens);
  SequenceId other = cache.create();
  ASSERT_TRUE(cache.append(other, 24).isOk()); // the other 6 pages
  ASSERT_EQ(cache.freePages(), 0);
  const PageIndex second = cache.blockTable(a)[1];
  ASSERT_TRUE(cache.trim(a, 6).isOk());
  ASSERT_TRUE(cache.append(a, 2).isOk()) << "writes into the published page";
  EXPECT_EQ(cache.blockTable(a)[1], second) << "no copy: the index gave the page up";
  ASSERT_TRUE(cache.rewrite(a, 0, 4).isOk()) << "the same for a rewrite";
  EXPECT_TRUE(copies.empty());
  SequenceId b = cache.create();
  EXPECT_EQ(*cache.adoptPrefix(b, tokens.data(), 8), 0);
}

TEST_F(PagedKvCacheTest, WithoutSharingNothingIsPublishedOrAdopted) {
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  SequenceId a = cache.create();
  fillAndPublish(cache, a, tokens);
  SequenceId b = cache.create();
  EXPECT_EQ(*cache.adoptPrefix(b, tokens.data(), 4), 0);
  ASSERT_TRUE(cache.remove(a).isOk());
  EXPECT_EQ(cache.cachedPages(), 0);
  EXPECT_EQ(cache.freePages(), 8);
}

} // namespace
} // namespace dlm::kv
