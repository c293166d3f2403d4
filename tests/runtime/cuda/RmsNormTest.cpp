// RMSNorm kernels on the emulated device against the shared double reference: ragged widths (scalar
// and vector paths), several rows per token inside a padded buffer, in place and out of place, with
// and without weight.
#include "tests/runtime/cuda/CudaTestSupport.h"
#include "tests/runtime/cuda/EmuKernelConfigs.h"

namespace {

using namespace dlm;
using namespace dlm::cudatest;

template <typename Element>
void checkRmsNorm(const codegen::RmsNormParams &params, std::mt19937 &random, bool inPlace) {
  const std::string name = kernelName(codegen::generateRmsNorm, params);
  const int width = static_cast<int>(params.width);
  const int tokens = randomInt(random, 1, 5);
  const int rowsPerToken = randomInt(random, 1, 3);
  const int rows = tokens * rowsPerToken;
  // Padding past each token's rows must survive untouched; 16 keeps vector alignment.
  const long long stride = rowsPerToken * width + 16;
  const float eps = randomInt(random, 0, 1) ? 1e-6f : 1e-5f;

  std::vector<Element> x(static_cast<size_t>(tokens * stride));
  std::vector<float> exactX(x.size());
  std::uniform_real_distribution<float> value(-2.f, 2.f);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = storeAs<Element>(value(random));
    exactX[i] = loadFloat(x[i]);
  }
  // The weight is of the activations' element type (bf16-representable values, exact in f32).
  std::vector<float> exactWeight;
  randomBf16(random, width, 0.5f, 1.5f, &exactWeight);
  std::vector<Element> weight(exactWeight.size());
  for (size_t i = 0; i < weight.size(); ++i)
    weight[i] = storeAs<Element>(exactWeight[i]);
  const Element sentinel = storeAs<Element>(-777.f);
  std::vector<Element> y(x.size(), sentinel);
  if (inPlace)
    y = x;

  const Element *xArg = x.data();
  Element *yArg = inPlace ? reinterpret_cast<Element *>(x.data()) : y.data();
  const Element *weightArg = params.hasWeight ? weight.data() : nullptr;
  codegen::KernelSource kernel = *codegen::generateRmsNorm(params);
  ASSERT_TRUE(launched(emulatedDevice().launchArgs(
      name, emu::Dim3{static_cast<unsigned>(rows)}, emu::Dim3{kernel.blockThreads}, xArg, stride,
      yArg, stride, weightArg, rows, rowsPerToken, eps)));
  const std::vector<Element> &result = inPlace ? x : y;
  for (int row = 0; row < rows; ++row) {
    const long long base = (row / rowsPerToken) * stride + (row % rowsPerToken) * width;
    const std::vector<double> want = reference::rmsNormRow(
        exactX.data() + base, width, params.hasWeight ? exactWeight.data() : nullptr, eps);
    for (int i = 0; i < width; ++i) {
      ASSERT_TRUE(near(loadFloat(result[base + i]), want[i], 1e-5,
                       2 * storageRounding<Element>() + 1e-5,
                       name + " row " + std::to_string(row) + " element " + std::to_string(i)));
    }
  }
  if (!inPlace)
    for (int token = 0; token < tokens; ++token)
      for (long long i = rowsPerToken * width; i < stride; ++i)
        ASSERT_EQ(loadFloat(y[token * stride + i]), loadFloat(sentinel))
            << name << ": padding overwritten";
}

TEST(RmsNormKernel, MatchesDoubleReference) {
  std::mt19937 random(11);
  for (const codegen::RmsNormParams &params : rmsNormConfigs()) {
    for (int trial = 0; trial < 3; ++trial) {
      SCOPED_TRACE(testing::Message() << "width " << params.width << " trial " << trial);
      const bool inPlace = trial == 2;
      if (params.element == codegen::ElementType::bf16)
        checkRmsNorm<__nv_bfloat16>(params, random, inPlace);
      else
        checkRmsNorm<float>(params, random, inPlace);
    }
  }
}

} // namespace
