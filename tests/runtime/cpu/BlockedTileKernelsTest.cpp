// The register-blocked tile kernels (runtime/cpu/BlockedTileKernels.h) against a double
// computation, called directly: tile widths of 16 (one narrow block), 48 and 80 (32-column blocks
// and a 16-column tail), bf16, int8 and int4 codes, 1 to 128 rows (blocks of 12 and what is left).
// Skipped by name on CPUs without AVX-512F, where PackedGemm does not call them.
#include "runtime/cpu/BlockedTileKernels.h"

#include "support/FloatFormats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace dlm::cpu {
namespace {

TEST(BlockedTileKernels, MatchTheProductForEveryWidthAndRowCount) {
  if (!hasBlockedTileKernels())
    GTEST_SKIP() << "this CPU has no AVX-512F: the blocked kernels do not run here";
  std::mt19937 generator(11);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> code(-127, 127);
  const int64_t k = 40;
  for (int64_t width : {int64_t(16), int64_t(48), int64_t(80)})
    for (bool int8 : {false, true}) {
      std::vector<uint16_t> bits(static_cast<size_t>(k * width));
      std::vector<int8_t> codes(static_cast<size_t>(k * width));
      std::vector<double> w(static_cast<size_t>(k * width));
      for (size_t i = 0; i < w.size(); ++i) {
        if (int8) {
          codes[i] = static_cast<int8_t>(code(generator));
          w[i] = codes[i];
        } else {
          bits[i] = bf16FromFloat(normal(generator));
          w[i] = floatFromBf16(bits[i]);
        }
      }
      for (int64_t rows : {int64_t(1), int64_t(5), int64_t(12), int64_t(13), int64_t(128)}) {
        SCOPED_TRACE("width " + std::to_string(width) + (int8 ? " int8" : " bf16") + ", rows " +
                     std::to_string(rows));
        const int64_t ldx = k + 3; // rows of x apart by more than K
        std::vector<float> x(static_cast<size_t>(rows * ldx));
        for (float &v : x)
          v = normal(generator);
        std::vector<float> sums(static_cast<size_t>(rows * width), NAN);
        if (int8)
          multiplyTileInt8(codes.data(), k, width, x.data(), ldx, rows, sums.data());
        else
          multiplyTileBf16(bits.data(), k, width, x.data(), ldx, rows, sums.data());
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < width; ++c) {
            double expected = 0;
            for (int64_t i = 0; i < k; ++i)
              expected += double(x[r * ldx + i]) * w[i * width + c];
            ASSERT_NEAR(sums[r * width + c], expected, 1e-4 * (1 + std::abs(expected)))
                << "at " << r << ", " << c;
          }
      }
    }
}

// An int4 tile in PackedLinear's layout (8 bytes per 16 columns, byte j holding columns j and
// j + 8), every code from -8 to 7, scales per group of 8 and 40 rows of the tile (groups that
// change within a 12-row block of x's rows and across the prefetch distance).
TEST(BlockedTileKernels, Int4TilesTimesTheirGroupScales) {
  if (!hasBlockedTileKernels())
    GTEST_SKIP() << "this CPU has no AVX-512F: the blocked kernels do not run here";
  std::mt19937 generator(13);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> code(-8, 7);
  const int64_t k = 80;
  for (int64_t group : {int64_t(8), int64_t(40)})
    for (int64_t width : {int64_t(16), int64_t(48), int64_t(80)}) {
      std::vector<uint8_t> tile(static_cast<size_t>(k * width / 2), 0);
      std::vector<uint16_t> scales(static_cast<size_t>(k / group * width));
      for (uint16_t &s : scales)
        s = f16FromFloat(normal(generator));
      std::vector<double> w(static_cast<size_t>(k * width));
      for (int64_t i = 0; i < k; ++i)
        for (int64_t c = 0; c < width; ++c) {
          const int q = code(generator);
          const int64_t byte = i * width / 2 + (c / 16) * 8 + c % 8;
          tile[static_cast<size_t>(byte)] |=
              static_cast<uint8_t>((q & 0xF) << (c % 16 < 8 ? 0 : 4));
          w[static_cast<size_t>(i * width + c)] =
              q * double(floatFromF16(scales[static_cast<size_t>(i / group * width + c)]));
        }
      for (int64_t rows : {int64_t(1), int64_t(7), int64_t(12), int64_t(25)}) {
        SCOPED_TRACE("width " + std::to_string(width) + ", group " + std::to_string(group) +
                     ", rows " + std::to_string(rows));
        const int64_t ldx = k + 1;
        std::vector<float> x(static_cast<size_t>(rows * ldx));
        for (float &v : x)
          v = normal(generator);
        std::vector<float> sums(static_cast<size_t>(rows * width), NAN);
        multiplyTileInt4(tile.data(), scales.data(), group, k, width, x.data(), ldx, rows,
                         sums.data());
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < width; ++c) {
            double expected = 0;
            for (int64_t i = 0; i < k; ++i)
              expected += double(x[r * ldx + i]) * w[static_cast<size_t>(i * width + c)];
            ASSERT_NEAR(sums[r * width + c], expected, 1e-4 * (1 + std::abs(expected)))
                << "at " << r << ", " << c;
          }
      }
    }
}

