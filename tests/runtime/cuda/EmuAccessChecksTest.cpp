// The emulated device's compute-sanitizer checks (runtime/cuda/emu/EmuAccessChecks.h): each
// catches a deliberately broken kernel with a message naming the check, the threads and the
// bytes, and passes the kernel's correct twin. Kernels are compiled at run time by the emulated
// driver, instrumented because the checks are on when the module loads.
#include "runtime/cuda/emu/EmuAccessChecks.h"
#include "runtime/cuda/emu/EmuDriver.h"
#include "tests/runtime/cuda/EmuDriverFixture.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr const char *kKernels = R"cuda(
// out[i] = the value thread (i + shift) % blockDim.x stored in shared memory. synced: 0 no
// barrier, 1 __syncthreads, 2 __syncwarp (enough within one warp only).
extern "C" __global__ void neighbour_read(float *out, int shift, int synced) {
  __shared__ float tile[64];
  tile[threadIdx.x] = (float)threadIdx.x;
  if (synced == 1)
    __syncthreads();
  if (synced == 2)
    __syncwarp();
  out[threadIdx.x] = tile[(threadIdx.x + shift) % blockDim.x];
}

// Every thread adds into one shared counter that thread 0 zeroed: atomics do not race with each
// other, only with plain accesses.
extern "C" __global__ void shared_counter(int *out) {
  __shared__ int count;
  if (threadIdx.x == 0)
    count = 0;
  __syncthreads();
  atomicAdd(&count, 1);
  __syncthreads();
  if (threadIdx.x == 0)
    out[0] = count;
}

// Each slot is read by two threads of the warp, then rewritten after a __syncwarp: ordered.
extern "C" __global__ void neighbour_sum(float *out) {
  __shared__ float values[32];
  values[threadIdx.x] = (float)threadIdx.x;
  __syncwarp();
  const float sum = values[threadIdx.x] + values[(threadIdx.x + 1) % 32];
  __syncwarp();
  values[threadIdx.x] = sum;
  __syncwarp();
  out[threadIdx.x] = values[(threadIdx.x + 31) % 32];
}

// out[i] = in[i].
extern "C" __global__ void copy(const float *in, float *out) {
  out[threadIdx.x] = in[threadIdx.x];
}

// Reads element `index` of a five-float shared array; an eight-byte aligned array beside it
// leaves padding (or the block's end) after it.
extern "C" __global__ void shared_at(float *out, int index) {
  __shared__ float small[5];
  __shared__ double wide[4];
  if (threadIdx.x < 5)
    small[threadIdx.x] = (float)threadIdx.x;
  if (threadIdx.x < 4)
    wide[threadIdx.x] = threadIdx.x;
  __syncthreads();
  if (threadIdx.x == 0)
    out[0] = small[index] + (float)wide[3];
}
)cuda";

class EmuAccessChecks : public dlm::testing::EmuDriverFixture {
protected:
  void SetUp() override {
    saved_ = dlm::emu::accessChecks();
    EmuDriverFixture::SetUp();
  }
  void TearDown() override {
    for (CUdeviceptr pointer : allocations_)
      EXPECT_EQ(cu().cuMemFree(pointer), CUDA_SUCCESS);
    if (module_)
      EXPECT_EQ(cu().cuModuleUnload(module_), CUDA_SUCCESS);
    dlm::emu::setAccessChecks(saved_);
    EmuDriverFixture::TearDown();
  }

  // Turns the checks on (before the module loads: they decide how it is compiled).
  void check(bool memcheck, bool racecheck, bool initcheck) {
    dlm::emu::AccessChecks checks;
    checks.memcheck = memcheck;
    checks.racecheck = racecheck;
    checks.initcheck = initcheck;
    dlm::emu::setAccessChecks(checks);
    ASSERT_EQ(cu().cuModuleLoadData(&module_, kKernels), CUDA_SUCCESS) << dlm::emu::lastModuleLog();
  }

  CUdeviceptr allocate(size_t bytes) {
    CUdeviceptr pointer = 0;
    EXPECT_EQ(cu().cuMemAlloc(&pointer, bytes), CUDA_SUCCESS);
    allocations_.push_back(pointer);
    return pointer;
  }

  // Launches `name` on one block of `threads`: "" or the emulated device's failure.
  std::string launch(const char *name, unsigned threads, std::vector<void *> parameters) {
    CUfunction function = nullptr;
    EXPECT_EQ(cu().cuModuleGetFunction(&function, module_, name), CUDA_SUCCESS);
    const CUresult result = cu().cuLaunchKernel(function, 1, 1, 1, threads, 1, 1, 0, nullptr,
                                                parameters.data(), nullptr);
    const std::string error = dlm::emu::lastLaunchError();
    EXPECT_EQ(result == CUDA_SUCCESS, error.empty()) << error;
    return error;
  }

  std::string neighbourRead(unsigned threads, int shift, int synced) {
    CUdeviceptr out = allocate(threads * sizeof(float));
    return launch("neighbour_read", threads, {&out, &shift, &synced});
  }

  CUmodule module_ = nullptr;
  std::vector<CUdeviceptr> allocations_;
  dlm::emu::AccessChecks saved_;
};

