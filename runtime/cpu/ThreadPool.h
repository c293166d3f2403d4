// The threads of the CPU backend's own loops (attention, the batch-invariant GEMM, sampler rows).
// By default a parallel call runs on the OpenMP team that oneDNN's GEMMs use: libgomp's
// GOMP_parallel, looked up at run time rather than linked (the project's compiler would otherwise
// bring its own OpenMP runtime beside the one oneDNN links). One set of threads then serves every
// kernel. With a pool of its own beside oneDNN's team, the team's threads (which spin a while
// after each GEMM) took the cores the pool's threads needed: attention ran 2.5 times as long on
// the 86M bench model (bench/gemm_rate.py's checkpoint, 2 threads).
// Without libgomp in the process (a oneDNN built on another threading runtime), or when asked
// (Kind::own), the pool runs its own std::threads: they poll for 50 us after a call, then sleep
// on a condition variable.
#pragma once

#include "runtime/profile/Profiler.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace dlm::cpu {

class ThreadPool {
public:
  enum class Kind { oneDnnTeam, own };
  // `threads` counts the calling thread; 0 means one per hardware thread. oneDnnTeam falls back
  // to own threads when the process has no libgomp.
  explicit ThreadPool(int threads, Kind kind = Kind::oneDnnTeam);
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;
  ~ThreadPool();

  int threads() const { return threads_; }
  Kind kind() const { return workers_.empty() && threads_ > 1 ? Kind::oneDnnTeam : Kind::own; }

  // Times each thread's share of a parallel call on that thread's track (null: no timing).
  // Set before the first parallelFor.
  void setProfiler(profile::Profiler *profiler) { profiler_ = profiler; }

  // Splits [0, count) into one contiguous range per thread and calls body(begin, end, thread) on
  // each, the caller taking the first; returns when all are done. `thread` < threads() indexes
  // per-thread scratch. Runs inline when count < minParallel or the pool has one thread.
  // The body is called through a plain function pointer, not std::function, so that a call
  // never allocates (forwards must not allocate per step).
  template <typename Body> void parallelFor(int64_t count, int64_t minParallel, Body &&body) {
    run(count, minParallel, const_cast<void *>(static_cast<const void *>(&body)),
        [](void *context, int64_t begin, int64_t end, int thread) {
          (*static_cast<std::remove_reference_t<Body> *>(context))(begin, end, thread);
        });
  }

private:
  using Trampoline = void (*)(void *context, int64_t begin, int64_t end, int thread);
  void run(int64_t count, int64_t minParallel, void *context, Trampoline call);
  void workerLoop(int index);
  void runShare(int thread, int parts);

  int threads_ = 1;
  std::vector<std::thread> workers_;
  // Workers and the caller spin a little (kSpin) before they sleep on these: a forward's parallel
  // calls come back to back, and a worker woken from sleep was seen placed on its waker's CPU for
  // a whole run, two threads at one thread's rate (serving.md §3).
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  // A new call's generation is published after its count_/context_/call_ (release).
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stopping_{false};
  int64_t count_ = 0;
  void *context_ = nullptr;
  Trampoline call_ = nullptr;
  profile::Profiler *profiler_ = nullptr;
};

} // namespace dlm::cpu
