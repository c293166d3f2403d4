// PackedLinear and PackedGemm (runtime/cpu/PackedLinear.h): a projection's weight packed from its
// stored form (f32, bf16, int8 or FP8 with row scales, or int4 with group scales) gives x W^T (+
// bias) (+ y) against a double computation, on one thread and on several, for the full width and
// for fewer outputs (a padded LM head); one packed copy per model.
#include "runtime/cpu/PackedLinear.h"

#include "support/FloatFormats.h"
#include "tests/runtime/model/TinyModel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace dlm::cpu {
namespace {

using dlm::testing::TempDir;
using dlm::testing::TinyModel;
using dlm::testing::TinyModelOptions;

// bf16: weight-only (tiles); bf16Arithmetic: bf16 arithmetic wherever oneDNN has a non-reference
// bf16 matmul, emulated or not (so that its numerics are tested on more CPUs than those with
// bf16 instructions).
enum class Stored { f32, bf16, bf16Arithmetic, int8, fp8, int4 };

class PackedLinearTest : public ::testing::TestWithParam<Stored> {
protected:
  void SetUp() override {
    TinyModelOptions options;
    options.bf16 = GetParam() == Stored::bf16 || GetParam() == Stored::bf16Arithmetic;
    options.int8 = GetParam() == Stored::int8;
    options.fp8 = GetParam() == Stored::fp8;
    options.int4Group = GetParam() == Stored::int4 ? 8 : 0;
    tiny = std::make_unique<TinyModel>(options);
    dlm::testing::LoadedTinyModel loaded = dlm::testing::writeAndLoad(*tiny, dir.file("tiny.dlm"));
    ASSERT_TRUE(loaded.weights);
    reader = std::move(loaded.reader);
    weights = loaded.weights;
  }

  TempDir dir;
  std::unique_ptr<TinyModel> tiny;
  std::unique_ptr<artifact::ArtifactReader> reader;
  std::shared_ptr<const model::ModelWeights> weights;
};

// The weight the tests pack: an LM head ([48, 16], 40 of whose rows are the vocabulary) for f32
// and bf16, and a projection ([24, 16]) for int8, FP8 and int4 (only projections are stored so).
TEST_P(PackedLinearTest, ComputesTheProjectionOnOneThreadAndOnSeveral) {
  const bool int8 =
      GetParam() == Stored::int8 || GetParam() == Stored::fp8 || GetParam() == Stored::int4;
  const std::string name = int8 ? "layers.0.up" : "lm_head";
  const int64_t rows0 = int8 ? 24 : 48;
  const std::vector<float> &values = tiny->weight(name); // [rows0, 16]
  std::mt19937 generator(3);
  std::normal_distribution<float> normal;
  std::vector<float> bias(static_cast<size_t>(rows0));
  for (float &b : bias)
    b = normal(generator);
  PackedGemm gemm;
  ThreadPool pool(2);
  // Every row, and fewer (a padded LM head's vocabulary).
  for (int64_t outputs : {rows0, rows0 - 8}) {
    StatusOr<std::shared_ptr<const PackedLinear>> packed = PackedLinear::of(
        *weights, name, outputs,
        GetParam() == Stored::bf16Arithmetic ? PackedLinear::Bf16Gemm::bf16ArithmeticAnyKernel
                                             : PackedLinear::Bf16Gemm::weightOnly);
    ASSERT_TRUE(packed.isOk()) << packed.status().message();
    const PackedLinear &w = **packed;
    ASSERT_EQ(w.outputs(), outputs);
    ASSERT_EQ(w.inputs(), 16);
    // f32 is oneDNN's layout; bf16 too with bf16 arithmetic where oneDNN has it, else tiles;
    // int8 stays int8 in tiles.
    using Format = PackedLinear::Format;
    const bool native = w.format() == Format::bf16Packed;
    switch (GetParam()) {
    case Stored::f32:
      EXPECT_EQ(w.format(), Format::f32Packed);
      EXPECT_GE(w.bytes(), size_t(outputs * 16 * 4));
      break;
    case Stored::bf16:
      EXPECT_EQ(w.format(), Format::bf16Tiles);
      break;
    case Stored::bf16Arithmetic:
      EXPECT_TRUE(native || w.format() == Format::bf16Tiles);
      break;
    case Stored::int8:
      EXPECT_EQ(w.format(), Format::int8Tiles);
      break;
    case Stored::fp8:
      EXPECT_EQ(w.format(), Format::fp8Tiles);
      break;
    case Stored::int4:
      EXPECT_EQ(w.format(), Format::int4Tiles);
      EXPECT_EQ(w.groupSize(), 8);
      break;
    }
    if (native) // oneDNN's bf16 layout (padded to its blocks: larger than [N, K] at this size)
      EXPECT_EQ(w.layout().data_type(), dnnl::memory::data_type::bf16);
    else if (GetParam() != Stored::f32) {
      EXPECT_GE(w.bytes(), size_t(outputs * 16) *
                               (GetParam() == Stored::int4 ? 1
                                : int8                     ? 2
                                                           : 4) /
                               2);
      EXPECT_LT(w.bytes(), size_t(outputs * 16 * 4));
    }
    // The stored matrix is not kept widened to float32 for packing.
    EXPECT_EQ(weights->find(name)->data, nullptr);
    // 1 and 4 rows: tiles multiplied a decoded row at a time, or in registers on AVX-512 (bf16,
    // int8, int4), as 12, 13 and 30 (blocks of 12 rows and what is left); 5: widened for an sgemm
    // without AVX-512; 11000: past the flops below which a GEMM runs on one thread.
    for (int64_t rows : {int64_t(1), int64_t(4), int64_t(5), int64_t(12), int64_t(13), int64_t(30),
                         int64_t(11000)})
      for (bool accumulate : {false, true}) {
        std::vector<float> x(static_cast<size_t>(rows * 16));
        for (float &v : x)
          v = normal(generator);
        std::vector<float> y(static_cast<size_t>(rows * outputs));
        for (float &v : y)
          v = normal(generator);
        const std::vector<float> before = y;
        Status ran = gemm.run(w, x.data(), rows, bias.data(), y.data(), pool, accumulate);
        ASSERT_TRUE(ran.isOk()) << ran.message();
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t n = 0; n < outputs; ++n) {
            double expected = bias[n] + (accumulate ? before[r * outputs + n] : 0.0);
            // The native bf16 GEMM multiplies the activations rounded to bf16.
            for (int64_t k = 0; k < 16; ++k)
              expected +=
                  double(native ? floatFromBf16(bf16FromFloat(x[r * 16 + k])) : x[r * 16 + k]) *
                  values[n * 16 + k];
            ASSERT_NEAR(y[r * outputs + n], expected, 1e-4 * (1 + std::abs(expected)))
                << "rows " << rows << " outputs " << outputs << " accumulate " << accumulate
                << " at " << r << ", " << n;
          }
      }
  }
}