TEST_F(EmuAccessChecks, RacecheckFindsReadsWithNoBarrierSinceAnotherThreadsWrite) {
  check(false, true, false);
  // Thread 1 reads what thread 0 wrote: read-after-write.
  const std::string raw = neighbourRead(64, 63, /*synced=*/0);
  EXPECT_NE(raw.find("racecheck: read-after-write hazard: thread 1 reads 4 bytes at offset 0 of "
                     "__shared__ neighbour_read::tile (256 bytes"),
            std::string::npos)
      << raw;
  EXPECT_NE(raw.find("which thread 0 wrote with no barrier in between"), std::string::npos) << raw;
  // Thread 0 reads tile[1] before thread 1 writes it: write-after-read.
  const std::string war = neighbourRead(64, 1, /*synced=*/0);
  EXPECT_NE(war.find("racecheck: write-after-read hazard: thread 1 writes 4 bytes at offset 4"),
            std::string::npos)
      << war;
  EXPECT_EQ(neighbourRead(64, 1, /*synced=*/1), "");
  EXPECT_EQ(neighbourRead(64, 63, /*synced=*/1), "");
  // __syncwarp orders the threads of one warp, not of two.
  EXPECT_EQ(neighbourRead(32, 1, /*synced=*/2), "");
  const std::string acrossWarps = neighbourRead(64, 32, /*synced=*/2);
  EXPECT_NE(acrossWarps.find("racecheck: "), std::string::npos) << acrossWarps;
  // Reads by two threads of a warp, then a write after __syncwarp: ordered.
  CUdeviceptr sums = allocate(32 * sizeof(float));
  EXPECT_EQ(launch("neighbour_sum", 32, {&sums}), "");
  std::vector<float> sum(32);
  ASSERT_EQ(cu().cuMemcpyDtoH(sum.data(), sums, sizeof(float) * 32), CUDA_SUCCESS);
  EXPECT_EQ(sum[1], 0.f + 1.f);
  // Atomics from every thread, ordered by barriers against the plain accesses around them.
  CUdeviceptr out = allocate(sizeof(int));
  EXPECT_EQ(launch("shared_counter", 64, {&out}), "");
  int count = 0;
  ASSERT_EQ(cu().cuMemcpyDtoH(&count, out, sizeof count), CUDA_SUCCESS);
  EXPECT_EQ(count, 64);
}

TEST_F(EmuAccessChecks, InitcheckFindsReadsOfMemoryNothingWrote) {
  check(false, false, true);
  const unsigned threads = 32;
  CUdeviceptr in = allocate(threads * sizeof(float));
  CUdeviceptr out = allocate(threads * sizeof(float));
  const std::string never = launch("copy", threads, {&in, &out});
  EXPECT_NE(never.find("initcheck: thread 0 reads 4 bytes at offset 0 of a device allocation of "
                       "128 bytes, and nothing has written byte 0"),
            std::string::npos)
      << never;
  // All but the last element copied in: the last thread's read is reported.
  const std::vector<float> values(threads, 1.f);
  ASSERT_EQ(cu().cuMemcpyHtoD(in, values.data(), (threads - 1) * sizeof(float)), CUDA_SUCCESS);
  const std::string partly = launch("copy", threads, {&in, &out});
  EXPECT_NE(partly.find("initcheck: thread 31 reads 4 bytes at offset 124"), std::string::npos)
      << partly;
  ASSERT_EQ(cu().cuMemsetD32Async(in + (threads - 1) * sizeof(float), 0, 1, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(launch("copy", threads, {&in, &out}), "");
  // What a kernel wrote counts, and a device-to-device copy carries it.
  CUdeviceptr copied = allocate(threads * sizeof(float));
  ASSERT_EQ(cu().cuMemcpyDtoDAsync(copied, out, threads * sizeof(float), nullptr), CUDA_SUCCESS);
  EXPECT_EQ(launch("copy", threads, {&copied, &in}), "");
  // Shared memory read before any thread of the block wrote it.
  const std::string shared = neighbourRead(64, 1, /*synced=*/0);
  EXPECT_NE(shared.find("initcheck: thread 0 reads 4 bytes at offset 4 of __shared__ "
                        "neighbour_read::tile (256 bytes at offset 0) before any thread of the "
                        "block has written it"),
            std::string::npos)
      << shared;
  EXPECT_EQ(neighbourRead(64, 1, /*synced=*/1), "");
}

TEST_F(EmuAccessChecks, MemcheckFindsSharedAccessesOutsideTheirVariable) {
  check(true, false, false);
  CUdeviceptr out = allocate(sizeof(float));
  int last = 4;
  EXPECT_EQ(launch("shared_at", 32, {&out, &last}), "");
  int past = 5;
  const std::string failure = launch("shared_at", 32, {&out, &past});
  EXPECT_NE(failure.find("memcheck: thread 0 accesses 4 bytes at offset "), std::string::npos)
      << failure;
  EXPECT_NE(failure.find("outside every __shared__ variable"), std::string::npos) << failure;
}

TEST_F(EmuAccessChecks, ChecksOffReportNothing) {
  check(false, false, false);
  EXPECT_EQ(neighbourRead(64, 63, /*synced=*/0), "");
}

} // namespace
