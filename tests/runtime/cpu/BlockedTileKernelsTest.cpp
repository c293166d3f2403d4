// The register-blocked tile kernels (runtime/cpu/BlockedTileKernels.h) against a double
// computation, called directly: tile widths of 16 (one narrow block), 48 and 80 (32-column blocks
// and a 16-column tail), bf16 and int8 codes, 1 to 128 rows (blocks of 12 and what is left).
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

} // namespace
} // namespace dlm::cpu
