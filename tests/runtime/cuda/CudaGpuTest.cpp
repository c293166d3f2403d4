// Tests that need a GPU (ctest label `gpu`): where there is none they skip with the reason.
#include "runtime/cuda/CudaDriver.h"

#include <gtest/gtest.h>

namespace {

using dlm::cuda::CudaDriver;

TEST(CudaGpu, DriverInitialisesAndSeesADevice) {
  auto driver = CudaDriver::load();
  if (!driver)
    GTEST_SKIP() << driver.status().message();
  const CudaDriver &cuda = **driver;
  if (dlm::Status status = cuda.check(cuda.cuInit(0), "cuInit"); !status)
    GTEST_SKIP() << status.message();
  int count = 0;
  ASSERT_TRUE(cuda.check(cuda.cuDeviceGetCount(&count), "cuDeviceGetCount"));
  if (count == 0)
    GTEST_SKIP() << "the CUDA driver sees no device";
  CUdevice device;
  ASSERT_TRUE(cuda.check(cuda.cuDeviceGet(&device, 0), "cuDeviceGet"));
  char name[256] = {};
  ASSERT_TRUE(cuda.check(cuda.cuDeviceGetName(name, sizeof name, device), "cuDeviceGetName"));
  int major = 0;
  ASSERT_TRUE(cuda.check(
      cuda.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device),
      "cuDeviceGetAttribute"));
  std::printf("  GPU 0: %s, compute capability %d.x\n", name, major);
  EXPECT_GE(major, 7);
}

} // namespace