// multiplyRowsBf16 over a column block of a wider matrix (rows ldw apart), into sums ldw apart,
// added to what they hold: a soft embedding's 32 columns of a table, 256 of its rows at a time.
TEST(BlockedTileKernels, RowsOfAWiderMatrixAccumulate) {
  if (!hasBlockedTileKernels())
    GTEST_SKIP() << "this CPU has no AVX-512F: the blocked kernels do not run here";
  std::mt19937 generator(5);
  std::normal_distribution<float> normal;
  const int64_t k = 70, ldw = 112, column = 32, width = 48, rows = 14, ldx = k + 5, lds = 100;
  std::vector<uint16_t> bits(static_cast<size_t>(k * ldw));
  for (uint16_t &b : bits)
    b = bf16FromFloat(normal(generator));
  std::vector<float> x(static_cast<size_t>(rows * ldx)), sums(static_cast<size_t>(rows * lds));
  for (float &v : x)
    v = normal(generator);
  for (float &v : sums)
    v = normal(generator);
  const std::vector<float> before = sums;
  multiplyRowsBf16(bits.data() + column, ldw, k, width, x.data(), ldx, rows, sums.data(), lds,
                   true);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < lds; ++c) {
      double expected = before[r * lds + c];
      if (c < width)
        for (int64_t i = 0; i < k; ++i)
          expected += double(x[r * ldx + i]) * floatFromBf16(bits[i * ldw + column + c]);
      ASSERT_NEAR(sums[r * lds + c], expected, 1e-4 * (1 + std::abs(expected)))
          << "at " << r << ", " << c;
    }
}

// multiplyByRowsBf16 (W read in its [out, in] layout), and multiplyBf16ByRowsBf16 (the same in
// bf16 arithmetic) where the CPU has AVX-512-BF16, for input counts with and without a tail (of
// 16 and of 32), output counts around their blocks of 4 and row counts around their blocks of 6,
// writing and accumulating. The bf16 kernel is held to the product of x rounded to bf16.
TEST(BlockedTileKernels, DotProductsMatchTheProduct) {
  if (!hasBlockedTileKernels())
    GTEST_SKIP() << "this CPU has no AVX-512F: the blocked kernels do not run here";
  std::mt19937 generator(9);
  std::normal_distribution<float> normal;
  for (bool bf16 : {false, true})
    for (int64_t k : {int64_t(8), int64_t(32), int64_t(48), int64_t(517)})
      for (int64_t outputs : {int64_t(1), int64_t(4), int64_t(7), int64_t(13)})
        for (int64_t rows : {int64_t(1), int64_t(6), int64_t(9)})
          for (bool accumulate : {false, true}) {
            if (bf16 && !hasBf16DotKernels())
              continue;
            SCOPED_TRACE(std::string(bf16 ? "bf16" : "float32") + " arithmetic, k " +
                         std::to_string(k) + ", outputs " + std::to_string(outputs) + ", rows " +
                         std::to_string(rows) + (accumulate ? ", accumulating" : ""));
            const int64_t ldw = k + 2, ldx = k + 1, ldy = outputs + 3;
            std::vector<uint16_t> bits(static_cast<size_t>(outputs * ldw));
            for (uint16_t &b : bits)
              b = bf16FromFloat(normal(generator));
            std::vector<float> x(static_cast<size_t>(rows * ldx));
            std::vector<uint16_t> xBits(x.size());
            std::vector<float> y(static_cast<size_t>(rows * ldy));
            for (size_t i = 0; i < x.size(); ++i) {
              x[i] = normal(generator);
              xBits[i] = bf16FromFloat(x[i]);
            }
            for (float &v : y)
              v = normal(generator);
            const std::vector<float> before = y;
            if (bf16)
              multiplyBf16ByRowsBf16(bits.data(), ldw, outputs, k, xBits.data(), ldx, rows,
                                     y.data(), ldy, accumulate);
            else
              multiplyByRowsBf16(bits.data(), ldw, outputs, k, x.data(), ldx, rows, y.data(), ldy,
                                 accumulate);
            for (int64_t r = 0; r < rows; ++r)
              for (int64_t n = 0; n < ldy; ++n) {
                double expected = before[r * ldy + n];
                if (n < outputs) {
                  expected = accumulate ? expected : 0.0;
                  for (int64_t i = 0; i < k; ++i)
                    expected += double(bf16 ? floatFromBf16(xBits[r * ldx + i]) : x[r * ldx + i]) *
                                floatFromBf16(bits[n * ldw + i]);
                }
                ASSERT_NEAR(y[r * ldy + n], expected, 1e-4 * (1 + std::abs(expected)))
                    << "at " << r << ", " << n;
              }
          }
}

} // namespace
} // namespace dlm::cpu
