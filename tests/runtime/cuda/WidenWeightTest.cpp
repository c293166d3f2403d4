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

// Launches `kernel` on weight bytes and scales [rows, cols] and checks every element against
// `expected(i)` (NaN: any NaN; else f32 bit for bit, bf16 the float rounded to nearest even), and
// that the four elements past the matrix (a whole last thread's) stay as they were.
template <typename Element, typename Scale, typename Expected>
void widenAndCheck(const codegen::KernelSource &kernel, const std::vector<uint8_t> &weight,
                   const std::vector<Scale> &scale, long long rows, long long cols,
                   const Expected &expected) {
  const long long count = rows * cols;
  const Element sentinel = storeAs<Element>(-777.f);
  std::vector<Element> out(static_cast<size_t>(count + 4), sentinel);
  const uint8_t *weightArg = weight.data();
  const Scale *scaleArg = scale.data();
  Element *outArg = out.data();
  const unsigned perBlock = 4 * kernel.blockThreads;
  ASSERT_TRUE(launched(emulatedDevice().launchArgs(
      kernel.name, emu::Dim3{static_cast<unsigned>((count + perBlock - 1) / perBlock)},
      emu::Dim3{kernel.blockThreads}, weightArg, scaleArg, outArg, rows, cols)));
  for (long long i = 0; i < count; ++i) {
    const float wide = expected(i);
    const float got = loadFloat(out[static_cast<size_t>(i)]);
    if (std::isnan(wide)) {
      ASSERT_TRUE(std::isnan(got)) << kernel.name << " element " << i;
      continue;
    }
    const Element want = storeAs<Element>(wide);
    ASSERT_EQ(std::memcmp(&out[static_cast<size_t>(i)], &want, sizeof(Element)), 0)
        << kernel.name << " element " << i << ": " << got << " != " << wide;
  }
  for (long long i = count; i < count + 4; ++i)
    ASSERT_EQ(loadFloat(out[static_cast<size_t>(i)]), loadFloat(sentinel))
        << kernel.name << ": element " << i << " past the matrix written";
}

template <typename Element>
void checkWiden(const codegen::WidenWeightParams &params, long long rows, long long cols) {
  const long long count = rows * cols;
  std::vector<uint8_t> weight(static_cast<size_t>(count));
  for (long long i = 0; i < count; ++i)
    weight[static_cast<size_t>(i)] = static_cast<uint8_t>((i * 37 + 11) % 256);
  std::vector<float> scale(static_cast<size_t>(rows));
  for (long long r = 0; r < rows; ++r)
    scale[static_cast<size_t>(r)] = 0.0123f * static_cast<float>(r + 1) * (r % 2 ? -1.f : 1.f);
  widenAndCheck<Element>(*codegen::generateWidenWeight(params), weight, scale, rows, cols,
                         [&](long long i) {
                           return decoded(params.stored, weight[static_cast<size_t>(i)]) *
                                  scale[static_cast<size_t>(i / cols)];
                         });
}

// i4: every code of both nibbles, in groups of 4 and 8 (rows of 8, 24 and 128 inputs), each
// group's f16 scale decoded exactly (support/FloatFormats.h's floatFromF16), normal and
// subnormal.
template <typename Element>
void checkWidenInt4(const codegen::WidenWeightParams &params, long long rows, long long cols) {
  const long long count = rows * cols, groups = cols / params.groupSize;
  std::vector<uint8_t> weight(static_cast<size_t>(count / 2));
  for (size_t i = 0; i < weight.size(); ++i)
    weight[i] = static_cast<uint8_t>((i * 37 + 11) % 256);
  std::vector<uint16_t> scale(static_cast<size_t>(rows * groups));
  for (size_t g = 0; g < scale.size(); ++g) // normal halves of both signs, and subnormal ones
    scale[g] = static_cast<uint16_t>(g % 3 == 2 ? 0x8000u | (g * 7 % 1024)
                                                : (g * 2713 + 15000) % 0x7c00);
  widenAndCheck<Element>(
      *codegen::generateWidenWeight(params), weight, scale, rows, cols, [&](long long i) {
        const int nibble = (weight[static_cast<size_t>(i / 2)] >> (4 * (i % 2))) & 0xF;
        return static_cast<float>(nibble >= 8 ? nibble - 16 : nibble) *
               floatFromF16(scale[static_cast<size_t>(i / cols * groups +
                                                      i % cols / params.groupSize)]);
      });
}

TEST(WidenWeightKernel, Int4CodesTimesTheirGroupScales) {
  const std::pair<long long, long long> shapes[] = {{3, 8}, {5, 24}, {2, 128}};
  for (const codegen::WidenWeightParams &params : widenWeightConfigs()) {
    if (params.stored != codegen::StoredWeight::i4)
      continue;
    for (const auto &[rows, cols] : shapes) {
      SCOPED_TRACE(testing::Message()
                   << "i4 groups of " << params.groupSize << " -> "
                   << codegen::elementTypeName(params.element) << " " << rows << " x " << cols);
      if (params.element == codegen::ElementType::bf16)
        checkWidenInt4<__nv_bfloat16>(params, rows, cols);
      else
        checkWidenInt4<float>(params, rows, cols);
      if (HasFatalFailure())
        return;
    }
  }
}

TEST(WidenWeightKernel, EveryCodeTimesItsRowScale) {
  // 256 x 3 covers every code in every row; 5 x 7 ends mid-thread; 1 x 1 is one element.
  const std::pair<long long, long long> shapes[] = {{3, 256}, {5, 7}, {1, 1}, {9, 130}};
  for (const codegen::WidenWeightParams &params : widenWeightConfigs()) {
    if (params.stored == codegen::StoredWeight::i4)
      continue; // Int4CodesTimesTheirGroupScales
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
