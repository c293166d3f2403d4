// act(gate) * up kernels on the emulated device against the shared double reference, reading gate
// and up from one fused [rows, 2 x width] buffer (the gate|up GEMM's output) and writing in place.
#include "tests/runtime/cuda/CudaTestSupport.h"
#include "tests/runtime/cuda/EmuKernelConfigs.h"

namespace {

using namespace dlm;
using namespace dlm::cudatest;

template <typename Element>
void checkGated(const codegen::GatedActivationParams &params, std::mt19937 &random) {
  codegen::KernelSource kernel = *codegen::generateGatedActivation(params);
  const int width = static_cast<int>(params.width);
  const int rows = randomInt(random, 1, 6);
  const long long stride = 2 * width + 8; // gate | up | padding
  std::vector<Element> fused(static_cast<size_t>(rows * stride));
  std::vector<float> exact(fused.size());
  std::uniform_real_distribution<float> value(-6.f, 6.f);
  for (size_t i = 0; i < fused.size(); ++i) {
    fused[i] = storeAs<Element>(value(random));
    exact[i] = loadFloat(fused[i]);
  }
  const Element *gate = fused.data();
  const Element *up = fused.data() + width;
  Element *out = fused.data(); // in place over gate
  const int vector = codegen::vectorWidth(params.element, params.width);
  const unsigned blocksX = static_cast<unsigned>((width / vector + 255) / 256);
  ASSERT_TRUE(launched(emulatedDevice().launchArgs(
      kernel.name, emu::Dim3{blocksX, static_cast<unsigned>(rows)}, emu::Dim3{kernel.blockThreads},
      gate, stride, up, stride, out, stride, rows)));
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < width; ++i) {
      const double want =
          reference::gatedActivation(referenceActivation(params.activation), exact[r * stride + i],
                                     exact[r * stride + width + i]);
      ASSERT_TRUE(
          near(loadFloat(fused[r * stride + i]), want, 1e-5, 2 * storageRounding<Element>() + 1e-5,
               kernel.name + " row " + std::to_string(r) + " element " + std::to_string(i)));
      ASSERT_EQ(loadFloat(fused[r * stride + width + i]), exact[r * stride + width + i]);
    }
}

TEST(GatedActivationKernel, MatchesDoubleReference) {
  std::mt19937 random(5);
  for (const codegen::GatedActivationParams &params : gatedActivationConfigs()) {
    for (int trial = 0; trial < 3; ++trial) {
      SCOPED_TRACE(testing::Message() << "width " << params.width << " trial " << trial);
      if (params.element == codegen::ElementType::bf16)
        checkGated<__nv_bfloat16>(params, random);
      else
        checkGated<float>(params, random);
    }
  }
}

} // namespace
