// The counter RNG exactly as the generated kernels define it (DeviceCommon.cpp), run on the
// emulated device, against the known answers of tests/reference/counter_rng.py: the CPU
// backend, the Python reference and the CUDA kernels must draw the same numbers.
#include "tests/runtime/cuda/CudaTestSupport.h"

namespace {

using dlm::cudatest::launched;
using dlm::cudatest::emulatedDevice;
using dlm::emu::Dim3;

TEST(CounterRng, DeviceHelpersMatchTheReferenceKnownAnswers) {
  unsigned long long keys[4] = {};
  double uniforms[4] = {}, gumbels[4] = {};
  int tokens[2] = {};
  unsigned long long *k = keys;
  double *u = uniforms, *g = gumbels;
  int *t = tokens;
  ASSERT_TRUE(
      launched(emulatedDevice().launchArgs("dlm_test_counter_rng", Dim3{1}, Dim3{32}, k, u, g, t)));
  // Printed by `python3 tests/reference/counter_rng.py`.
  EXPECT_EQ(keys[0], 0xE220A8397B1DCDAFull);
  EXPECT_EQ(keys[1], 0x78AE5A9A6B5FD45Eull);
  EXPECT_EQ(keys[2], 0x319095646F29ED17ull);
  EXPECT_EQ(keys[3], 0x2BD2928089FE1D5Full);
  const double wantUniform[4] = {0.7961956752947816, 0.11112257838554035, 0.4328746129317837,
                                 0.7810997456973221};
  const double wantGumbel[4] = {1.4788031479962698, -0.7871480386637149, 0.17756428604386276,
                                1.398154730314527};
  for (int v = 0; v < 4; ++v) {
    EXPECT_EQ(uniforms[v], wantUniform[v]) << "v = " << v;
    EXPECT_NEAR(gumbels[v], wantGumbel[v], 1e-15) << "v = " << v;
  }
  EXPECT_EQ(tokens[0], 154);
  EXPECT_EQ(tokens[1], 294);
}

} // namespace
