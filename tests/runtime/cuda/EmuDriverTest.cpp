// The emulated CUDA driver through its CudaDriver table, as the cuda backend drives it: device
// queries, memory, modules compiled at run time from CUDA C++ (with the on-disk cache and the
// compiler's log on failure), launches, streams, events and graph capture and replay.
#include "runtime/cuda/emu/EmuDriver.h"
#include "tests/runtime/cuda/EmuDriverFixture.h"

#include "compiler/codegen/Kernels.h"
#include "tests/runtime/cuda/EmuKernelConfigs.h"
#include "support/AddressSanitizer.h"

#include <gtest/gtest.h>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace {

using dlm::cuda::CublasLt;
using dlm::cuda::CudaDriver;

// Kernels exercising what the emulation must get right: shared memory, a barrier, warp
// shuffles, scalar parameters, namespaces and __launch_bounds__.
constexpr const char *kKernels = R"cuda(
#include <cuda_bf16.h>

namespace emu_driver_test {

// sums[blockIdx.x] = scale * the sum of this block's inputs.
extern "C" __global__ void __launch_bounds__(64) block_sum(const float *input, float scale,
                                                           int count, float *sums) {
  __shared__ float warpSums[32];
  const int index = blockIdx.x * blockDim.x + threadIdx.x;
  float value = index < count ? input[index] * scale : 0.f;
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_down_sync(0xffffffffu, value, offset);
  if ((threadIdx.x & 31) == 0)
    warpSums[threadIdx.x / 32] = value;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.f;
    for (unsigned w = 0; w < (blockDim.x + 31) / 32; ++w)
      total += warpSums[w];
    sums[blockIdx.x] = total;
  }
}

// data = data * a + b, elementwise.
extern "C" __global__ void affine(float *data, float a, float b, int count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count)
    data[i] = data[i] * a + b;
}

} // namespace emu_driver_test

// Reads lane 20 of a warp that has 16 lanes: the emulated device reports it instead of hanging.
extern "C" __global__ void shuffle_from_missing_lane(int *out) {
  out[threadIdx.x] = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x), 20);
}

/* extern "C" __global__ void commented_out(int *out) {} */
extern "C" __global__ void write_index(int *out) { out[threadIdx.x] = threadIdx.x; }
)cuda";

std::string makeTemporaryDirectory() {
  std::string pattern = ::testing::TempDir() + "dlm-emu-driver-XXXXXX";
  char *made = mkdtemp(pattern.data());
  return made ? std::string(made) : std::string();
}

// The shared objects in a cache directory.
std::vector<std::string> cachedObjects(const std::string &dir) {
  std::vector<std::string> names;
  if (DIR *listing = opendir(dir.c_str())) {
    while (dirent *entry = readdir(listing)) {
      const std::string name = entry->d_name;
      if (name.size() > 3 && name.compare(name.size() - 3, 3, ".so") == 0)
        names.push_back(name);
    }
    closedir(listing);
  }
  return names;
}

// The cache test below uses a directory of its own.
class EmuDriver : public dlm::testing::EmuDriverFixture {
protected:
  CUmodule loadKernels() {
    CUmodule module = nullptr;
    const CUresult result = cu().cuModuleLoadData(&module, kKernels);
    EXPECT_EQ(result, CUDA_SUCCESS) << dlm::emu::lastModuleLog();
    return module;
  }
};

