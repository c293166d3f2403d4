#include "runtime/cpu/ThreadPool.h"

#include <algorithm>

namespace dlm::cpu {

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0)
    threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < threads; ++i)
    workers_.emplace_back([this, i] { workerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread &worker : workers_)
    worker.join();
}

void ThreadPool::runShare(int thread) {
  const int64_t parts = threads();
  const int64_t begin = count_ * thread / parts;
  const int64_t end = count_ * (thread + 1) / parts;
  if (begin < end) {
    profile::Scope share(profiler_, profile::Category::workerShare, "worker_share",
                         profile::TrackKind::thread, static_cast<uint64_t>(thread), -1,
                         end - begin);
    call_(context_, begin, end, thread);
  }
}

void ThreadPool::workerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_)
        return;
      seen = generation_;
    }
    runShare(index);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0)
        done_.notify_one();
    }
  }
}

void ThreadPool::run(int64_t count, int64_t minParallel, void *context, Trampoline call) {
  if (count <= 0)
    return;
  if (workers_.empty() || count < std::max<int64_t>(minParallel, 2)) {
    call(context, 0, count, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    count_ = count;
    context_ = context;
    call_ = call;
    pending_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  runShare(0);
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return pending_ == 0; });
  context_ = nullptr;
}

} // namespace dlm::cpu
