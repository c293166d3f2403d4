#include "runtime/cuda/DeviceMemory.h"

namespace dlm::cuda {

DeviceAllocation &DeviceAllocation::operator=(DeviceAllocation &&other) noexcept {
  if (this != &other) {
    release();
    driver_ = std::move(other.driver_);
    pointer_ = other.pointer_;
    bytes_ = other.bytes_;
    other.pointer_ = 0;
    other.bytes_ = 0;
  }
  return *this;
}

Status DeviceAllocation::allocate(std::shared_ptr<const CudaDriver> driver, size_t bytes,
                                  const std::string &what) {
  release();
  driver_ = std::move(driver);
  if (bytes == 0)
    return Status::ok();
  CUdeviceptr pointer = 0;
  DLM_RETURN_IF_ERROR(driver_->check(driver_->cuMemAlloc(&pointer, bytes),
                                     (what + ": cuMemAlloc of " + std::to_string(bytes) +
                                      " bytes")
                                         .c_str()));
  pointer_ = pointer;
  bytes_ = bytes;
  return Status::ok();
}

void DeviceAllocation::release() {
  if (pointer_ && driver_)
    (void)driver_->cuMemFree(pointer_);
  pointer_ = 0;
  bytes_ = 0;
}

Status PinnedHostAllocation::allocate(std::shared_ptr<const CudaDriver> driver, size_t bytes,
                                      const std::string &what) {
  release();
  driver_ = std::move(driver);
  if (bytes == 0)
    return Status::ok();
  void *data = nullptr;
  DLM_RETURN_IF_ERROR(driver_->check(driver_->cuMemAllocHost(&data, bytes),
                                     (what + ": cuMemAllocHost of " + std::to_string(bytes) +
                                      " bytes")
                                         .c_str()));
  data_ = data;
  bytes_ = bytes;
  return Status::ok();
}

void PinnedHostAllocation::release() {
  if (data_ && driver_)
    (void)driver_->cuMemFreeHost(data_);
  data_ = nullptr;
  bytes_ = 0;
}

} // namespace dlm::cuda
