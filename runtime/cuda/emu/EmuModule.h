// Internal to the emulation: what a CUmodule and a CUfunction of the emulated driver are.
#pragma once

#include "runtime/cuda/emu/EmuDevice.h"

#include <cuda.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dlm::emu {

struct EmuFunction {
  std::string name;
  KernelEntry entry = nullptr;
  // sizeof of each parameter, for copying kernelParams (a graph keeps the values of capture).
  std::vector<size_t> parameterSizes;
  int maxDynamicSharedBytes = 0; // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
};

struct EmuModule {
  void *library = nullptr; // dlopen handle of the compiled kernels
  std::string path;        // the cached shared object
  std::map<std::string, std::unique_ptr<EmuFunction>, std::less<>> functions;
};

// The function behind a handle of a loaded module, or null for a stale or foreign handle.
EmuFunction *liveFunction(CUfunction handle);

// The qualified names ("ns::name") of the extern "C" __global__ entry points of CUDA C++ source.
std::vector<std::string> findEntryPoints(const std::string &source);

} // namespace dlm::emu
