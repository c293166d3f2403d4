// The emulated driver's tables, result names, device, contexts and diagnostics. Memory, modules,
// launches, streams and graphs are in their own files (EmuMemory.cpp, EmuModules.cpp,
// EmuStreams.cpp); cuBLASLt in EmuCublasLt.cpp.
#include "runtime/cuda/emu/EmuDriver.h"

#include "runtime/cuda/emu/EmuApi.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

namespace dlm::emu {

// The one class CudaDriver and CublasLt befriend: fills their tables with the emulation.
class EmulatedTables {
public:
  static std::shared_ptr<const cuda::CudaDriver> driver() {
    std::shared_ptr<cuda::CudaDriver> table(new cuda::CudaDriver());
    table->library_ = "dlm emulated driver";
    table->emulated_ = true;
#define DLM_EMU_FILL(name) table->name = &api::name;
    DLM_CUDA_DRIVER_SYMBOLS(DLM_EMU_FILL)
    return table;
  }
  static std::shared_ptr<const cuda::CublasLt> cublasLt() {
    std::shared_ptr<cuda::CublasLt> table(new cuda::CublasLt());
    table->library_ = "dlm emulated cuBLASLt";
    table->emulated_ = true;
    DLM_CUBLASLT_SYMBOLS(DLM_EMU_FILL)
#undef DLM_EMU_FILL
    return table;
  }
};

namespace {

// $DLM_EMU_COMPUTE_CAPABILITY as major * 10 + minor ("80", "89", "90"), else 90.
int computeCapabilityFromEnvironment() {
  const char *text = std::getenv("DLM_EMU_COMPUTE_CAPABILITY");
  if (!text || !*text)
    return 90;
  char *end = nullptr;
  const long value = std::strtol(text, &end, 10);
  return *end == '\0' && value >= 50 && value < 1000 ? static_cast<int>(value) : 90;
}

struct DeviceConfig {
  std::atomic<unsigned> workers{std::max(1u, std::thread::hardware_concurrency())};
  std::atomic<size_t> fiberStackBytes{64 * 1024};
  std::atomic<int> computeCapability{computeCapabilityFromEnvironment()};
};

DeviceConfig &deviceConfig() {
  static DeviceConfig config;
  return config;
}

thread_local std::string lastModuleLogText;
thread_local std::string lastLaunchErrorText;
// cuGetErrorString's answer with the diagnostics appended (valid until the next call).
thread_local std::string errorStringWithContext;

std::atomic<bool> initialised{false};

// The checks of a call that writes `out` for `device`, in the driver's order: a null output, a
// driver not initialised, a device other than the one emulated (ordinal 0).
CUresult checkDeviceCall(const void *out, CUdevice device) {
  if (!out)
    return CUDA_ERROR_INVALID_VALUE;
  if (!initialised)
    return CUDA_ERROR_NOT_INITIALIZED;
  return device == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

// A query of one fixed fact of the device: `value` written to `out` once the call's checks pass.
template <class T> CUresult answerDeviceQuery(T *out, CUdevice device, T value) {
  const CUresult checked = checkDeviceCall(out, device);
  if (checked == CUDA_SUCCESS)
    *out = value;
  return checked;
}

struct ResultText {
  CUresult result;
  const char *name;
  const char *description;
};

// The results the emulation returns, and the common ones a caller may ask about.
constexpr ResultText kResults[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_INVALID_SOURCE, "CUDA_ERROR_INVALID_SOURCE", "device kernel source is invalid"},
    {CUDA_ERROR_FILE_NOT_FOUND, "CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
    {CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
     "too many resources requested for launch"},
    {CUDA_ERROR_INVALID_ADDRESS_SPACE, "CUDA_ERROR_INVALID_ADDRESS_SPACE",
     "operation not supported on global/shared address space"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE",
     "the operation is not permitted in the current state"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

const ResultText *findResult(CUresult result) {
  for (const ResultText &text : kResults)
    if (text.result == result)
      return &text;
  return nullptr;
}

// The one emulated device's primary context, and contexts made by cuCtxCreate. A context carries
// no state of its own: the emulation's memory, modules and streams are process-wide.
struct Context {
  int primaryReferences = 0;
};
Context primaryContext;
std::mutex contextMutex;
std::set<Context *> createdContexts;
thread_local CUcontext currentContext = nullptr;

CUcontext handleOf(Context *context) { return reinterpret_cast<CUcontext>(context); }

size_t pageBytes() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

// The emulated device's memory is the host's: `pages` is _SC_PHYS_PAGES or _SC_AVPHYS_PAGES.
size_t hostMemoryBytes(int pages) { return static_cast<size_t>(sysconf(pages)) * pageBytes(); }

} // namespace

unsigned emulatedWorkers() { return deviceConfig().workers.load(); }
size_t emulatedFiberStackBytes() { return deviceConfig().fiberStackBytes.load(); }
int emulatedComputeCapability() { return deviceConfig().computeCapability.load(); }
void configureEmulatedDevice(unsigned workers, size_t fiberStackBytes, int computeCapability) {
  deviceConfig().workers = workers ? workers : std::max(1u, std::thread::hardware_concurrency());
  deviceConfig().fiberStackBytes = fiberStackBytes;
  deviceConfig().computeCapability =
      computeCapability ? computeCapability : computeCapabilityFromEnvironment();
}

void setLastModuleLog(std::string log) { lastModuleLogText = std::move(log); }
void setLastLaunchError(std::string message) { lastLaunchErrorText = std::move(message); }
std::string lastModuleLog() { return lastModuleLogText; }
std::string lastLaunchError() { return lastLaunchErrorText; }

StatusOr<std::shared_ptr<const cuda::CudaDriver>>
emulatedCudaDriver(const EmuDriverOptions &options) {
  if (options.fiberStackBytes < 16 * 1024)
    return Status::error("emulated CUDA driver: a fiber stack of " +
                         std::to_string(options.fiberStackBytes) +
                         " bytes is too small (at least 16 KiB)");
  configureEmulatedDevice(options.workers, options.fiberStackBytes, options.computeCapability);
  return EmulatedTables::driver();
}

StatusOr<std::shared_ptr<const cuda::CublasLt>> emulatedCublasLt() {
  return EmulatedTables::cublasLt();
}

namespace api {

CUresult cuInit(unsigned int flags) {
  if (flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  initialised = true;
  return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *version) {
  if (!version)
    return CUDA_ERROR_INVALID_VALUE;
  *version = CUDA_VERSION;
  return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult error, const char **text) {
  if (!text)
    return CUDA_ERROR_INVALID_VALUE;
  const ResultText *known = findResult(error);
  *text = known ? known->name : nullptr;
  return known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult error, const char **text) {
  if (!text)
    return CUDA_ERROR_INVALID_VALUE;
  const ResultText *known = findResult(error);
  if (!known) {
    *text = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
  }
  // The compiler's log or the launch's message: what the caller needs to see next to the result.
  const std::string *context = nullptr;
  if ((error == CUDA_ERROR_INVALID_SOURCE || error == CUDA_ERROR_INVALID_IMAGE) &&
      !lastModuleLogText.empty())
    context = &lastModuleLogText;
  if (error == CUDA_ERROR_LAUNCH_FAILED && !lastLaunchErrorText.empty())
    context = &lastLaunchErrorText;
  if (!context) {
    *text = known->description;
    return CUDA_SUCCESS;
  }
  errorStringWithContext = std::string(known->description) + ": " + *context;
  *text = errorStringWithContext.c_str();
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
  if (!count)
    return CUDA_ERROR_INVALID_VALUE;
  if (!initialised)
    return CUDA_ERROR_NOT_INITIALIZED;
  *count = 1;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  return answerDeviceQuery<CUdevice>(device, ordinal, 0);
}

CUresult cuDeviceGetName(char *name, int length, CUdevice device) {
  if (length <= 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult checked = checkDeviceCall(name, device); checked != CUDA_SUCCESS)
    return checked;
  const char kName[] = "dlm emulated device";
  const size_t copied = std::min(sizeof kName - 1, static_cast<size_t>(length) - 1);
  std::memcpy(name, kName, copied);
  name[copied] = '\0';
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attribute, CUdevice device) {
  if (CUresult checked = checkDeviceCall(value, device); checked != CUDA_SUCCESS)
    return checked;
  switch (attribute) {
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
    *value = emulatedComputeCapability() / 10;
    break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
    *value = emulatedComputeCapability() % 10;
    break;
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
    *value = static_cast<int>(emulatedWorkers());
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
    *value = 1024;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
    *value = 64;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
    *value = 2147483647;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
    *value = 65535;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
    *value = 48 * 1024;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
    *value = 228 * 1024;
    break;
  case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
    *value = 32;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
    *value = 2048;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
  case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
    *value = 65536;
    break;
  case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
    *value = 64 * 1024;
    break;
  case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
    *value = 50 * 1024 * 1024;
    break;
  case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
    *value = 1'000'000; // kHz
    break;
  case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
    *value = 64;
    break;
  case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
  case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
  case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
    *value = 1;
    break;
  case CU_DEVICE_ATTRIBUTE_INTEGRATED:
  case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
  case CU_DEVICE_ATTRIBUTE_TCC_DRIVER:
  case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT:
  case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
  case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
  case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
    *value = 0;
    break;
  default:
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem(size_t *bytes, CUdevice device) {
  return answerDeviceQuery(bytes, device, hostMemoryBytes(_SC_PHYS_PAGES));
}

CUresult cuMemGetInfo(size_t *freeBytes, size_t *totalBytes) {
  if (!freeBytes || !totalBytes)
    return CUDA_ERROR_INVALID_VALUE;
  *totalBytes = hostMemoryBytes(_SC_PHYS_PAGES);
  *freeBytes = hostMemoryBytes(_SC_AVPHYS_PAGES);
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *context, CUdevice device) {
  if (CUresult checked = checkDeviceCall(context, device); checked != CUDA_SUCCESS)
    return checked;
  std::lock_guard<std::mutex> lock(contextMutex);
  ++primaryContext.primaryReferences;
  *context = handleOf(&primaryContext);
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice device) {
  if (device != 0)
    return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(contextMutex);
  if (primaryContext.primaryReferences == 0)
    return CUDA_ERROR_INVALID_CONTEXT;
  --primaryContext.primaryReferences;
  return CUDA_SUCCESS;
}

CUresult cuCtxCreate(CUcontext *context, CUctxCreateParams *, unsigned int, CUdevice device) {
  if (CUresult checked = checkDeviceCall(context, device); checked != CUDA_SUCCESS)
    return checked;
  std::lock_guard<std::mutex> lock(contextMutex);
  Context *created = new Context();
  createdContexts.insert(created);
  *context = handleOf(created);
  currentContext = *context; // cuCtxCreate makes the new context current
  return CUDA_SUCCESS;
}

CUresult cuCtxDestroy(CUcontext context) {
  std::lock_guard<std::mutex> lock(contextMutex);
  auto found = createdContexts.find(reinterpret_cast<Context *>(context));
  if (found == createdContexts.end())
    return CUDA_ERROR_INVALID_CONTEXT;
  delete *found;
  createdContexts.erase(found);
  if (currentContext == context)
    currentContext = nullptr;
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext context) {
  std::lock_guard<std::mutex> lock(contextMutex);
  if (context && context != handleOf(&primaryContext) &&
      !createdContexts.count(reinterpret_cast<Context *>(context)))
    return CUDA_ERROR_INVALID_CONTEXT;
  currentContext = context;
  return CUDA_SUCCESS;
}

// Every stream completes its work before returning, so there is never anything to wait for.
CUresult cuCtxSynchronize() { return CUDA_SUCCESS; }

} // namespace api

} // namespace dlm::emu