TEST_F(EmuDriver, DescribesOneEmulatedDevice) {
  EXPECT_TRUE(cu().emulated());
  EXPECT_EQ(cu().library(), "dlm emulated driver");
#define DLM_EXPECT_EMULATED(name) EXPECT_NE(cu().name, nullptr) << #name;
  DLM_CUDA_DRIVER_SYMBOLS(DLM_EXPECT_EMULATED)
#undef DLM_EXPECT_EMULATED
  auto lt = dlm::emu::emulatedCublasLt();
  ASSERT_TRUE(lt) << lt.status().message();
#define DLM_EXPECT_EMULATED(name) EXPECT_NE((*lt)->name, nullptr) << #name;
  DLM_CUBLASLT_SYMBOLS(DLM_EXPECT_EMULATED)
#undef DLM_EXPECT_EMULATED
  int count = 0;
  ASSERT_EQ(cu().cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 1);
  CUdevice device = -1;
  ASSERT_EQ(cu().cuDeviceGet(&device, 0), CUDA_SUCCESS);
  EXPECT_EQ(cu().cuDeviceGet(&device, 1), CUDA_ERROR_INVALID_DEVICE);
  char name[64] = {};
  ASSERT_EQ(cu().cuDeviceGetName(name, sizeof name, device), CUDA_SUCCESS);
  EXPECT_STREQ(name, "dlm emulated device");
  auto attribute = [&](CUdevice_attribute which) {
    int value = -1;
    EXPECT_EQ(cu().cuDeviceGetAttribute(&value, which, device), CUDA_SUCCESS);
    return value;
  };
  EXPECT_EQ(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), 9);
  EXPECT_EQ(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR), 0);
  EXPECT_EQ(attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), 2); // the workers asked for
  EXPECT_EQ(attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK), 1024);
  EXPECT_EQ(attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK), 48 * 1024);
  EXPECT_EQ(attribute(CU_DEVICE_ATTRIBUTE_WARP_SIZE), 32);
  size_t total = 0, available = 0;
  ASSERT_EQ(cu().cuDeviceTotalMem(&total, device), CUDA_SUCCESS);
  ASSERT_EQ(cu().cuMemGetInfo(&available, &total), CUDA_SUCCESS);
  EXPECT_GT(total, 0u);
  EXPECT_LE(available, total);

  CUcontext created = nullptr;
  ASSERT_EQ(cu().cuCtxCreate(&created, nullptr, 0, device), CUDA_SUCCESS);
  EXPECT_EQ(cu().cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(cu().cuCtxDestroy(created), CUDA_SUCCESS);
  EXPECT_EQ(cu().cuCtxDestroy(created), CUDA_ERROR_INVALID_CONTEXT);
}

