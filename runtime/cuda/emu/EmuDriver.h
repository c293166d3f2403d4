// The emulated CUDA driver and cuBLASLt: CudaDriver and CublasLt tables whose entries are
// emulations with libcuda's and libcublasLt's exact signatures, so the cuda backend runs
// unchanged on a machine without a GPU (dlm-run --device cuda-emu).
//
// What is emulated:
//   - one device ("dlm emulated device", compute capability 9.0 unless EmuDriverOptions say
//     otherwise) whose memory is host memory;
//   - cuModuleLoadData takes the NUL-terminated CUDA C++ source of generated kernels (not PTX or
//     a cubin): it is compiled by the host compiler with EmuPrelude.h into a shared object,
//     cached on disk (under $DLM_EMU_CACHE_DIR, else $XDG_CACHE_HOME/dlm/emu, else
//     ~/.cache/dlm/emu), dlopen'ed, and its extern "C" __global__ kernels become its functions;
//   - launches run on an emu::Device; streams run their work in order on the calling thread
//     (eagerly: a call returns when its work is done); stream capture records a stream's work
//     into a graph that cuGraphLaunch replays;
//   - cuBLASLt GEMMs (f32 / bf16, and FP8 E4M3 with scalar or outer-vector scales; fp32
//     accumulation, bias epilogue) enqueued on those streams.
//
// All emulated state (allocations, modules, streams, graphs) is process-wide, like a driver's.
#pragma once

#include "runtime/cuda/CublasLt.h"
#include "runtime/cuda/CudaDriver.h"
#include "support/Status.h"

#include <cstddef>
#include <memory>
#include <string>

namespace dlm::emu {

struct EmuDriverOptions {
  // Threads that run a launch's blocks (0: one per hardware thread). Also the device's
  // multiprocessor count. The most recent emulatedCudaDriver() call sets it for the process.
  unsigned workers = 0;
  // Stack of each emulated thread (a fiber).
  size_t fiberStackBytes = 64 * 1024;
  // The compute capability the device reports, major * 10 + minor (0: $DLM_EMU_COMPUTE_CAPABILITY,
  // e.g. 80 or 89, else 90). The emulated cuBLASLt's FP8 GEMMs follow it as cuBLASLt does: none
  // below 8.9, per-row and per-column (outer vector) scales on 9.0 only.
  int computeCapability = 0;
};

// The emulated driver's table; its emulated() is true and library() is "dlm emulated driver".
StatusOr<std::shared_ptr<const cuda::CudaDriver>>
emulatedCudaDriver(const EmuDriverOptions &options = {});

// The emulated cuBLASLt's table; its work goes onto the emulated driver's streams.
StatusOr<std::shared_ptr<const cuda::CublasLt>> emulatedCublasLt();

// Why the calling thread's latest cuModuleLoadData failed (for CUDA_ERROR_INVALID_SOURCE the
// host compiler's output), and why its latest cuLaunchKernel (or a launch replayed by
// cuGraphLaunch) failed (for CUDA_ERROR_LAUNCH_FAILED the emulated device's message: a bad
// launch shape, a deadlock); empty after a success. The emulated cuGetErrorString of
// CUDA_ERROR_INVALID_SOURCE / INVALID_IMAGE / LAUNCH_FAILED appends it, so CudaDriver::check
// reports it.
std::string lastModuleLog();
std::string lastLaunchError();

} // namespace dlm::emu
