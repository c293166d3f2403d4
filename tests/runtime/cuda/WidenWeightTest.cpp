// The widen_weight kernels on the emulated device: every one of the 256 byte codes, in rows of
// different scales, widened to f32 and bf16. The reference is support/FloatFormats.h's E4M3
// decoding (checked against the format's known points in ModelWeightsTest) or the signed byte,
// times the row's scale in float32, as the CPU backend widens them: f32 must match bit for bit,
// bf16 be that float rounded to nearest even. Counts that are not a multiple of a thread's four
// elements must leave what follows the matrix alone.
#include "support/FloatFormats.h"
#include "tests/runtime/cuda/CudaTestSupport.h"
#include "tests/runtime/cuda/EmuKernelConfigs.h"

#include <cmath>
#include <cstring>

namespace {

using namespace dlm;
using namespace dlm::cudatest;

float decoded(codegen::StoredWeight stored, uint8_t code) {
  return stored == codegen::StoredWeight::i8 ? static_cast<float>(static_cast<int8_t>(code))
                                             : floatFromE4m3(code);
}

template <typename Element>
void checkWiden(const codegen::WidenWeightParams &params, long long rows, long long cols) {
  const codegen::KernelSource kernel = *codegen::generateWidenWeight(params);
  const long long count = rows * cols;
  std::vector<uint8_t> weight(static_cast<size_t>(count));
  for (long long i = 0; i < count; ++i)
    weight[static_cast<size_t>(i)] = static_cast<uint8_t>((i * 37 + 11) % 256);
  std::vector<float> scale(static_cast<size_t>(rows));
  for (long long r = 0; r < rows; ++r)
    scale[static_cast<size_t>(r)] = 0.0123f * static_cast<float>(r + 1) * (r % 2 ? -1.f : 1.f);
  // Room for a whole last thread's four elements past the matrix, which must stay as they are.
  const Element sentinel = storeAs<Element>(-777.f);
  std::vector<Element> out(static_cast<size_t>(count + 4), sentinel);

  const uint8_t *weightArg = weight.data();
  const float *scaleArg = scale.data();
  Element *outArg = out.data();
  const unsigned perBlock = 4 * kernel.blockThreads;
  ASSERT_TRUE(launched(emulatedDevice().launchArgs(
      kernel.name, emu::Dim3{static_cast<unsigned>((count + perBlock - 1) / perBlock)},
      emu::Dim3{kernel.blockThreads}, weightArg, scaleArg, outArg, rows, cols)));
  for (long long i = 0; i < count; ++i) {
    const uint8_t code = weight[static_cast<size_t>(i)];
    const float wide = decoded(params.stored, code) * scale[static_cast<size_t>(i / cols)];
    const Element want = storeAs<Element>(wide);
    if (std::isnan(wide)) {
      ASSERT_TRUE(std::isnan(loadFloat(out[static_cast<size_t>(i)])))
          << kernel.name << " code " << int(code);
      continue;
    }
    ASSERT_EQ(std::memcmp(&out[static_cast<size_t>(i)], &want, sizeof(Element)), 0)
        << kernel.name << " element " << i << " (code " << int(code)
        << "): " << loadFloat(out[static_cast<size_t>(i)]) << " != " << wide;
  }
  for (long long i = count; i < count + 4; ++i)
    ASSERT_EQ(loadFloat(out[static_cast<size_t>(i)]), loadFloat(sentinel))
        << kernel.name << ": element " << i << " past the matrix written";
}

TEST(WidenWeightKernel, EveryCodeTimesItsRowScale) {
  // 256 x 3 covers every code in every row; 5 x 7 ends mid-thread; 1 x 1 is one element.
  const std::pair<long long, long long> shapes[] = {{3, 256}, {5, 7}, {1, 1}, {9, 130}};
  for (const codegen::WidenWeightParams &params : widenWeightConfigs()) {
    for (const auto &[rows, cols] : shapes) {
      SCOPED_TRACE(testing::Message()
                   << codegen::storedWeightName(params.stored) << " -> "
                   << codegen::elementTypeName(params.element) << " " << rows << " x " << cols);
      if (params.element == codegen::ElementType::bf16)
        checkWiden<__nv_bfloat16>(params, rows, cols);
      else
        checkWiden<float>(params, rows, cols);
      if (HasFatalFailure())
        return;
    }
  }
}

} // namespace
