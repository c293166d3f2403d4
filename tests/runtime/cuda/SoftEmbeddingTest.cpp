// The soft_embedding kernel on the emulated device (the record of runtime/model/KernelProgram.h:
// out[row] = scale * softmax(input[row]) @ table[:inputWidth], zero rows without input) against a
// double-precision reference written here: the softmax of each float32 input row, its product
// with the table as the kernel reads it (bf16 tables: the same rounded values), times scale.
// The configurations cover ragged widths (a partial column tile), one and two column tiles and
// both table precisions; the trials one and two row tiles, input widths equal to the table's
// rows, smaller than one input tile and ragged below them, -inf inputs (probability 0), no
// input (zero rows), and a mask token with a run-time factor (zero rows for the other tokens).
// Table rows past inputWidth, input columns past it and the output's padding columns hold NaNs or
// sentinels: the kernel must neither read the first two nor write the last.
#include "tests/runtime/cuda/CudaTestSupport.h"
#include "tests/runtime/cuda/EmuKernelConfigs.h"

#include <limits>

namespace {

using namespace dlm;
using namespace dlm::cudatest;

// scale * softmax(input[0 .. inputWidth)) @ table[0 .. inputWidth) in double; table is
// [>= inputWidth, width] with contiguous rows.
std::vector<double> softEmbeddingRow(const float *input, int inputWidth, const float *table,
                                     int width, double scale) {
  double maximum = -std::numeric_limits<double>::infinity();
  for (int v = 0; v < inputWidth; ++v)
    maximum = std::max(maximum, static_cast<double>(input[v]));
  double sum = 0;
  for (int v = 0; v < inputWidth; ++v)
    sum += std::exp(input[v] - maximum);
  std::vector<double> out(static_cast<size_t>(width), 0.0);
  for (int v = 0; v < inputWidth; ++v) {
    const double p = std::exp(input[v] - maximum) / sum;
    for (int h = 0; h < width; ++h)
      out[h] += p * table[static_cast<size_t>(v) * width + h];
  }
  for (double &value : out)
    value *= scale;
  return out;
}

enum class Trial { twoRowTiles, narrowInput, raggedInputWithInfinities, noInput, maskedRows };

template <typename Element>
void checkSoftEmbedding(const codegen::SoftEmbeddingParams &params, std::mt19937 &random,
                        Trial trial) {
  const codegen::KernelSource kernel = *codegen::generateSoftEmbedding(params);
  const int width = static_cast<int>(params.width);
  int rows = 0, tableRows = 0, inputWidth = 0;
  switch (trial) {
  case Trial::twoRowTiles: // input as wide as the table, a partial input tile at the end
    rows = randomInt(random, 65, 100);
    tableRows = inputWidth = randomInt(random, 200, 300);
    break;
  case Trial::narrowInput: // fewer inputs than one tile of 16, of a larger table
    rows = randomInt(random, 1, 24);
    tableRows = 300;
    inputWidth = randomInt(random, 1, 15);
    break;
  case Trial::raggedInputWithInfinities:
    rows = randomInt(random, 1, 40);
    tableRows = 257;
    inputWidth = 173;
    break;
  case Trial::noInput:
    rows = randomInt(random, 1, 70);
    tableRows = inputWidth = 64;
    break;
  case Trial::maskedRows: // only the rows of token 7 (iteration smoothing), a run-time factor
    rows = randomInt(random, 65, 130);
    tableRows = inputWidth = 150;
    break;
  }
  // Tokens 7 and 8 at random; with maskedRows only 7's rows are read.
  std::vector<int> tokens(static_cast<size_t>(rows));
  for (int &token : tokens)
    token = randomInt(random, 7, 8);
  const int maskToken = trial == Trial::maskedRows ? 7 : -1;
  const float inputScale = trial == Trial::maskedRows ? 0.37f : 1.f;
  const long long inputStride = tableRows + 3;
  const long long outStride = width + 3;
  const float nan = std::numeric_limits<float>::quiet_NaN();

  std::vector<float> input(static_cast<size_t>(rows * inputStride), nan);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int row = 0; row < rows; ++row) {
    const float sharpness = std::vector<float>{0.5f, 3.f, 12.f}[randomInt(random, 0, 2)];
    for (int v = 0; v < inputWidth; ++v)
      input[row * inputStride + v] =
          trial == Trial::raggedInputWithInfinities && v % 5 == 1
              ? -std::numeric_limits<float>::infinity()
              : normal(random) * sharpness;
  }
  // The rows the kernel reads, as floats; the rest of the table is NaN.
  std::vector<float> exactTable;
  std::vector<Element> table;
  const size_t readElements = static_cast<size_t>(inputWidth) * width;
  if constexpr (std::is_same_v<Element, __nv_bfloat16>) {
    table = randomBf16(random, readElements, -1.f, 1.f, &exactTable);
  } else {
    exactTable.resize(readElements);
    for (float &value : exactTable)
      value = std::uniform_real_distribution<float>(-1.f, 1.f)(random);
    table = exactTable;
  }
  table.resize(static_cast<size_t>(tableRows) * width, storeAs<Element>(nan));
  const float scale = std::sqrt(static_cast<float>(width));

