// Device timing of a forward's kernel records while the runtime is profiled
// (BackendOptions::profiler): a pair of CUDA events around each part a record enqueues on the
// stream, read once the forward's stream is synchronized and recorded as profiler events on the
// calling thread's track, each at the forward's origin on the profiler clock plus its offset on the
// device from the forward's first event, so that the kernels sit inside their forward in a trace.
//
// The events come from a pool that grows to the most a forward has needed and is reused by every
// later forward; they are destroyed with the timer, whose owner keeps the context current then.
#pragma once

#include "runtime/cuda/CudaDriver.h"
#include "runtime/profile/Profiler.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace dlm::cuda {

class KernelTimer {
public:
  explicit KernelTimer(std::shared_ptr<const CudaDriver> driver) : driver_(std::move(driver)) {}
  ~KernelTimer();
  KernelTimer(const KernelTimer &) = delete;
  KernelTimer &operator=(const KernelTimer &) = delete;

  // Starts a forward on `stream`, forgetting the previous one's parts: marks its origin, which
  // the device reaches at `originNs` on the profiler clock (the stream is idle between forwards).
  Status start(CUstream stream, int64_t originNs);
  // Brackets one part of a record: what `event` says about it (name, category, layer, tokens,
  // GEMM shape) is kept; record() fills in its start and duration.
  Status begin(CUstream stream, const profile::Event &event);
  Status end(CUstream stream);
  // Once the stream is synchronized: every bracketed part into `profiler`.
  Status record(profile::Profiler &profiler) const;

private:
  // Records the pool's next event on `stream`, creating it first when the pool is exhausted.
  Status mark(CUstream stream);
  // Nanoseconds from `from` to `to`, both recorded and complete.
  StatusOr<int64_t> elapsedNs(CUevent from, CUevent to) const;

  std::shared_ptr<const CudaDriver> driver_;
  // pool_[0] is the forward's origin; part i lies between pool_[2i + 1] and pool_[2i + 2].
  std::vector<CUevent> pool_;
  size_t used_ = 0;
  std::vector<profile::Event> parts_;
  int64_t originNs_ = 0;
};

} // namespace dlm::cuda
