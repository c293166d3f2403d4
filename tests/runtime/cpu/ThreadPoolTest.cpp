// ThreadPool (runtime/cpu/ThreadPool.h) on oneDNN's OpenMP team and on its own threads: every
// index of a call is handed out exactly once, in contiguous ranges, to thread indices below
// threads(); small calls run inline on the caller.
#include "runtime/cpu/ThreadPool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace dlm::cpu {
namespace {

void expectEveryIndexOnce(ThreadPool &pool, int64_t count) {
  std::vector<std::atomic<int>> seen(static_cast<size_t>(count));
  std::mutex mutex;
  std::set<int> threads;
  std::set<std::thread::id> systemThreads;
  pool.parallelFor(count, 2, [&](int64_t begin, int64_t end, int thread) {
    for (int64_t i = begin; i < end; ++i)
      seen[static_cast<size_t>(i)].fetch_add(1);
    std::lock_guard<std::mutex> lock(mutex);
    threads.insert(thread);
    systemThreads.insert(std::this_thread::get_id());
  });
  for (int64_t i = 0; i < count; ++i)
    ASSERT_EQ(seen[static_cast<size_t>(i)].load(), 1) << "index " << i;
  EXPECT_LE(threads.size(), static_cast<size_t>(pool.threads()));
  for (int thread : threads) {
    EXPECT_GE(thread, 0);
    EXPECT_LT(thread, pool.threads());
  }
  EXPECT_EQ(threads.size(), systemThreads.size());
  if (count >= pool.threads())
    EXPECT_EQ(threads.size(), static_cast<size_t>(pool.threads()));
}

TEST(ThreadPool, EveryIndexOnceOnTheOneDnnTeamAndOnOwnThreads) {
  for (ThreadPool::Kind kind : {ThreadPool::Kind::oneDnnTeam, ThreadPool::Kind::own})
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads, kind);
      EXPECT_EQ(pool.threads(), threads);
      for (int64_t count : {int64_t(1), int64_t(2), int64_t(7), int64_t(1000)})
        for (int repeat = 0; repeat < 3; ++repeat)
          expectEveryIndexOnce(pool, count);
    }
}

// The CPU backend links oneDNN, whose Debian build runs on libgomp: the default pool shares its
// team.
TEST(ThreadPool, SharesOneDnnsTeamByDefault) {
  EXPECT_EQ(ThreadPool(2).kind(), ThreadPool::Kind::oneDnnTeam);
  EXPECT_EQ(ThreadPool(2, ThreadPool::Kind::own).kind(), ThreadPool::Kind::own);
  EXPECT_EQ(ThreadPool(1).kind(), ThreadPool::Kind::own); // nothing to share
}

TEST(ThreadPool, SmallCallsRunInlineOnTheCaller) {
  for (ThreadPool::Kind kind : {ThreadPool::Kind::oneDnnTeam, ThreadPool::Kind::own}) {
    ThreadPool pool(2, kind);
    const std::thread::id caller = std::this_thread::get_id();
    int calls = 0;
    pool.parallelFor(5, 100, [&](int64_t begin, int64_t end, int thread) {
      ++calls;
      EXPECT_EQ(begin, 0);
      EXPECT_EQ(end, 5);
      EXPECT_EQ(thread, 0);
      EXPECT_EQ(std::this_thread::get_id(), caller);
    });
    EXPECT_EQ(calls, 1);
  }
}

} // namespace
} // namespace dlm::cpu
