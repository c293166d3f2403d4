#include "runtime/cuda/KernelTimer.h"

#include <algorithm>
#include <cmath>

namespace dlm::cuda {

KernelTimer::~KernelTimer() {
  for (CUevent event : pool_)
    (void)driver_->cuEventDestroy(event);
}

Status KernelTimer::mark(CUstream stream) {
  if (used_ == pool_.size()) {
    CUevent event = nullptr;
    DLM_RETURN_IF_ERROR(driver_->check(driver_->cuEventCreate(&event, CU_EVENT_DEFAULT),
                                       "profiling: cuEventCreate"));
    pool_.push_back(event);
  }
  return driver_->check(driver_->cuEventRecord(pool_[used_++], stream),
                        "profiling: cuEventRecord");
}

Status KernelTimer::start(CUstream stream, int64_t originNs) {
  used_ = 0;
  parts_.clear();
  originNs_ = originNs;
  return mark(stream);
}

Status KernelTimer::begin(CUstream stream, const profile::Event &event) {
  if (used_ != 2 * parts_.size() + 1)
    return Status::error("profiling: internal error: a kernel part begun outside a forward or "
                         "inside another part");
  parts_.push_back(event);
  return mark(stream);
}

Status KernelTimer::end(CUstream stream) {
  if (used_ != 2 * parts_.size())
    return Status::error("profiling: internal error: a kernel part ended that was not begun");
  return mark(stream);
}

StatusOr<int64_t> KernelTimer::elapsedNs(CUevent from, CUevent to) const {
  float milliseconds = 0;
  DLM_RETURN_IF_ERROR(driver_->check(driver_->cuEventElapsedTime(&milliseconds, from, to),
                                     "profiling: cuEventElapsedTime"));
  // The events' resolution is about half a microsecond: round, and never let a part end before
  // it starts.
  return std::max<int64_t>(0, std::llround(static_cast<double>(milliseconds) * 1e6));
}

Status KernelTimer::record(profile::Profiler &profiler) const {
  if (used_ != 2 * parts_.size() + 1)
    return Status::error("profiling: internal error: a kernel part was not ended");
  for (size_t i = 0; i < parts_.size(); ++i) {
    profile::Event event = parts_[i];
    DLM_ASSIGN_OR_RETURN(const int64_t offset, elapsedNs(pool_[0], pool_[2 * i + 1]));
    DLM_ASSIGN_OR_RETURN(event.durationNs, elapsedNs(pool_[2 * i + 1], pool_[2 * i + 2]));
    event.startNs = originNs_ + offset;
    profiler.record(event);
  }
  return Status::ok();
}

} // namespace dlm::cuda
