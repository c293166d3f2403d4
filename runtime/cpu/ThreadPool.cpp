#include "runtime/cpu/ThreadPool.h"

#include <algorithm>
#include <chrono>
#include <dlfcn.h>

namespace dlm::cpu {

namespace {

// How long a thread polls before it sleeps: longer than the gap between a forward's parallel
// calls, short enough that an idle pool gives its cores back at once.
constexpr std::chrono::microseconds kSpin{50};

inline void pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Polls `done` for up to kSpin; true once it holds.
template <typename Done> bool spinUntil(Done &&done) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0;; ++i) {
    if (done())
      return true;
    pause();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > until)
      return false;
  }
}

// libgomp's entry points, when the process has them.
struct Gomp {
  using Parallel = void (*)(void (*)(void *), void *, unsigned, unsigned);
  using Index = int (*)();
  Parallel parallel = reinterpret_cast<Parallel>(dlsym(RTLD_DEFAULT, "GOMP_parallel"));
  Index thread = reinterpret_cast<Index>(dlsym(RTLD_DEFAULT, "omp_get_thread_num"));
  Index team = reinterpret_cast<Index>(dlsym(RTLD_DEFAULT, "omp_get_num_threads"));
  bool available() const { return parallel && thread && team; }
};
const Gomp &gomp() {
  static const Gomp instance;
  return instance;
}

} // namespace

ThreadPool::ThreadPool(int threads, Kind kind) {
  if (threads <= 0)
    threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads_ = threads;
  if (kind == Kind::oneDnnTeam && gomp().available())
    return;
  for (int i = 1; i < threads; ++i)
    workers_.emplace_back([this, i] { workerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_.store(true);
  }
  wake_.notify_all();
  for (std::thread &worker : workers_)
    worker.join();
}

void ThreadPool::runShare(int thread, int parts) {
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
  auto called = [&] {
    return stopping_.load(std::memory_order_acquire) ||
           generation_.load(std::memory_order_acquire) != seen;
  };
  for (;;) {
    if (!spinUntil(called)) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, called);
    }
    if (stopping_.load(std::memory_order_acquire))
      return;
    seen = generation_.load(std::memory_order_acquire);
    runShare(index, threads());
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // The caller may be asleep: notify under the mutex it checks pending_ under.
      std::lock_guard<std::mutex> lock(mutex_);
      done_.notify_one();
    }
  }
}

void ThreadPool::run(int64_t count, int64_t minParallel, void *context, Trampoline call) {
  if (count <= 0)
    return;
  if (threads_ == 1 || count < std::max<int64_t>(minParallel, 2)) {
    call(context, 0, count, 0);
    return;
  }
  count_ = count;
  context_ = context;
  call_ = call;
  if (workers_.empty()) {
    // The team may be smaller than asked for (OMP_DYNAMIC, a thread limit): the shares follow
    // the team that runs.
    gomp().parallel(
        [](void *pool) {
          auto *self = static_cast<ThreadPool *>(pool);
          self->runShare(gomp().thread(), gomp().team());
        },
        this, static_cast<unsigned>(threads_), 0);
    context_ = nullptr;
    return;
  }
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  {
    // Under the mutex, so that a worker going to sleep sees the new generation or is woken.
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  runShare(0, threads());
  auto finished = [&] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!spinUntil(finished)) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, finished);
  }
  context_ = nullptr;
}

} // namespace dlm::cpu
