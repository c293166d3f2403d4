// Opt-in timing of the runtime: scoped timers around requests, blocks, denoise steps, forwards and
// each kernel call of a backend, recorded into a buffer allocated once, up front. A Profiler is
// handed to the runtime as a pointer (SessionOptions::profiler); where it is null a Scope is one
// predictable branch: no clock read, no allocation, no store to shared memory.
//
// Events sit on tracks: a `thread` track per backend thread (0 = the calling thread, 1.. = the
// CPU pool's workers) carries forwards and kernels; a `request` track per request id carries the
// request, its blocks, steps and forwards as the decoding loop sees them. Recording is lock-free
// (one atomic increment per event), so pool workers record too.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace dlm::profile {

// What an event times. The kernel kinds come first; `isKernel` tells them apart.
enum class Category : uint8_t {
  embedding,
  rmsnorm,
  gemm,
  rope,
  kvStore,
  attention,
  elementwise,
  moe, // a mixture-of-experts record: routing and every expert's GEMMs
  lmHead,
  // Not kernels:
  forward,
  step,
  block,
  request,
  workerShare,
};
inline constexpr int kCategoryCount = static_cast<int>(Category::workerShare) + 1;

// "gemm", "lm_head", "worker_share", ... (the Chrome trace `cat` and the report's row names).
const char *categoryName(Category category);
inline bool isKernel(Category category) { return category <= Category::lmHead; }

enum class TrackKind : uint8_t { thread, request };

// One timed interval. `name` points to a string literal. Arguments are -1 when they do not apply.
struct Event {
  const char *name;
  Category category;
  TrackKind track;
  uint64_t trackId; // thread index or request id
  int64_t startNs;  // since the profiler was created
  int64_t durationNs;
  int64_t layer;
  int64_t tokens;
  int64_t index; // step or block number
  // A GEMM's (gemm, lm_head) output and input widths N and K beside its `tokens` rows M.
  int64_t outputs;
  int64_t inputs;
};

class Profiler {
public:
  // Room for `capacity` events; later events are counted as dropped, never reallocated.
  explicit Profiler(size_t capacity = kDefaultCapacity);
  Profiler(const Profiler &) = delete;
  Profiler &operator=(const Profiler &) = delete;

  static constexpr size_t kDefaultCapacity = size_t(1) << 20;

  int64_t nowNs() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - epoch_).count();
  }

  // Thread-safe.
  void record(const Event &event) {
    const size_t slot = next_.fetch_add(1, std::memory_order_relaxed);
    if (slot < capacity_)
      events_[slot] = event;
    else
      dropped_.fetch_add(1, std::memory_order_relaxed);
  }

  // The recorded events in recording order (a child before its parent: scopes record when they
  // close). Read them only when no thread records.
  const Event *begin() const { return events_.get(); }
  const Event *end() const { return events_.get() + size(); }
  size_t size() const {
    const size_t next = next_.load(std::memory_order_relaxed);
    return next < capacity_ ? next : capacity_;
  }
  size_t capacity() const { return capacity_; }
  size_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  // Forgets every event; the buffer stays.
  void clear();

private:
  using Clock = std::chrono::steady_clock;

  Clock::time_point epoch_;
  size_t capacity_;
  // Not value-initialised: the pages are committed as events are written.
  std::unique_ptr<Event[]> events_;
  std::atomic<size_t> next_{0};
  std::atomic<size_t> dropped_{0};
};

// Times its own lifetime into `profiler`, when there is one.
class Scope {
public:
  Scope(Profiler *profiler, Category category, const char *name,
        TrackKind track = TrackKind::thread, uint64_t trackId = 0, int64_t layer = -1,
        int64_t tokens = -1, int64_t index = -1)
      : profiler_(profiler) {
    if (__builtin_expect(profiler != nullptr, 0))
      begin(category, name, track, trackId, layer, tokens, index);
  }
  ~Scope() {
    if (__builtin_expect(profiler_ != nullptr, 0))
      end();
  }
  Scope(const Scope &) = delete;
  Scope &operator=(const Scope &) = delete;

  // Marks the event a GEMM of [tokens, inputs] x [inputs, outputs].
  void setGemmShape(int64_t outputs, int64_t inputs) {
    if (__builtin_expect(profiler_ != nullptr, 0)) {
      event_.outputs = outputs;
      event_.inputs = inputs;
    }
  }

private:
  void begin(Category category, const char *name, TrackKind track, uint64_t trackId,
             int64_t layer, int64_t tokens, int64_t index) {
    event_.name = name;
    event_.category = category;
    event_.track = track;
    event_.trackId = trackId;
    event_.layer = layer;
    event_.tokens = tokens;
    event_.index = index;
    event_.outputs = -1;
    event_.inputs = -1;
    event_.startNs = profiler_->nowNs();
  }
  void end() {
    event_.durationNs = profiler_->nowNs() - event_.startNs;
    profiler_->record(event_);
  }

  Profiler *profiler_;
  Event event_; // written only when profiling
};

// A kernel call on backend thread `thread` (0 = the caller).
inline Scope kernelScope(Profiler *profiler, Category category, const char *name, int64_t layer,
                         int64_t tokens, uint64_t thread = 0) {
  return Scope(profiler, category, name, TrackKind::thread, thread, layer, tokens);
}

} // namespace dlm::profile
