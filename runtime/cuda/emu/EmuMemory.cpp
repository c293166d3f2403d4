// Emulated device memory: host memory, 256-byte aligned like cudaMalloc's, tracked so that
// freeing a pointer that is not a live allocation is CUDA_ERROR_INVALID_VALUE as on a device.
#include "runtime/cuda/emu/EmuAccessChecks.h"
#include "runtime/cuda/emu/EmuApi.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace dlm::emu {

namespace {

constexpr size_t kAlignment = 256;

struct Allocations {
  std::mutex mutex;
  std::unordered_map<void *, size_t> device; // pointer -> bytes
  std::unordered_map<void *, size_t> host;   // page-locked host memory (cuMemAllocHost)
};

Allocations &allocations() {
  static Allocations instance;
  return instance;
}

// Synchronous copies, allocations and frees must not run while a stream captures (CUDA would
// have to synchronise the capturing stream); like CUDA, trying invalidates the capture.
CUresult refuseWhileCapturing() {
  if (!anyStreamCapturing())
    return CUDA_SUCCESS;
  invalidateCaptures();
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

CUresult allocate(std::unordered_map<void *, size_t> Allocations::*table, void **pointer,
                  size_t bytes) {
  if (!pointer || bytes == 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult refused = refuseWhileCapturing(); refused != CUDA_SUCCESS)
    return refused;
  // Exactly `bytes`, aligned: under AddressSanitizer the redzone starts at the allocation's end,
  // so an emulated kernel reading past it is reported (EmuModules.cpp's memcheck).
  void *memory = nullptr;
  if (posix_memalign(&memory, kAlignment, bytes) != 0)
    return CUDA_ERROR_OUT_OF_MEMORY;
  Allocations &all = allocations();
  std::lock_guard<std::mutex> lock(all.mutex);
  (all.*table)[memory] = bytes;
  *pointer = memory;
  return CUDA_SUCCESS;
}

CUresult release(std::unordered_map<void *, size_t> Allocations::*table, void *pointer) {
  if (CUresult refused = refuseWhileCapturing(); refused != CUDA_SUCCESS)
    return refused;
  Allocations &all = allocations();
  {
    std::lock_guard<std::mutex> lock(all.mutex);
    if (!(all.*table).erase(pointer))
      return CUDA_ERROR_INVALID_VALUE;
  }
  std::free(pointer);
  return CUDA_SUCCESS;
}

void *hostPointer(CUdeviceptr pointer) { return reinterpret_cast<void *>(pointer); }

} // namespace

namespace api {

CUresult cuMemAlloc(CUdeviceptr *pointer, size_t bytes) {
  if (!pointer)
    return CUDA_ERROR_INVALID_VALUE;
  void *memory = nullptr;
  const CUresult result = allocate(&Allocations::device, &memory, bytes);
  if (result == CUDA_SUCCESS) {
    *pointer = reinterpret_cast<CUdeviceptr>(memory);
    trackDeviceAllocation(memory, bytes);
  }
  return result;
}

CUresult cuMemFree(CUdeviceptr pointer) {
  // Untracked first: once freed, the address may be another thread's new allocation.
  untrackDeviceAllocation(hostPointer(pointer));
  return release(&Allocations::device, hostPointer(pointer));
}

CUresult cuMemAllocHost(void **pointer, size_t bytes) {
  return allocate(&Allocations::host, pointer, bytes);
}

CUresult cuMemFreeHost(void *pointer) { return release(&Allocations::host, pointer); }

CUresult cuMemcpyHtoD(CUdeviceptr destination, const void *source, size_t bytes) {
  if (bytes && (!destination || !source))
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult refused = refuseWhileCapturing(); refused != CUDA_SUCCESS)
    return refused;
  if (bytes)
    std::memcpy(hostPointer(destination), source, bytes);
  markDeviceWritten(hostPointer(destination), bytes);
  return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoH(void *destination, CUdeviceptr source, size_t bytes) {
  if (bytes && (!destination || !source))
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult refused = refuseWhileCapturing(); refused != CUDA_SUCCESS)
    return refused;
  if (bytes)
    std::memcpy(destination, hostPointer(source), bytes);
  return CUDA_SUCCESS;
}

// The asynchronous copies and sets read their source when they run: at once, or at each replay
// of a captured graph (a graph's copy node reads whatever the source holds then).
CUresult cuMemcpyHtoDAsync(CUdeviceptr destination, const void *source, size_t bytes,
                           CUstream stream) {
  if (bytes && (!destination || !source))
    return CUDA_ERROR_INVALID_VALUE;
  return enqueueOnStream(stream, [=] {
    if (bytes)
      std::memcpy(hostPointer(destination), source, bytes);
    markDeviceWritten(hostPointer(destination), bytes);
    return CUDA_SUCCESS;
  });
}

CUresult cuMemcpyDtoHAsync(void *destination, CUdeviceptr source, size_t bytes, CUstream stream) {
  if (bytes && (!destination || !source))
    return CUDA_ERROR_INVALID_VALUE;
  return enqueueOnStream(stream, [=] {
    if (bytes)
      std::memcpy(destination, hostPointer(source), bytes);
    return CUDA_SUCCESS;
  });
}

CUresult cuMemcpyDtoDAsync(CUdeviceptr destination, CUdeviceptr source, size_t bytes,
                           CUstream stream) {
  if (bytes && (!destination || !source))
    return CUDA_ERROR_INVALID_VALUE;
  return enqueueOnStream(stream, [=] {
    if (bytes)
      std::memmove(hostPointer(destination), hostPointer(source), bytes);
    copyDeviceWrittenState(hostPointer(destination), hostPointer(source), bytes);
    return CUDA_SUCCESS;
  });
}

CUresult cuMemsetD8Async(CUdeviceptr destination, unsigned char value, size_t count,
                         CUstream stream) {
  if (count && !destination)
    return CUDA_ERROR_INVALID_VALUE;
  return enqueueOnStream(stream, [=] {
    if (count)
      std::memset(hostPointer(destination), value, count);
    markDeviceWritten(hostPointer(destination), count);
    return CUDA_SUCCESS;
  });
}

CUresult cuMemsetD32Async(CUdeviceptr destination, unsigned int value, size_t count,
                          CUstream stream) {
  if (count && (!destination || destination % 4 != 0))
    return CUDA_ERROR_INVALID_VALUE;
  return enqueueOnStream(stream, [=] {
    unsigned int *words = static_cast<unsigned int *>(hostPointer(destination));
    for (size_t i = 0; i < count; ++i)
      words[i] = value;
    markDeviceWritten(words, count * sizeof value);
    return CUDA_SUCCESS;
  });
}

} // namespace api

} // namespace dlm::emu
