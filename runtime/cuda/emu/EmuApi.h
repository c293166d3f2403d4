// Internal to the emulation: the emulated driver and cuBLASLt functions, declared with exactly the
// types of cuda.h's and cublasLt.h's (decltype of the real declaration), so a signature that
// drifts from the library's does not compile and a missing emulation does not link. The names
// are the API names in namespace dlm::emu::api; cuda.h's macros turn them into the versioned
// names (api::cuMemAlloc_v2) just as for the real library.
#pragma once

#include "runtime/cuda/CublasLtSymbols.h"
#include "runtime/cuda/CudaDriverSymbols.h"

#include <cublasLt.h>
#include <cuda.h>

#include <functional>
#include <string>

namespace dlm::emu {

namespace api {
#define DLM_EMU_DECLARE_API(name) decltype(::name) name;
DLM_CUDA_DRIVER_SYMBOLS(DLM_EMU_DECLARE_API)
DLM_CUBLASLT_SYMBOLS(DLM_EMU_DECLARE_API)
#undef DLM_EMU_DECLARE_API
} // namespace api

// Runs `work` on `stream` in stream order: now, on the calling thread, or, while the stream is
// being captured, recorded into the graph and run at each replay. `work` must own (copy) what it
// reads at enqueue time; its result is the operation's result.
using StreamWork = std::function<CUresult()>;
CUresult enqueueOnStream(CUstream stream, StreamWork work);

// A potentially synchronising call (a synchronous copy, an allocation or a free) while a stream
// captures is an error in CUDA, except under a relaxed capture: true while such a capture is
// under way. invalidateCaptures() marks them failed, as CUDA does. (The emulation applies the
// global mode's rule to thread-local captures too: it does not track capturing threads.)
bool anyStreamCapturing();
void invalidateCaptures();

// True when the stream is a valid handle (0 and the legacy / per-thread handles included).
bool validStream(CUstream stream);

// Worker threads and fiber stack size of launches, and the compute capability the device
// reports (major * 10 + minor; cuBLASLt's FP8 GEMMs depend on it) (EmuDriverOptions).
unsigned emulatedWorkers();
size_t emulatedFiberStackBytes();
int emulatedComputeCapability();
void configureEmulatedDevice(unsigned workers, size_t fiberStackBytes, int computeCapability);

// The per-thread diagnostics behind lastModuleLog() / lastLaunchError().
void setLastModuleLog(std::string log);
void setLastLaunchError(std::string message);

} // namespace dlm::emu
