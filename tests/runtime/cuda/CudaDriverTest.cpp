// The libcuda symbol table on a machine without a driver: loading fails cleanly with a named
// error, a library without the driver's symbols is refused naming the first missing one, and the
// toolkit's stub libcuda (all symbols, no driver) resolves the whole table, which proves every
// name of the X-macro list, versioned ones included, exists in a real libcuda.
#include "runtime/cuda/CudaDriver.h"

#include <gtest/gtest.h>

#include <fstream>

namespace {

using dlm::cuda::CudaDriver;

TEST(CudaDriver, MissingLibraryIsANamedError) {
  auto driver = CudaDriver::load("libcuda-that-does-not-exist.so.1");
  ASSERT_FALSE(driver);
  EXPECT_EQ(driver.status().message().rfind(
                "CUDA driver not available: libcuda-that-does-not-exist.so.1: ", 0),
            0u)
      << driver.status().message();
}

TEST(CudaDriver, DefaultLibraryLoadsOrFailsCleanly) {
  auto driver = CudaDriver::load();
  if (driver) {
    EXPECT_NE(driver.value()->cuInit, nullptr);
    return;
  }
  EXPECT_EQ(driver.status().message().rfind("CUDA driver not available: libcuda.so.1: ", 0), 0u)
      << driver.status().message();
}

TEST(CudaDriver, LibraryWithoutDriverSymbolsIsRefused) {
  auto driver = CudaDriver::load("libm.so.6");
  ASSERT_FALSE(driver);
  EXPECT_NE(driver.status().message().find("libm.so.6 lacks cuInit"), std::string::npos)
      << driver.status().message();
}

TEST(CudaDriver, StubDriverResolvesEveryEntryPoint) {
  if (!std::ifstream(DLM_CUDA_STUB_LIBRARY))
    GTEST_SKIP() << "no stub libcuda at " << DLM_CUDA_STUB_LIBRARY;
  auto driver = CudaDriver::load(DLM_CUDA_STUB_LIBRARY);
  ASSERT_TRUE(driver) << driver.status().message();
  const CudaDriver &table = **driver;
#define DLM_EXPECT_RESOLVED(name) EXPECT_NE(table.name, nullptr) << #name;
  DLM_CUDA_DRIVER_SYMBOLS(DLM_EXPECT_RESOLVED)
#undef DLM_EXPECT_RESOLVED
  // The stub answers every call with an error instead of driving a GPU.
  const dlm::Status status = table.check(table.cuInit(0), "cuInit");
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message().rfind("cuInit: CUDA_ERROR_STUB_LIBRARY", 0), 0u) << status.message();
}

} // namespace
