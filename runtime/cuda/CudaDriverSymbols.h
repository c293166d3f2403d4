// The libcuda entry points the cuda backend uses, in one X-macro list: X(name) for each. Names
// are the API names of cuda.h; where cuda.h maps a name onto a versioned symbol (cuMemAlloc ->
// cuMemAlloc_v2, cuCtxCreate -> cuCtxCreate_v4, cuGraphInstantiate ->
// cuGraphInstantiateWithFlags) the table resolves that versioned symbol, because the macro is
// expanded wherever the list is.
//
// Add an entry here, and only here, to make another driver function available.
#pragma once

#define DLM_CUDA_DRIVER_SYMBOLS(X)                                                             \
  /* Initialisation, devices, contexts */                                                      \
  X(cuInit)                                                                                    \
  X(cuDriverGetVersion)                                                                        \
  X(cuGetErrorName)                                                                            \
  X(cuGetErrorString)                                                                          \
  X(cuDeviceGet)                                                                               \
  X(cuDeviceGetCount)                                                                          \
  X(cuDeviceGetName)                                                                           \
  X(cuDeviceGetAttribute)                                                                      \
  X(cuDeviceTotalMem)                                                                          \
  X(cuDevicePrimaryCtxRetain)                                                                  \
  X(cuDevicePrimaryCtxRelease)                                                                 \
  X(cuCtxCreate)                                                                               \
  X(cuCtxDestroy)                                                                              \
  X(cuCtxSetCurrent)                                                                           \
  X(cuCtxSynchronize)                                                                          \
  /* Modules and launches */                                                                   \
  X(cuModuleLoadData)                                                                          \
  X(cuModuleLoadDataEx)                                                                        \
  X(cuModuleUnload)                                                                            \
  X(cuModuleGetFunction)                                                                       \
  X(cuFuncGetAttribute)                                                                        \
  X(cuFuncSetAttribute)                                                                        \
  X(cuLaunchKernel)                                                                            \
  /* Memory */                                                                                 \
  X(cuMemAlloc)                                                                                \
  X(cuMemFree)                                                                                 \
  X(cuMemAllocHost)                                                                            \
  X(cuMemFreeHost)                                                                             \
  X(cuMemGetInfo)                                                                              \
  X(cuMemcpyHtoD)                                                                              \
  X(cuMemcpyDtoH)                                                                              \
  X(cuMemcpyHtoDAsync)                                                                         \
  X(cuMemcpyDtoHAsync)                                                                         \
  X(cuMemcpyDtoDAsync)                                                                         \
  X(cuMemsetD8Async)                                                                           \
  X(cuMemsetD32Async)                                                                          \
  /* Streams and events */                                                                     \
  X(cuStreamCreate)                                                                            \
  X(cuStreamDestroy)                                                                           \
  X(cuStreamSynchronize)                                                                       \
  X(cuEventCreate)                                                                             \
  X(cuEventDestroy)                                                                            \
  X(cuEventRecord)                                                                             \
  X(cuEventSynchronize)                                                                        \
  X(cuEventElapsedTime)                                                                        \
  /* CUDA graphs: the captured denoise loop */                                                 \
  X(cuStreamBeginCapture)                                                                      \
  X(cuStreamEndCapture)                                                                        \
  X(cuGraphInstantiate)                                                                        \
  X(cuGraphLaunch)                                                                             \
  X(cuGraphExecDestroy)                                                                        \
  X(cuGraphDestroy)
