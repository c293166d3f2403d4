// The emulated device's own semantics, on hand-written kernels (EmuSelfTestKernels.cpp).
#include "runtime/cuda/emu/EmuDevice.h"
#include "tests/runtime/cuda/CudaTestSupport.h"

#include <gtest/gtest.h>

#include <vector>

namespace {

using dlm::cudatest::launched;
using dlm::emu::Device;
using dlm::emu::Dim3;

TEST(EmuDevice, BarrierMakesSharedWritesVisible) {
  Device device;
  std::vector<int> out(3 * 256, -1);
  int *pointer = out.data();
  ASSERT_TRUE(launched(device.launchArgs("emu_test_barrier", Dim3{3}, Dim3{256}, pointer)));
  for (int b = 0; b < 3; ++b)
    for (int t = 0; t < 256; ++t)
      ASSERT_EQ(out[b * 256 + t], (t + 1) % 256 + b * 1000) << "block " << b << " thread " << t;
}

TEST(EmuDevice, SharedMemoryBelongsToOneBlock) {
  Device device(2);
  std::vector<int> out(64, -1);
  int *pointer = out.data();
  const int rounds = 5;
  ASSERT_TRUE(
      device.launchArgs("emu_test_shared_is_per_block", Dim3{64}, Dim3{64}, pointer, rounds));
  for (int b = 0; b < 64; ++b)
    EXPECT_EQ(out[b], 64 * rounds * (b + 1)) << "block " << b;
}

TEST(EmuDevice, ShufflesFollowCudaSemantics) {
  Device device;
  std::vector<int> xorOut(64), upOut(64), downOut(64), idxOut(64);
  std::vector<float> sumOut(64);
  std::vector<double> doubleOut(64);
  int *a = xorOut.data(), *b = upOut.data(), *c = downOut.data(), *d = idxOut.data();
  float *e = sumOut.data();
  double *f = doubleOut.data();
  ASSERT_TRUE(
      launched(device.launchArgs("emu_test_shuffles", Dim3{1}, Dim3{64}, a, b, c, d, e, f)));
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32, warp = t / 32 * 32;
    EXPECT_EQ(xorOut[t], warp + (lane ^ 5));
    EXPECT_EQ(upOut[t], lane >= 3 ? t - 3 : t);
    // Width 16: lanes never read across their half-warp.
    EXPECT_EQ(downOut[t], lane % 16 + 7 < 16 ? t + 7 : t);
    EXPECT_EQ(idxOut[t], warp + 31 - lane);
    EXPECT_EQ(sumOut[t], 496.0f);
    EXPECT_EQ(doubleOut[t], 0.5);
  }
}

TEST(EmuDevice, AtomicsAreAtomicAcrossBlocksAndWorkers) {
  Device device(2);
  int counter = 0, maximum = -1;
  float sum = 0;
  int *c = &counter, *m = &maximum;
  float *s = &sum;
  ASSERT_TRUE(launched(device.launchArgs("emu_test_atomics", Dim3{40}, Dim3{128}, c, m, s)));
  EXPECT_EQ(counter, 40 * 128);
  EXPECT_EQ(maximum, 40 * 128 - 1);
  EXPECT_EQ(sum, 0.5f * 40 * 128);
}

TEST(EmuDevice, ThreeDimensionalIndices) {
  Device device;
  const Dim3 grid{3, 2, 2}, block{4, 3, 2};
  std::vector<int> out(12 * 24, -1);
  int *pointer = out.data();
  ASSERT_TRUE(launched(device.launchArgs("emu_test_indices", grid, block, pointer)));
  for (int b = 0; b < 12; ++b)
    for (int t = 0; t < 24; ++t)
      EXPECT_EQ(out[b * 24 + t], b * 10000 + t);
}

TEST(EmuDevice, DivergentBarrierIsReportedAsDeadlock) {
  Device device(1);
  std::vector<int> out(32);
  int *pointer = out.data();
  const dlm::Status status =
      device.launchArgs("emu_test_divergent_barrier", Dim3{1}, Dim3{32}, pointer);
  ASSERT_FALSE(status);
  EXPECT_NE(status.message().find("emu_test_divergent_barrier"), std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("deadlock"), std::string::npos) << status.message();
}

TEST(EmuDevice, ReturnedThreadsDoNotHoldBackBarriers) {
  Device device;
  std::vector<int> out(40, 0);
  int *pointer = out.data();
  ASSERT_TRUE(launched(device.launchArgs("emu_test_early_return", Dim3{1}, Dim3{96}, pointer)));
  for (int t = 0; t < 40; ++t)
    EXPECT_EQ(out[t], 7);
}

TEST(EmuDevice, BadLaunchesAreNamedErrors) {
  Device device;
  int value = 0;
  int *pointer = &value;
  dlm::Status unknown = device.launchArgs("no_such_kernel", Dim3{1}, Dim3{32}, pointer);
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.message().find("no_such_kernel"), std::string::npos);
  dlm::Status tooWide = device.launchArgs("emu_test_barrier", Dim3{1}, Dim3{2048}, pointer);
  ASSERT_FALSE(tooWide);
  EXPECT_NE(tooWide.message().find("1024"), std::string::npos) << tooWide.message();
  dlm::Status empty = device.launchArgs("emu_test_barrier", Dim3{0}, Dim3{32}, pointer);
  ASSERT_FALSE(empty);
}

} // namespace
