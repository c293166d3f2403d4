// Emulated kernel launches: cuLaunchKernel copies the parameter values (a captured graph keeps
// the values of capture time, as CUDA does) and enqueues a run of the kernel on an emu::Device.
#include "runtime/cuda/emu/EmuApi.h"
#include "runtime/cuda/emu/EmuModule.h"

#include <cstddef>
#include <cstring>
#include <memory>
#include <vector>

namespace dlm::emu {

namespace {

constexpr int kMaxStaticSharedBytes = 48 * 1024;

// The kernel's parameter values, each at a 16-byte aligned offset of one buffer.
struct ParameterValues {
  std::vector<size_t> offsets;
  std::vector<std::max_align_t> storage; // 16-byte aligned

  unsigned char *bytes() const {
    return reinterpret_cast<unsigned char *>(const_cast<std::max_align_t *>(storage.data()));
  }

  ParameterValues(const std::vector<size_t> &sizes, void **values) {
    size_t total = 0;
    for (size_t size : sizes) {
      offsets.push_back(total);
      total += (size + 15) / 16 * 16;
    }
    storage.resize(total / sizeof(std::max_align_t) + 1);
    for (size_t i = 0; i < sizes.size(); ++i)
      std::memcpy(bytes() + offsets[i], values[i], sizes[i]);
  }
  std::vector<void *> pointers() const {
    std::vector<void *> result;
    for (size_t offset : offsets)
      result.push_back(bytes() + offset);
    result.push_back(nullptr);
    return result;
  }
};

CUresult refuse(CUresult result, std::string message) {
  setLastLaunchError(std::move(message));
  return result;
}

} // namespace

namespace api {

CUresult cuLaunchKernel(CUfunction handle, unsigned int gridX, unsigned int gridY,
                        unsigned int gridZ, unsigned int blockX, unsigned int blockY,
                        unsigned int blockZ, unsigned int sharedMemBytes, CUstream stream,
                        void **kernelParams, void **extra) {
  setLastLaunchError(""); // a message always belongs to the latest launch
  EmuFunction *function = liveFunction(handle);
  if (!function)
    return CUDA_ERROR_INVALID_HANDLE;
  if (!validStream(stream))
    return CUDA_ERROR_INVALID_HANDLE;
  if (extra)
    return refuse(CUDA_ERROR_NOT_SUPPORTED,
                  "not supported yet: cuLaunchKernel's `extra` parameter buffer on the emulated "
                  "driver (pass kernelParams)");
  if (sharedMemBytes != 0)
    return refuse(CUDA_ERROR_INVALID_VALUE,
                  "emulated launch of " + function->name + ": " + std::to_string(sharedMemBytes) +
                      " bytes of dynamic shared memory requested; the emulated device runs "
                      "kernels with static shared memory only");
  if (!kernelParams && !function->parameterSizes.empty())
    return refuse(CUDA_ERROR_INVALID_VALUE, "emulated launch of " + function->name +
                                                ": kernelParams is null for a kernel with " +
                                                std::to_string(function->parameterSizes.size()) +
                                                " parameters");

  auto values = std::make_shared<const ParameterValues>(function->parameterSizes, kernelParams);
  const KernelEntry entry = function->entry;
  const std::string name = function->name;
  const Dim3 grid{gridX, gridY, gridZ};
  const Dim3 block{blockX, blockY, blockZ};
  return enqueueOnStream(stream, [=] {
    std::vector<void *> pointers = values->pointers();
    const Device device(emulatedWorkers(), emulatedFiberStackBytes());
    Status status = device.launch(entry, name, grid, block, pointers.data());
    if (!status)
      return refuse(CUDA_ERROR_LAUNCH_FAILED, status.message());
    return CUDA_SUCCESS;
  });
}

CUresult cuFuncGetAttribute(int *value, CUfunction_attribute attribute, CUfunction handle) {
  if (!value)
    return CUDA_ERROR_INVALID_VALUE;
  EmuFunction *function = liveFunction(handle);
  if (!function)
    return CUDA_ERROR_INVALID_HANDLE;
  switch (attribute) {
  case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
    *value = 1024;
    break;
  case CU_FUNC_ATTRIBUTE_NUM_REGS:
    *value = 32;
    break;
  case CU_FUNC_ATTRIBUTE_PTX_VERSION:
  case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
    *value = 90;
    break;
  // Shared, constant and local memory of the emulated kernel live in host memory: none counted.
  case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
  case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
  case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
  case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA:
    *value = 0;
    break;
  case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
    *value = function->maxDynamicSharedBytes;
    break;
  case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
    *value = -1;
    break;
  default:
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult cuFuncSetAttribute(CUfunction handle, CUfunction_attribute attribute, int value) {
  EmuFunction *function = liveFunction(handle);
  if (!function)
    return CUDA_ERROR_INVALID_HANDLE;
  switch (attribute) {
  case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
    if (value < 0 || value > kMaxStaticSharedBytes)
      return CUDA_ERROR_INVALID_VALUE;
    function->maxDynamicSharedBytes = value;
    return CUDA_SUCCESS;
  case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
    return value >= -1 && value <= 100 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  default:
    return CUDA_ERROR_INVALID_VALUE;
  }
}

} // namespace api

} // namespace dlm::emu
