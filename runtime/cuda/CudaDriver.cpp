#include "runtime/cuda/CudaDriver.h"

#include <dlfcn.h>

namespace dlm::cuda {

namespace {

// Two steps, so that a name cuda.h defines as a macro is expanded before it is quoted:
// cuMemAlloc -> "cuMemAlloc_v2".
#define DLM_CUDA_SYMBOL_STRING(name) DLM_CUDA_SYMBOL_STRING_EXPANDED(name)
#define DLM_CUDA_SYMBOL_STRING_EXPANDED(name) #name

std::string lastDlError() {
  const char *message = dlerror();
  return message ? message : "unknown error";
}

// For results the library cannot name itself (the stub libcuda answers cuGetErrorName with an
// error too).
const char *knownResultName(CUresult result) {
  switch (result) {
  case CUDA_ERROR_STUB_LIBRARY:
    return "CUDA_ERROR_STUB_LIBRARY";
  case CUDA_ERROR_NO_DEVICE:
    return "CUDA_ERROR_NO_DEVICE";
  case CUDA_ERROR_NOT_INITIALIZED:
    return "CUDA_ERROR_NOT_INITIALIZED";
  case CUDA_ERROR_OUT_OF_MEMORY:
    return "CUDA_ERROR_OUT_OF_MEMORY";
  default:
    return "CUDA error";
  }
}

} // namespace

StatusOr<std::shared_ptr<const CudaDriver>> CudaDriver::load(const char *library) {
  dlerror(); // clear a stale message
  void *handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    return Status::error("CUDA driver not available: " + std::string(library) + ": " +
                         lastDlError());
  std::shared_ptr<CudaDriver> driver(new CudaDriver());
  driver->handle_ = handle;
  driver->library_ = library;

#define DLM_CUDA_DRIVER_RESOLVE(name)                                                              \
  driver->name = reinterpret_cast<decltype(&::name)>(dlsym(handle, DLM_CUDA_SYMBOL_STRING(name))); \
  if (!driver->name)                                                                               \
    return Status::error("CUDA driver " + std::string(library) + " lacks " +                       \
                         DLM_CUDA_SYMBOL_STRING(name) + " (driver older than CUDA " +              \
                         std::to_string(CUDA_VERSION / 1000) + "." +                               \
                         std::to_string(CUDA_VERSION % 1000 / 10) + "?)");
  DLM_CUDA_DRIVER_SYMBOLS(DLM_CUDA_DRIVER_RESOLVE)
#undef DLM_CUDA_DRIVER_RESOLVE

  return std::shared_ptr<const CudaDriver>(std::move(driver));
}

CudaDriver::~CudaDriver() {
  if (handle_)
    dlclose(handle_);
}

Status CudaDriver::check(CUresult result, const char *what) const {
  if (result == CUDA_SUCCESS)
    return Status::ok();
  const char *name = nullptr;
  const char *description = nullptr;
  if (!cuGetErrorName || cuGetErrorName(result, &name) != CUDA_SUCCESS || !name)
    name = knownResultName(result);
  if (!cuGetErrorString || cuGetErrorString(result, &description) != CUDA_SUCCESS || !description)
    description =
        result == CUDA_ERROR_STUB_LIBRARY ? "the stub libcuda, not a driver" : "no description";
  return Status::error(std::string(what) + ": " + name + " (" + description + ") [" +
                       std::to_string(static_cast<int>(result)) + "]");
}

} // namespace dlm::cuda
