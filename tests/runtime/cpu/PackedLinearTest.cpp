// PackedLinear and PackedGemm (runtime/cpu/PackedLinear.h): a projection's weight packed from its
// stored form (f32 or bf16) gives x W^T (+ bias) (+ y) against a double computation, on one
// thread and on several, for the full width and for fewer outputs (a padded LM head); one packed
// copy per model.
#include "runtime/cpu/PackedLinear.h"

#include "tests/runtime/model/TinyModel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace dlm::cpu {
namespace {

using dlm::testing::TempDir;
using dlm::testing::TinyModel;
using dlm::testing::TinyModelOptions;

class PackedLinearTest : public ::testing::TestWithParam<bool> {
protected:
  void SetUp() override {
    TinyModelOptions options;
    options.bf16 = GetParam();
    tiny = std::make_unique<TinyModel>(options);
    tiny->write(dir.file("tiny.dlm"));
    StatusOr<artifact::ArtifactReader> opened =
        artifact::ArtifactReader::open(dir.file("tiny.dlm"));
    ASSERT_TRUE(opened.isOk()) << opened.status().message();
    reader = std::make_unique<artifact::ArtifactReader>(std::move(*opened));
    StatusOr<std::shared_ptr<const model::ModelWeights>> loaded =
        model::ModelWeights::load(*reader);
    ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
    weights = *loaded;
  }

  TempDir dir;
  std::unique_ptr<TinyModel> tiny;
  std::unique_ptr<artifact::ArtifactReader> reader;
  std::shared_ptr<const model::ModelWeights> weights;
};

TEST_P(PackedLinearTest, ComputesTheProjectionOnOneThreadAndOnSeveral) {
  const std::vector<float> &values = tiny->weight("lm_head"); // [48, 16]
  std::mt19937 generator(3);
  std::normal_distribution<float> normal;
  std::vector<float> bias(48);
  for (float &b : bias)
    b = normal(generator);
  PackedGemm gemm;
  ThreadPool pool(2);
  // 48 rows, and the first 40 (a padded LM head's vocabulary).
  for (int64_t outputs : {int64_t(48), int64_t(40)}) {
    StatusOr<std::shared_ptr<const PackedLinear>> packed =
        PackedLinear::of(*weights, "lm_head", outputs);
    ASSERT_TRUE(packed.isOk()) << packed.status().message();
    const PackedLinear &w = **packed;
    ASSERT_EQ(w.outputs(), outputs);
    ASSERT_EQ(w.inputs(), 16);
    // bf16 stays bf16 (column tiles), f32 is oneDNN's layout.
    EXPECT_EQ(w.format(),
              GetParam() ? PackedLinear::Format::bf16Tiles : PackedLinear::Format::f32Packed);
    EXPECT_GE(w.bytes(), size_t(outputs * 16) * (GetParam() ? 2 : 4));
    if (GetParam())
      EXPECT_LT(w.bytes(), size_t(outputs * 16 * 4));
    // The stored matrix is not kept widened to float32 for packing.
    EXPECT_EQ(weights->find("lm_head")->data, nullptr);
    // 11000 rows: past the flops below which a GEMM runs on one thread.
    for (int64_t rows : {int64_t(1), int64_t(5), int64_t(11000)})
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
            for (int64_t k = 0; k < 16; ++k)
              expected += double(x[r * 16 + k]) * values[n * 16 + k];
            ASSERT_NEAR(y[r * outputs + n], expected, 1e-4 * (1 + std::abs(expected)))
                << "rows " << rows << " outputs " << outputs << " accumulate " << accumulate
                << " at " << r << ", " << n;
          }
      }
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

INSTANTIATE_TEST_SUITE_P(StoredAs, PackedLinearTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool> &info) {
                           return info.param ? "bf16" : "f32";
                         });

} // namespace
} // namespace dlm::cpu