  const Element sentinel = storeAs<Element>(-12345.f);
  std::vector<Element> out(static_cast<size_t>(rows * outStride), sentinel);
  const float *inputArg = trial == Trial::noInput ? nullptr : input.data();
  const Element *tableArg = table.data();
  const int *tokensArg = tokens.data();
  const float *inputScaleArg = &inputScale;
  Element *outArg = out.data();
  const emu::Dim3 grid{static_cast<unsigned>((width + 127) / 128),
                       static_cast<unsigned>((rows + 63) / 64)};
  ASSERT_TRUE(launched(emulatedDevice().launchArgs(
      kernel.name, grid, emu::Dim3{kernel.blockThreads}, inputArg, inputStride, inputWidth, rows,
      tableArg, scale, tokensArg, maskToken, inputScaleArg, outArg, outStride)));

  for (int row = 0; row < rows; ++row) {
    const std::string where = kernel.name + " row " + std::to_string(row) + " of " +
                              std::to_string(rows) + ", input width " +
                              std::to_string(inputWidth);
    if (trial == Trial::noInput || (maskToken >= 0 && tokens[row] != maskToken)) {
      for (int h = 0; h < width; ++h)
        ASSERT_EQ(loadFloat(out[row * outStride + h]), 0.f) << where << " column " << h;
    } else {
      const std::vector<double> want =
          softEmbeddingRow(input.data() + row * inputStride, inputWidth, exactTable.data(), width,
                           scale * inputScale);
      for (int h = 0; h < width; ++h)
        ASSERT_TRUE(near(loadFloat(out[row * outStride + h]), want[h], 2e-5 * scale,
                         storageRounding<Element>() + 1e-4,
                         where + " column " + std::to_string(h)));
    }
    for (long long h = width; h < outStride; ++h)
      ASSERT_EQ(loadFloat(out[row * outStride + h]), loadFloat(sentinel))
          << where << ": wrote padding column " << h;
  }
}

TEST(SoftEmbeddingKernel, MatchesDoubleReference) {
  std::mt19937 random(2024);
  for (const codegen::SoftEmbeddingParams &params : softEmbeddingConfigs()) {
    for (Trial trial : {Trial::twoRowTiles, Trial::narrowInput, Trial::raggedInputWithInfinities,
                        Trial::noInput, Trial::maskedRows}) {
      SCOPED_TRACE(testing::Message() << "width " << params.width << " "
                                      << codegen::elementTypeName(params.element) << " trial "
                                      << static_cast<int>(trial));
      if (params.element == codegen::ElementType::bf16)
        checkSoftEmbedding<__nv_bfloat16>(params, random, trial);
      else
        checkSoftEmbedding<float>(params, random, trial);
      if (HasFatalFailure())
        return;
    }
  }
}

// The reference on hand-computed rows: equal inputs average the table rows; one dominant input
// picks its row; softmax([0, log 3]) = [1/4, 3/4]; a width of 1 returns the first row.
TEST(SoftEmbeddingReference, HandComputedRows) {
  const std::vector<float> table{1.f, 2.f, 3.f, 4.f, 5.f, 6.f}; // [3 rows, 2 columns]
  const std::vector<float> flat{0.5f, 0.5f, 0.5f};
  std::vector<double> s = softEmbeddingRow(flat.data(), 3, table.data(), 2, 2.0);
  EXPECT_NEAR(s[0], 2.0 * 3.0, 1e-12);
  EXPECT_NEAR(s[1], 2.0 * 4.0, 1e-12);
  const std::vector<float> peaked{0.f, 60.f, 0.f};
  s = softEmbeddingRow(peaked.data(), 3, table.data(), 2, 1.0);
  EXPECT_NEAR(s[0], 3.0, 1e-12);
  EXPECT_NEAR(s[1], 4.0, 1e-12);
  const std::vector<float> two{0.f, static_cast<float>(std::log(3.0))};
  s = softEmbeddingRow(two.data(), 2, table.data(), 2, 1.0);
  EXPECT_NEAR(s[0], 0.25 * 1.0 + 0.75 * 3.0, 1e-6);
  EXPECT_NEAR(s[1], 0.25 * 2.0 + 0.75 * 4.0, 1e-6);
  s = softEmbeddingRow(two.data(), 1, table.data(), 2, 3.0);
  EXPECT_NEAR(s[0], 3.0, 1e-12);
  EXPECT_NEAR(s[1], 6.0, 1e-12);
}

TEST(SoftEmbeddingKernel, RejectsShapesItCannotServe) {
  EXPECT_FALSE(codegen::generateSoftEmbedding({0, codegen::ElementType::f32}));
  StatusOr<codegen::KernelSource> wide =
      codegen::generateSoftEmbedding({(int64_t(1) << 20) + 1, codegen::ElementType::bf16});
  ASSERT_FALSE(wide);
  EXPECT_NE(wide.status().message().find("width"), std::string::npos);
}

} // namespace
