// Embedding lookup kernels on the emulated device: ragged token counts (one token up to many
// blocks), repeated and out-of-range ids (a zero row), a padded output stride whose padding
// must survive, f32 and bf16 tables, vector and scalar widths. The copy is exact: values are
// compared bit for bit.
#include "tests/runtime/cuda/CudaTestSupport.h"
#include "tests/runtime/cuda/EmuKernelConfigs.h"

#include <cstring>

namespace {

using namespace dlm;
using namespace dlm::cudatest;

template <typename Element>
void checkEmbedding(const codegen::EmbeddingParams &params, std::mt19937 &random, int trial) {
  const codegen::KernelSource kernel = *codegen::generateEmbedding(params);
  const int width = static_cast<int>(params.width);
  const long long tableRows = randomInt(random, 1, 50);
  const int count = trial == 0 ? 1 : randomInt(random, 2, 70);
  // 16 elements of padding keep every access width aligned.
  const long long outStride = width + (trial % 2 ? 16 : 0);

  std::vector<Element> table(static_cast<size_t>(tableRows * width));
  std::uniform_real_distribution<float> value(-3.f, 3.f);
  for (Element &element : table)
    element = storeAs<Element>(value(random));
  std::vector<int> tokens(count);
  for (int &token : tokens)
    token = randomInt(random, 0, static_cast<int>(tableRows) - 1);
  if (trial == 2) { // the host validates ids; the kernel still must not read out of bounds
    tokens[0] = -1;
    tokens[count - 1] = static_cast<int>(tableRows);
  }
  const Element sentinel = storeAs<Element>(-777.f);
  std::vector<Element> out(static_cast<size_t>(count * outStride), sentinel);

  const int *tokensArg = tokens.data();
  const Element *tableArg = table.data();
  Element *outArg = out.data();
  ASSERT_TRUE(launched(emulatedDevice().launchArgs(
      kernel.name, emu::Dim3{static_cast<unsigned>(count)}, emu::Dim3{kernel.blockThreads},
      tokensArg, count, tableArg, tableRows, outArg, outStride)));
  const Element zero = storeAs<Element>(0.f);
  for (int row = 0; row < count; ++row) {
    const bool valid = tokens[row] >= 0 && tokens[row] < tableRows;
    for (int i = 0; i < width; ++i) {
      const Element &want = valid ? table[static_cast<size_t>(tokens[row]) * width + i] : zero;
      ASSERT_EQ(std::memcmp(&out[row * outStride + i], &want, sizeof(Element)), 0)
          << kernel.name << " row " << row << " (token " << tokens[row] << ") element " << i;
    }
    for (long long i = width; i < outStride; ++i)
      ASSERT_EQ(loadFloat(out[row * outStride + i]), loadFloat(sentinel))
          << kernel.name << ": padding of row " << row << " overwritten";
  }
}

TEST(EmbeddingKernel, CopiesTableRowsOfEachToken) {
  std::mt19937 random(31);
  for (const codegen::EmbeddingParams &params : embeddingConfigs()) {
    for (int trial = 0; trial < 4; ++trial) {
      SCOPED_TRACE(testing::Message() << "width " << params.width << " "
                                      << codegen::elementTypeName(params.element) << " trial "
                                      << trial);
      if (params.element == codegen::ElementType::bf16)
        checkEmbedding<__nv_bfloat16>(params, random, trial);
      else
        checkEmbedding<float>(params, random, trial);
      if (HasFatalFailure())
        return;
    }
  }
}

} // namespace