TEST_F(EmuDriver, NamesItsResults) {
  const char *name = nullptr;
  ASSERT_EQ(cu().cuGetErrorName(CUDA_ERROR_NOT_FOUND, &name), CUDA_SUCCESS);
  EXPECT_STREQ(name, "CUDA_ERROR_NOT_FOUND");
  const dlm::Status status = cu().check(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc");
  EXPECT_EQ(status.message(), "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory) [2]");
}

TEST_F(EmuDriver, AllocatesCopiesAndFrees) {
  CUdeviceptr buffer = 0;
  ASSERT_EQ(cu().cuMemAlloc(&buffer, 1000), CUDA_SUCCESS);
  EXPECT_EQ(buffer % 256, 0u);
  std::vector<int> in(250), out(250, -1);
  for (int i = 0; i < 250; ++i)
    in[i] = i * 7 - 3;
  ASSERT_EQ(cu().cuMemcpyHtoD(buffer, in.data(), 1000), CUDA_SUCCESS);
  ASSERT_EQ(cu().cuMemcpyDtoH(out.data(), buffer, 1000), CUDA_SUCCESS);
  EXPECT_EQ(in, out);

  CUstream stream = nullptr;
  ASSERT_EQ(cu().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cu().cuMemsetD32Async(buffer, 0x01020304u, 250, stream), CUDA_SUCCESS);
  ASSERT_EQ(cu().cuMemsetD8Async(buffer, 0xff, 4, stream), CUDA_SUCCESS);
  CUdeviceptr copy = 0;
  ASSERT_EQ(cu().cuMemAlloc(&copy, 1000), CUDA_SUCCESS);
  ASSERT_EQ(cu().cuMemcpyDtoDAsync(copy, buffer, 1000, stream), CUDA_SUCCESS);
  ASSERT_EQ(cu().cuMemcpyDtoHAsync(out.data(), copy, 1000, stream), CUDA_SUCCESS);
  ASSERT_EQ(cu().cuStreamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(out[0], -1);
  EXPECT_EQ(out[1], 0x01020304);
  EXPECT_EQ(out[249], 0x01020304);

  void *pinned = nullptr;
  ASSERT_EQ(cu().cuMemAllocHost(&pinned, 64), CUDA_SUCCESS);
  EXPECT_EQ(cu().cuMemFreeHost(pinned), CUDA_SUCCESS);
  EXPECT_EQ(cu().cuStreamDestroy(stream), CUDA_SUCCESS);
  EXPECT_EQ(cu().cuMemFree(copy), CUDA_SUCCESS);
  EXPECT_EQ(cu().cuMemFree(buffer), CUDA_SUCCESS);
}

TEST_F(EmuDriver, FreeingWhatIsNotAnAllocationIsInvalidValue) {
  CUdeviceptr buffer = 0;
  ASSERT_EQ(cu().cuMemAlloc(&buffer, 64), CUDA_SUCCESS);
  EXPECT_EQ(cu().cuMemFree(buffer + 16), CUDA_ERROR_INVALID_VALUE); // inside, not the start
  ASSERT_EQ(cu().cuMemFree(buffer), CUDA_SUCCESS);
  const dlm::Status twice = cu().check(cu().cuMemFree(buffer), "cuMemFree");
  EXPECT_EQ(twice.message(), "cuMemFree: CUDA_ERROR_INVALID_VALUE (invalid argument) [1]");
}

TEST_F(EmuDriver, LaunchesACompiledKernelWithSharedMemoryBarriersAndShuffles) {
  CUmodule module = loadKernels();
  ASSERT_NE(module, nullptr);
  CUfunction blockSum = nullptr;
  ASSERT_EQ(cu().cuModuleGetFunction(&blockSum, module, "block_sum"), CUDA_SUCCESS);

  const int count = 150; // 3 blocks of 64, the last one partly filled
  std::vector<float> input(count);
  for (int i = 0; i < count; ++i)
    input[i] = static_cast<float>(i % 13) - 4.f;
  CUdeviceptr deviceInput = 0, deviceSums = 0;
  ASSERT_EQ(cu().cuMemAlloc(&deviceInput, count * sizeof(float)), CUDA_SUCCESS);
  ASSERT_EQ(cu().cuMemAlloc(&deviceSums, 3 * sizeof(float)), CUDA_SUCCESS);
  ASSERT_EQ(cu().cuMemcpyHtoD(deviceInput, input.data(), count * sizeof(float)), CUDA_SUCCESS);
  float scale = 0.5f;
  int n = count;
  void *parameters[] = {&deviceInput, &scale, &n, &deviceSums};
  ASSERT_EQ(cu().cuLaunchKernel(blockSum, 3, 1, 1, 64, 1, 1, 0, nullptr, parameters, nullptr),
            CUDA_SUCCESS)
      << dlm::emu::lastLaunchError();
  std::vector<float> sums(3);
  ASSERT_EQ(cu().cuMemcpyDtoH(sums.data(), deviceSums, sizeof(float) * 3), CUDA_SUCCESS);
  for (int block = 0; block < 3; ++block) {
    float expected = 0.f;
    for (int i = block * 64; i < std::min(count, block * 64 + 64); ++i)
      expected += input[i] * scale;
    EXPECT_FLOAT_EQ(sums[block], expected) << "block " << block;
  }

  // A kernel at global scope, next to a commented-out one that must not be taken for a kernel.
  CUfunction writeIndex = nullptr;
  ASSERT_EQ(cu().cuModuleGetFunction(&writeIndex, module, "write_index"), CUDA_SUCCESS);
  CUfunction commented = nullptr;
  EXPECT_EQ(cu().cuModuleGetFunction(&commented, module, "commented_out"), CUDA_ERROR_NOT_FOUND);
  int attribute = 0;
  EXPECT_EQ(cu().cuFuncGetAttribute(&attribute, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, blockSum),
            CUDA_SUCCESS);
  EXPECT_EQ(attribute, 1024);

  EXPECT_EQ(cu().cuMemFree(deviceInput), CUDA_SUCCESS);
  EXPECT_EQ(cu().cuMemFree(deviceSums), CUDA_SUCCESS);
  EXPECT_EQ(cu().cuModuleUnload(module), CUDA_SUCCESS);
  EXPECT_EQ(cu().cuModuleUnload(module), CUDA_ERROR_INVALID_HANDLE);
}

// What the cuda backend does with an artifact: a generated kernel's source (with the shared device
// helpers, host-mode CUDA headers and __launch_bounds__) loaded and launched by name.
TEST_F(EmuDriver, RunsAGeneratedKernelFromItsSource) {
  const dlm::codegen::RmsNormParams params{100, true, dlm::codegen::ElementType::f32};
  auto kernel = dlm::codegen::generateRmsNorm(params);
  ASSERT_TRUE(kernel) << kernel.status().message();
  CUmodule module = nullptr;
  ASSERT_EQ(cu().cuModuleLoadData(&module, kernel->source.c_str()), CUDA_SUCCESS)
      << dlm::emu::lastModuleLog();
  CUfunction function = nullptr;
  ASSERT_EQ(cu().cuModuleGetFunction(&function, module, kernel->name.c_str()), CUDA_SUCCESS);

  const int width = 100, rows = 3;
  long long stride = width;
  std::vector<float> x(rows * width), y(rows * width, 0.f), weight(width);
  for (int i = 0; i < rows * width; ++i)
    x[i] = std::sin(0.37f * i) * 2.f;
  for (int i = 0; i < width; ++i)
    weight[i] = 0.5f + i / 100.f;
  CUdeviceptr xDevice = reinterpret_cast<CUdeviceptr>(x.data());
  CUdeviceptr yDevice = reinterpret_cast<CUdeviceptr>(y.data());
  CUdeviceptr weightDevice = reinterpret_cast<CUdeviceptr>(weight.data());
  int rowCount = rows, rowsPerToken = 1;
  float eps = 1e-5f;
  void *parameters[] = {&xDevice,      &stride,   &yDevice,      &stride,
                        &weightDevice, &rowCount, &rowsPerToken, &eps};
  ASSERT_EQ(cu().cuLaunchKernel(function, rows, 1, 1, kernel->blockThreads, 1, 1, 0, nullptr,
                                parameters, nullptr),
            CUDA_SUCCESS)
      << dlm::emu::lastLaunchError();
  for (int row = 0; row < rows; ++row) {
    double squares = 0.0;
    for (int i = 0; i < width; ++i)
      squares += double(x[row * width + i]) * x[row * width + i];
    const double scale = 1.0 / std::sqrt(squares / width + eps);
    for (int i = 0; i < width; ++i)
      ASSERT_NEAR(y[row * width + i], x[row * width + i] * scale * weight[i], 1e-5)
          << "row " << row << " element " << i;
  }
  EXPECT_EQ(cu().cuModuleUnload(module), CUDA_SUCCESS);
}

// Every kind of generated kernel compiles through cuModuleLoadData and is found by its name (the
// kernels' results are the emulated kernel tests' business: DlmCudaEmuTests).
TEST_F(EmuDriver, LoadsEveryKindOfGeneratedKernel) {
  using namespace dlm;
  std::vector<StatusOr<codegen::KernelSource>> kernels;
  kernels.push_back(codegen::generateAttention(cudatest::attentionConfigs().front()));
  kernels.push_back(codegen::generateRmsNorm(cudatest::rmsNormConfigs().front()));
  kernels.push_back(codegen::generateRope(cudatest::ropeConfigs().front()));
  kernels.push_back(codegen::generateGatedActivation(cudatest::gatedActivationConfigs().front()));
  kernels.push_back(codegen::generateSampler(cudatest::samplerConfigs().front()));
  kernels.push_back(codegen::generateAccept(cudatest::acceptConfigs().front()));
  kernels.push_back(codegen::generateRenoise(cudatest::renoiseConfigs().front()));
  kernels.push_back(codegen::generateEmbedding(cudatest::embeddingConfigs().front()));
  kernels.push_back(codegen::generateKvStore(cudatest::kvStoreConfigs().front()));
  for (const StatusOr<codegen::KernelSource> &kernel : kernels) {
    ASSERT_TRUE(kernel) << kernel.status().message();
    CUmodule module = nullptr;
    ASSERT_EQ(cu().cuModuleLoadData(&module, kernel->source.c_str()), CUDA_SUCCESS)
        << kernel->kind << ": " << dlm::emu::lastModuleLog();
    CUfunction function = nullptr;
    EXPECT_EQ(cu().cuModuleGetFunction(&function, module, kernel->name.c_str()), CUDA_SUCCESS)
        << kernel->kind << " " << kernel->name;
    EXPECT_EQ(cu().cuModuleUnload(module), CUDA_SUCCESS);
  }
}

TEST_F(EmuDriver, UnknownFunctionIsNotFound) {
  CUmodule module = loadKernels();
  ASSERT_NE(module, nullptr);
  CUfunction function = nullptr;
  EXPECT_EQ(cu().cuModuleGetFunction(&function, module, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  const dlm::Status status =
      cu().check(cu().cuModuleGetFunction(&function, module, "no_such_kernel"), "get");
  EXPECT_NE(status.message().find("CUDA_ERROR_NOT_FOUND"), std::string::npos);
  EXPECT_EQ(cu().cuModuleUnload(module), CUDA_SUCCESS);
}

// The checked build's memcheck (EmuModules.cpp): kernels compiled under AddressSanitizer, device
// allocations of exactly their size. A kernel reading one element past its buffer is reported,
// as compute-sanitizer's memcheck reports it on a device; its correct twin runs clean.
const char *const kReadPastKernels = R"(
extern "C" __global__ void read_at(const float *input, int index, float *out) {
  out[threadIdx.x] = input[index];
}
)";

void launchReadAt(const CudaDriver &cu, int index) {
  CUmodule module = nullptr;
  ASSERT_EQ(cu.cuModuleLoadData(&module, kReadPastKernels), CUDA_SUCCESS)
      << dlm::emu::lastModuleLog();
  CUfunction readAt = nullptr;
  ASSERT_EQ(cu.cuModuleGetFunction(&readAt, module, "read_at"), CUDA_SUCCESS);
  const int count = 37;
  CUdeviceptr input = 0, out = 0;
  ASSERT_EQ(cu.cuMemAlloc(&input, count * sizeof(float)), CUDA_SUCCESS);
  const std::vector<float> zeros(count, 0.f);
  ASSERT_EQ(cu.cuMemcpyHtoD(input, zeros.data(), count * sizeof(float)), CUDA_SUCCESS);
  ASSERT_EQ(cu.cuMemAlloc(&out, 4 * sizeof(float)), CUDA_SUCCESS);
  void *parameters[] = {&input, &index, &out};
  ASSERT_EQ(cu.cuLaunchKernel(readAt, 1, 1, 1, 4, 1, 1, 0, nullptr, parameters, nullptr),
            CUDA_SUCCESS)
      << dlm::emu::lastLaunchError();
  EXPECT_EQ(cu.cuMemFree(input), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuMemFree(out), CUDA_SUCCESS);
  EXPECT_EQ(cu.cuModuleUnload(module), CUDA_SUCCESS);
}

TEST_F(EmuDriver, MemcheckReportsAReadPastAnAllocation) {
#ifndef DLM_ADDRESS_SANITIZER
  GTEST_SKIP() << "memcheck runs in the checked build (build-asan, -DDLM_SANITIZE=ON)";
#else
  launchReadAt(cu(), 36); // the last element: clean
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(launchReadAt(cu(), 37), "heap-buffer-overflow");
#endif
}

TEST_F(EmuDriver, BadLaunchesAreRefusedWithTheReason) {
  CUmodule module = loadKernels();
  ASSERT_NE(module, nullptr);
  CUfunction affine = nullptr;
  ASSERT_EQ(cu().cuModuleGetFunction(&affine, module, "affine"), CUDA_SUCCESS);
  CUdeviceptr data = 0;
  ASSERT_EQ(cu().cuMemAlloc(&data, 4096 * sizeof(float)), CUDA_SUCCESS);
  // Written, so that the launch that succeeds also passes initcheck (DLM_EMU_CHECK).
  ASSERT_EQ(cu().cuMemsetD32Async(data, 0, 4096, nullptr), CUDA_SUCCESS);
  float a = 1.f, b = 0.f;
  int count = 4096;
  void *parameters[] = {&data, &a, &b, &count};
  // Dynamic shared memory: the generated kernels use static shared memory only.
  EXPECT_EQ(cu().cuLaunchKernel(affine, 1, 1, 1, 32, 1, 1, 1024, nullptr, parameters, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_NE(dlm::emu::lastLaunchError().find("dynamic shared memory"), std::string::npos);
  // More than 1024 threads per block.
  EXPECT_EQ(cu().cuLaunchKernel(affine, 1, 1, 1, 2048, 1, 1, 0, nullptr, parameters, nullptr),
            CUDA_ERROR_LAUNCH_FAILED);
  const dlm::Status status = cu().check(CUDA_ERROR_LAUNCH_FAILED, "launch affine");
  EXPECT_NE(status.message().find("1 to 1024 threads"), std::string::npos) << status.message();
  // A kernel the emulated device cannot finish.
  CUfunction shuffle = nullptr;
  ASSERT_EQ(cu().cuModuleGetFunction(&shuffle, module, "shuffle_from_missing_lane"), CUDA_SUCCESS);
  void *shuffleParameters[] = {&data};
  EXPECT_EQ(cu().cuLaunchKernel(shuffle, 1, 1, 1, 16, 1, 1, 0, nullptr, shuffleParameters, nullptr),
            CUDA_ERROR_LAUNCH_FAILED);
  EXPECT_NE(dlm::emu::lastLaunchError().find("shuffle_from_missing_lane"), std::string::npos)
      << dlm::emu::lastLaunchError();
  // Dynamic shared memory may be declared (as 0 bytes) but not used.
  EXPECT_EQ(cu().cuFuncSetAttribute(affine, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(cu().cuLaunchKernel(affine, 1, 1, 1, 32, 1, 1, 0, nullptr, parameters, nullptr),
            CUDA_SUCCESS);
  EXPECT_EQ(dlm::emu::lastLaunchError(), "");
  EXPECT_EQ(cu().cuMemFree(data), CUDA_SUCCESS);
  EXPECT_EQ(cu().cuModuleUnload(module), CUDA_SUCCESS);
}

TEST_F(EmuDriver, CompileErrorsCarryTheCompilerLog) {
  const char *broken = R"cuda(
extern "C" __global__ void broken(float *out) {
  out[threadIdx.x] = undeclared_identifier_in_kernel;
}
)cuda";
  CUmodule module = nullptr;
  const CUresult result = cu().cuModuleLoadData(&module, broken);
  EXPECT_EQ(result, CUDA_ERROR_INVALID_SOURCE);
  const std::string log = dlm::emu::lastModuleLog();
  EXPECT_NE(log.find("undeclared_identifier_in_kernel"), std::string::npos) << log;
  EXPECT_NE(log.find("kernel.cu:3"), std::string::npos) << log; // the kernel's own line
  const dlm::Status status = cu().check(result, "load module");
  EXPECT_EQ(status.message().rfind("load module: CUDA_ERROR_INVALID_SOURCE", 0), 0u);
  EXPECT_NE(status.message().find("undeclared_identifier_in_kernel"), std::string::npos);

  // PTX is what a real driver loads; the emulation says it needs source.
  EXPECT_EQ(cu().cuModuleLoadData(&module, ".version 8.0\n.target sm_90\n"),
            CUDA_ERROR_INVALID_IMAGE);
  EXPECT_NE(dlm::emu::lastModuleLog().find("not PTX"), std::string::npos);
}

TEST_F(EmuDriver, SecondLoadOfTheSameSourceHitsTheCache) {
  const std::string dir = makeTemporaryDirectory();
  ASSERT_FALSE(dir.empty());
  setenv("DLM_EMU_CACHE_DIR", (dir + "/nested/cache").c_str(), 1);
  const char *source = R"cuda(
extern "C" __global__ void fill(int *out, int value) { out[threadIdx.x] = value; }
)cuda";
  CUmodule first = nullptr, second = nullptr;
  ASSERT_EQ(cu().cuModuleLoadData(&first, source), CUDA_SUCCESS) << dlm::emu::lastModuleLog();
  const std::vector<std::string> compiled = cachedObjects(dir + "/nested/cache");
  ASSERT_EQ(compiled.size(), 1u);
  const std::string object = dir + "/nested/cache/" + compiled[0];
  struct stat before {};
  ASSERT_EQ(stat(object.c_str(), &before), 0);

  ASSERT_EQ(cu().cuModuleLoadData(&second, source), CUDA_SUCCESS);
  struct stat after {};
  ASSERT_EQ(stat(object.c_str(), &after), 0);
  EXPECT_EQ(cachedObjects(dir + "/nested/cache").size(), 1u);
  EXPECT_EQ(before.st_ino, after.st_ino); // not rewritten
  EXPECT_EQ(before.st_mtim.tv_nsec, after.st_mtim.tv_nsec);

  // Two modules of one shared object: each has the kernel, unloading one keeps the other's.
  CUfunction fill = nullptr;
  ASSERT_EQ(cu().cuModuleGetFunction(&fill, second, "fill"), CUDA_SUCCESS);
  ASSERT_EQ(cu().cuModuleUnload(first), CUDA_SUCCESS);
  std::vector<int> out(8, 0);
  CUdeviceptr device = reinterpret_cast<CUdeviceptr>(out.data()); // device memory is host memory
  int value = 42;
  void *parameters[] = {&device, &value};
  ASSERT_EQ(cu().cuLaunchKernel(fill, 1, 1, 1, 8, 1, 1, 0, nullptr, parameters, nullptr),
            CUDA_SUCCESS);
  EXPECT_EQ(out, std::vector<int>(8, 42));
  EXPECT_EQ(cu().cuModuleUnload(second), CUDA_SUCCESS);
  setenv("DLM_EMU_CACHE_DIR", DLM_EMU_TEST_CACHE_DIR, 1);
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

TEST_F(EmuDriver, EventsMeasureElapsedTime) {
  CUevent start = nullptr, end = nullptr;
  ASSERT_EQ(cu().cuEventCreate(&start, 0), CUDA_SUCCESS);
  ASSERT_EQ(cu().cuEventCreate(&end, 0), CUDA_SUCCESS);
  float milliseconds = -1.f;
  EXPECT_EQ(cu().cuEventElapsedTime(&milliseconds, start, end), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(cu().cuEventRecord(start, nullptr), CUDA_SUCCESS);
  usleep(2000);
  ASSERT_EQ(cu().cuEventRecord(end, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cu().cuEventSynchronize(end), CUDA_SUCCESS);
  ASSERT_EQ(cu().cuEventElapsedTime(&milliseconds, start, end), CUDA_SUCCESS);
  EXPECT_GE(milliseconds, 1.5f);
  EXPECT_EQ(cu().cuEventDestroy(start), CUDA_SUCCESS);
  EXPECT_EQ(cu().cuEventDestroy(end), CUDA_SUCCESS);
}

// The backend's forward in miniature: an input upload, two kernels and a cuBLASLt GEMM captured
// once, replayed on new inputs.
TEST_F(EmuDriver, CapturedGraphReplaysCopiesLaunchesAndGemms) {
  CUmodule module = loadKernels();
  ASSERT_NE(module, nullptr);
  CUfunction affine = nullptr, blockSum = nullptr;
  ASSERT_EQ(cu().cuModuleGetFunction(&affine, module, "affine"), CUDA_SUCCESS);
  ASSERT_EQ(cu().cuModuleGetFunction(&blockSum, module, "block_sum"), CUDA_SUCCESS);
  auto lt = dlm::emu::emulatedCublasLt();
  ASSERT_TRUE(lt) << lt.status().message();
  const CublasLt &blas = **lt;
  EXPECT_TRUE(blas.emulated());

  // x (4 x 3, column-major) = input * 2 + 1; sums = 64-wide block sums of x; y = W x (2 x 3).
  constexpr int kRows = 4, kCols = 3, kOut = 2;
  std::vector<float> hostInput(kRows * kCols);
  std::vector<float> weights = {1, 0, 2, -1, 0.5f, 1, 0, 3}; // W: 2 x 4, column-major
  CUdeviceptr x = 0, sums = 0, w = 0, y = 0;
  ASSERT_EQ(cu().cuMemAlloc(&x, sizeof(float) * kRows * kCols), CUDA_SUCCESS);
  ASSERT_EQ(cu().cuMemAlloc(&sums, sizeof(float)), CUDA_SUCCESS);
  ASSERT_EQ(cu().cuMemAlloc(&w, sizeof(float) * weights.size()), CUDA_SUCCESS);
  ASSERT_EQ(cu().cuMemAlloc(&y, sizeof(float) * kOut * kCols), CUDA_SUCCESS);
  ASSERT_EQ(cu().cuMemcpyHtoD(w, weights.data(), sizeof(float) * weights.size()), CUDA_SUCCESS);

  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t wLayout = nullptr, xLayout = nullptr, yLayout = nullptr;
  ASSERT_EQ(blas.cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(blas.cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(blas.cublasLtMatrixLayoutCreate(&wLayout, CUDA_R_32F, kOut, kRows, kOut),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(blas.cublasLtMatrixLayoutCreate(&xLayout, CUDA_R_32F, kRows, kCols, kRows),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(blas.cublasLtMatrixLayoutCreate(&yLayout, CUDA_R_32F, kOut, kCols, kOut),
            CUBLAS_STATUS_SUCCESS);

  CUstream stream = nullptr;
  ASSERT_EQ(cu().cuStreamCreate(&stream, 0), CUDA_SUCCESS);
  ASSERT_EQ(cu().cuMemsetD32Async(y, 0, kOut * kCols, stream), CUDA_SUCCESS);
  ASSERT_EQ(cu().cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  float scale = 2.f, shift = 1.f, one = 1.f, zero = 0.f;
  int count = kRows * kCols;
  ASSERT_EQ(cu().cuMemcpyHtoDAsync(x, hostInput.data(), sizeof(float) * count, stream),
            CUDA_SUCCESS);
  void *affineParameters[] = {&x, &scale, &shift, &count};
  ASSERT_EQ(cu().cuLaunchKernel(affine, 1, 1, 1, 32, 1, 1, 0, stream, affineParameters, nullptr),
            CUDA_SUCCESS);
  void *sumParameters[] = {&x, &one, &count, &sums};
  ASSERT_EQ(cu().cuLaunchKernel(blockSum, 1, 1, 1, 64, 1, 1, 0, stream, sumParameters, nullptr),
            CUDA_SUCCESS);
  ASSERT_EQ(blas.cublasLtMatmul(handle, desc, &one, reinterpret_cast<void *>(w), wLayout,
                                reinterpret_cast<void *>(x), xLayout, &zero,
                                reinterpret_cast<void *>(y), yLayout, reinterpret_cast<void *>(y),
                                yLayout, nullptr, nullptr, 0, stream),
            CUBLAS_STATUS_SUCCESS);
  // Recorded, not run: y still holds the zeros of before the capture.
  std::vector<float> result(kOut * kCols, -1.f);
  CUgraph graph = nullptr;
  ASSERT_EQ(cu().cuStreamEndCapture(stream, &graph), CUDA_SUCCESS);
  ASSERT_EQ(cu().cuMemcpyDtoH(result.data(), y, sizeof(float) * result.size()), CUDA_SUCCESS);
  EXPECT_EQ(result, std::vector<float>(kOut * kCols, 0.f));
  // The kernel parameters were captured by value.
  scale = 100.f;
  CUgraphExec exec = nullptr;
  ASSERT_EQ(cu().cuGraphInstantiate(&exec, graph, 0), CUDA_SUCCESS);

  for (int replay = 0; replay < 2; ++replay) {
    for (int i = 0; i < count; ++i)
      hostInput[i] = static_cast<float>((i + 1) * (replay ? -1 : 1)) + 0.25f * replay;
    ASSERT_EQ(cu().cuGraphLaunch(exec, stream), CUDA_SUCCESS) << dlm::emu::lastLaunchError();
    ASSERT_EQ(cu().cuStreamSynchronize(stream), CUDA_SUCCESS);
    std::vector<float> xs(count);
    for (int i = 0; i < count; ++i)
      xs[i] = hostInput[i] * 2.f + 1.f;
    float total = 0.f, sum = -1.f;
    for (float value : xs)
      total += value;
    ASSERT_EQ(cu().cuMemcpyDtoH(&sum, sums, sizeof sum), CUDA_SUCCESS);
    EXPECT_FLOAT_EQ(sum, total) << "replay " << replay;
    ASSERT_EQ(cu().cuMemcpyDtoH(result.data(), y, sizeof(float) * result.size()), CUDA_SUCCESS);
    for (int col = 0; col < kCols; ++col)
      for (int row = 0; row < kOut; ++row) {
        float expected = 0.f;
        for (int i = 0; i < kRows; ++i)
          expected += weights[row + i * kOut] * xs[i + col * kRows];
        EXPECT_FLOAT_EQ(result[row + col * kOut], expected)
            << "replay " << replay << " y(" << row << ", " << col << ")";
      }
  }

  EXPECT_EQ(cu().cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(cu().cuGraphDestroy(graph), CUDA_SUCCESS);
  EXPECT_EQ(cu().cuStreamDestroy(stream), CUDA_SUCCESS);
  EXPECT_EQ(blas.cublasLtMatrixLayoutDestroy(wLayout), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(blas.cublasLtMatrixLayoutDestroy(xLayout), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(blas.cublasLtMatrixLayoutDestroy(yLayout), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(blas.cublasLtMatmulDescDestroy(desc), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(blas.cublasLtDestroy(handle), CUBLAS_STATUS_SUCCESS);
  for (CUdeviceptr buffer : {x, sums, w, y})
    EXPECT_EQ(cu().cuMemFree(buffer), CUDA_SUCCESS);
  EXPECT_EQ(cu().cuModuleUnload(module), CUDA_SUCCESS);
}

TEST_F(EmuDriver, SynchronousCopyDuringCaptureIsRefusedAndInvalidatesIt) {
  CUstream stream = nullptr;
  ASSERT_EQ(cu().cuStreamCreate(&stream, 0), CUDA_SUCCESS);
  CUdeviceptr buffer = 0;
  ASSERT_EQ(cu().cuMemAlloc(&buffer, 16), CUDA_SUCCESS);
  EXPECT_EQ(cu().cuStreamBeginCapture(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); // the default stream cannot be captured
  ASSERT_EQ(cu().cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  int value = 5;
  EXPECT_EQ(cu().cuMemcpyHtoD(buffer, &value, sizeof value), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph graph = nullptr;
  EXPECT_EQ(cu().cuStreamEndCapture(stream, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(graph, nullptr);
  // After the capture, copies work again.
  EXPECT_EQ(cu().cuMemcpyHtoD(buffer, &value, sizeof value), CUDA_SUCCESS);
  // Allocations may synchronise too.
  ASSERT_EQ(cu().cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUdeviceptr more = 0;
  EXPECT_EQ(cu().cuMemAlloc(&more, 16), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cu().cuStreamEndCapture(stream, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  // A relaxed capture allows them.
  ASSERT_EQ(cu().cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  EXPECT_EQ(cu().cuMemcpyHtoD(buffer, &value, sizeof value), CUDA_SUCCESS);
  ASSERT_EQ(cu().cuStreamEndCapture(stream, &graph), CUDA_SUCCESS);
  EXPECT_EQ(cu().cuGraphDestroy(graph), CUDA_SUCCESS);
  EXPECT_EQ(cu().cuMemFree(buffer), CUDA_SUCCESS);
  EXPECT_EQ(cu().cuStreamDestroy(stream), CUDA_SUCCESS);
}

} // namespace
