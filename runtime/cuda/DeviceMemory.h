// Device and pinned host allocations owned by the cuda backend, freed through the driver that
// made them. Buffers are carved from one allocation per purpose (weights, KV pool, workspace) so
// that a forward never allocates and an out-of-memory error names what did not fit.
#pragma once

#include "runtime/cuda/CudaDriver.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace dlm::cuda {

// One cuMemAlloc, freed on destruction. Empty (pointer 0) until allocate().
class DeviceAllocation {
public:
  DeviceAllocation() = default;
  DeviceAllocation(const DeviceAllocation &) = delete;
  DeviceAllocation &operator=(const DeviceAllocation &) = delete;
  DeviceAllocation(DeviceAllocation &&other) noexcept { *this = std::move(other); }
  DeviceAllocation &operator=(DeviceAllocation &&other) noexcept;
  ~DeviceAllocation() { release(); }

  // `what` names the allocation in the error ("KV pool: cuMemAlloc of 4096 bytes: ...").
  Status allocate(std::shared_ptr<const CudaDriver> driver, size_t bytes, const std::string &what);
  void release();

  CUdeviceptr pointer() const { return pointer_; }
  size_t bytes() const { return bytes_; }

private:
  std::shared_ptr<const CudaDriver> driver_;
  CUdeviceptr pointer_ = 0;
  size_t bytes_ = 0;
};

// One cuMemAllocHost (page-locked, so asynchronous copies really are), freed on destruction.
class PinnedHostAllocation {
public:
  PinnedHostAllocation() = default;
  PinnedHostAllocation(const PinnedHostAllocation &) = delete;
  PinnedHostAllocation &operator=(const PinnedHostAllocation &) = delete;
  ~PinnedHostAllocation() { release(); }

  Status allocate(std::shared_ptr<const CudaDriver> driver, size_t bytes, const std::string &what);
  void release();

  void *data() const { return data_; }
  size_t bytes() const { return bytes_; }

private:
  std::shared_ptr<const CudaDriver> driver_;
  void *data_ = nullptr;
  size_t bytes_ = 0;
};

// Offsets of sub-buffers inside one allocation, each aligned for 16-byte vector loads and for
// cuBLASLt (256 bytes, what cudaMalloc guarantees).
class ArenaLayout {
public:
  static constexpr size_t kAlignment = 256;

  // Reserves `bytes` and returns their offset.
  size_t add(size_t bytes) {
    const size_t offset = size_;
    size_ += (bytes + kAlignment - 1) / kAlignment * kAlignment;
    return offset;
  }
  size_t size() const { return size_; }

private:
  size_t size_ = 0;
};

} // namespace dlm::cuda
