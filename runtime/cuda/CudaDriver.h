// The CUDA driver API, opened at run time: dlm never links libcuda (a binary linked with -lcuda
// does not even start on a machine without a GPU driver). CudaDriver::load() dlopens the library
// and resolves every entry of CudaDriverSymbols.h in this one place; where the library or a
// symbol is missing it returns a named error instead.
//
// Call through the members as through cuda.h: driver->cuMemAlloc(&pointer, bytes) (the member
// carries cuda.h's versioned name, cuMemAlloc_v2, so the call has the right ABI).
#pragma once

#include "runtime/cuda/CudaDriverSymbols.h"
#include "support/Status.h"

#include <cuda.h>

#include <memory>
#include <string>

namespace dlm::emu {
class EmulatedTables;
} // namespace dlm::emu

namespace dlm::cuda {

// The library the driver is normally installed as.
inline constexpr const char *kCudaDriverLibrary = "libcuda.so.1";

class CudaDriver {
public:
  // Opens `library` (a file name searched like dlopen does, or a path) and resolves the table.
  // Errors: "CUDA driver not available: libcuda.so.1: <dlerror>", or
  // "CUDA driver libcuda.so.1 lacks cuGraphLaunch (...)" for a driver older than the table.
  static StatusOr<std::shared_ptr<const CudaDriver>> load(const char *library = kCudaDriverLibrary);

  CudaDriver(const CudaDriver &) = delete;
  CudaDriver &operator=(const CudaDriver &) = delete;
  ~CudaDriver();

  // ok, or "<what>: CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
  Status check(CUresult result, const char *what) const;

  const std::string &library() const { return library_; }
  // True for the emulated driver of emu::emulatedCudaDriver() (runtime/cuda/emu/EmuDriver.h).
  bool emulated() const { return emulated_; }

#define DLM_CUDA_DRIVER_MEMBER(name) decltype(&::name) name = nullptr;
  DLM_CUDA_DRIVER_SYMBOLS(DLM_CUDA_DRIVER_MEMBER)
#undef DLM_CUDA_DRIVER_MEMBER

private:
  friend class ::dlm::emu::EmulatedTables; // fills the table with the emulation
  CudaDriver() = default;

  void *handle_ = nullptr;
  std::string library_;
  bool emulated_ = false;
};

} // namespace dlm::cuda
