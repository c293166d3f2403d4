// The quantize_rows kernels on the emulated device: each row's scale is max|x| / 448 (1 for a row
// of zeros, at least FLT_MIN for a tiny one), and each code is, of all 254 finite E4M3 codes
// (decoded by support/FloatFormats.h), the one nearest to x / scale, ties to the even code (an even
// mantissa), as round-to-nearest- even gives. Rows span magnitudes from 2^-12 to 2^8 so that
// subnormal codes, exponent carries and the +-448 end are all met, and one row of exact ties; a
// padded row stride must be honoured.
#include "support/FloatFormats.h"
#include "tests/runtime/cuda/CudaTestSupport.h"
#include "tests/runtime/cuda/EmuKernelConfigs.h"

#include <cfloat>
#include <cmath>

namespace {

using namespace dlm;
using namespace dlm::cudatest;

// The finite E4M3 code nearest to `value`: of two at the same distance (a tie between
// neighbours) the even one, and of +0 / -0 the one of value's sign.
uint8_t nearestE4m3(float value) {
  std::vector<int> nearest;
  double bestDistance = INFINITY;
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f)
      continue; // NaN
    const double distance = std::fabs(static_cast<double>(floatFromE4m3(code)) - value);
    if (distance < bestDistance)
      nearest.clear();
    if (distance <= bestDistance) {
      nearest.push_back(code);
      bestDistance = distance;
    }
  }
  for (int code : nearest)
    if ((code & 1) == 0 && ((code & 0x80) != 0) == std::signbit(value))
      return static_cast<uint8_t>(code);
  for (int code : nearest)
    if ((code & 1) == 0)
      return static_cast<uint8_t>(code);
  return static_cast<uint8_t>(nearest.front());
}

template <typename Element>
void checkQuantize(const codegen::QuantizeRowsParams &params, std::mt19937 &random) {
  const codegen::KernelSource kernel = *codegen::generateQuantizeRows(params);
  const int width = static_cast<int>(params.width);
  const int rows = 7;
  const long long stride = width + 8;
  std::uniform_real_distribution<float> unit(-1.f, 1.f);
  std::uniform_int_distribution<int> exponent(-12, 8);
  std::vector<Element> x(static_cast<size_t>(rows * stride), storeAs<Element>(1e30f));
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < width; ++i)
      x[static_cast<size_t>(r * stride + i)] =
          storeAs<Element>(r == 0   ? 0.f
                           : r == 2 ? unit(random) * 1e-40f // a scale below FLT_MIN * 448
                                    : unit(random) * std::ldexp(1.f, exponent(random)));
  // Row 1: 448 (so its scale is exactly 1), then the midpoints between neighbouring codes, both
  // signs: every one a tie that only rounding to nearest even decides.
  for (int i = 0; i < width; ++i) {
    const int lower = (i / 2) % 0x7e;
    const float midpoint = (floatFromE4m3(lower) + floatFromE4m3(lower + 1)) / 2;
    x[static_cast<size_t>(stride + i)] = storeAs<Element>(i == 0  ? 448.f
                                                          : i % 2 ? -midpoint
                                                                  : midpoint);
  }
  std::vector<uint8_t> codes(static_cast<size_t>(rows * width), 0xee);
  std::vector<float> scales(rows, -1.f);

  const Element *xArg = x.data();
  uint8_t *codesArg = codes.data();
  float *scalesArg = scales.data();
  ASSERT_TRUE(launched(emulatedDevice().launchArgs(
      kernel.name, emu::Dim3{static_cast<unsigned>(rows)}, emu::Dim3{kernel.blockThreads}, xArg,
      stride, codesArg, scalesArg, rows)));
  for (int r = 0; r < rows; ++r) {
    float largest = 0.f;
    for (int i = 0; i < width; ++i)
      largest = std::max(largest, std::fabs(loadFloat(x[static_cast<size_t>(r * stride + i)])));
    const float scale = largest > 0.f ? std::max(largest / 448.f, FLT_MIN) : 1.f;
    ASSERT_EQ(scales[r], scale) << kernel.name << " row " << r;
    for (int i = 0; i < width; ++i) {
      const float q = loadFloat(x[static_cast<size_t>(r * stride + i)]) / scale;
      const uint8_t code = codes[static_cast<size_t>(r * width + i)];
      ASSERT_EQ(int(code), int(nearestE4m3(q))) << kernel.name << " row " << r << " element " << i
                                                << ": " << q << " coded as " << floatFromE4m3(code);
    }
  }
}

TEST(QuantizeRowsKernel, NearestE4m3OfEachElementOverTheRowsScale) {
  std::mt19937 random(5);
  for (const codegen::QuantizeRowsParams &params : quantizeRowsConfigs()) {
    SCOPED_TRACE(testing::Message()
                 << "width " << params.width << " " << codegen::elementTypeName(params.element));
    if (params.element == codegen::ElementType::bf16)
      checkQuantize<__nv_bfloat16>(params, random);
    else
      checkQuantize<float>(params, random);
    if (HasFatalFailure())
      return;
  }
}

} // namespace