// What a session asks for (dlmc compile --activations bf16) takes oneDNN's bf16 matmul only
// where it is one of oneDNN's brgemm kernels (AVX-512-BF16 or AMX: oneDNN's own choice for the
// shape, asked here independently), not its emulated gemm:jit or reference code; else the tiles
// with float32 activations. The path says which.
TEST(PackedLinearChoice, Bf16ArithmeticOnlyOnNativeBf16Kernels) {
  TinyModelOptions options;
  options.bf16 = true;
  TinyModel tiny(options);
  TempDir dir;
  dlm::testing::LoadedTinyModel loaded = dlm::testing::writeAndLoad(tiny, dir.file("tiny.dlm"));
  ASSERT_TRUE(loaded.weights);
  StatusOr<std::shared_ptr<const PackedLinear>> packed =
      PackedLinear::of(*loaded.weights, "lm_head", 40, PackedLinear::Bf16Gemm::bf16Arithmetic);
  ASSERT_TRUE(packed.isOk()) << packed.status().message();
  using Type = dnnl::memory::data_type;
  using Tag = dnnl::memory::format_tag;
  std::string implementation;
  try {
    dnnl::matmul::primitive_desc chooser(
        dnnl::matmul::desc(dnnl::memory::desc({64, 16}, Type::bf16, Tag::ab),
                           dnnl::memory::desc({16, 40}, Type::bf16, Tag::any),
                           dnnl::memory::desc({64, 40}, Type::f32, Tag::ab)),
        cpuEngine());
    implementation = chooser.impl_info_str();
  } catch (const dnnl::error &) {
  }
  const std::string path = (*packed)->path();
  if (implementation.rfind("brg:", 0) == 0) {
    EXPECT_EQ((*packed)->format(), PackedLinear::Format::bf16Packed);
    EXPECT_EQ(path, "bf16 x bf16 oneDNN " + implementation);
  } else {
    EXPECT_EQ((*packed)->format(), PackedLinear::Format::bf16Tiles);
    EXPECT_EQ(path, "bf16 tiles, float32 arithmetic");
  }
}

TEST_P(PackedLinearTest, OnePackedCopyPerModel) {
  StatusOr<std::shared_ptr<const PackedLinear>> first =
      PackedLinear::of(*weights, "layers.0.up", 24);
  StatusOr<std::shared_ptr<const PackedLinear>> second =
      PackedLinear::of(*weights, "layers.0.up", 24);
  ASSERT_TRUE(first.isOk() && second.isOk());
  EXPECT_EQ(first->get(), second->get());
  StatusOr<std::shared_ptr<const PackedLinear>> missing = PackedLinear::of(*weights, "nothing", 1);
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.status().message().find("nothing"), std::string::npos);
  StatusOr<std::shared_ptr<const PackedLinear>> tooMany =
      PackedLinear::of(*weights, "layers.0.up", 25);
  ASSERT_FALSE(tooMany.isOk());
  EXPECT_NE(tooMany.status().message().find("25 of its 24 rows"), std::string::npos)
      << tooMany.status().message();
}

std::string storedName(const ::testing::TestParamInfo<Stored> &info) {
  switch (info.param) {
  case Stored::f32:
    return "f32";
  case Stored::bf16:
    return "bf16";
  case Stored::bf16Arithmetic:
    return "bf16_arithmetic";
  case Stored::int8:
    return "int8";
  case Stored::fp8:
    return "fp8";
  case Stored::int4:
    return "int4";
  }
  return "unknown";
}

INSTANTIATE_TEST_SUITE_P(StoredAs, PackedLinearTest,
                         ::testing::Values(Stored::f32, Stored::bf16, Stored::bf16Arithmetic,
                                           Stored::int8, Stored::fp8, Stored::int4),
                         storedName);

} // namespace
} // namespace dlm::cpu
