// A gtest fixture on the emulated driver (runtime/cuda/emu/EmuDriver.h): the driver table made
// once per suite, with kernels compiled into the build tree's cache, and the primary context
// current around each test.
#pragma once

#include "runtime/cuda/emu/EmuDriver.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>

namespace dlm::testing {

class EmuDriverFixture : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    // One cache for the whole build: ctest runs every test in its own process, and compiling
    // the kernels once is enough.
    setenv("DLM_EMU_CACHE_DIR", DLM_EMU_TEST_CACHE_DIR, 1);
    auto loaded = emu::emulatedCudaDriver({/*workers=*/2});
    ASSERT_TRUE(loaded) << loaded.status().message();
    driver() = *loaded;
  }
  static void TearDownTestSuite() { driver().reset(); }

  void SetUp() override {
    ASSERT_EQ(cu().cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(cu().cuDevicePrimaryCtxRetain(&context_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cu().cuCtxSetCurrent(context_), CUDA_SUCCESS);
  }
  void TearDown() override { EXPECT_EQ(cu().cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS); }

  static const cuda::CudaDriver &cu() { return *driver(); }

private:
  static std::shared_ptr<const cuda::CudaDriver> &driver() {
    static std::shared_ptr<const cuda::CudaDriver> instance;
    return instance;
  }
  CUcontext context_ = nullptr;
};

} // namespace dlm::testing
