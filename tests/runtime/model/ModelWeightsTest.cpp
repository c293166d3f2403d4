#include "runtime/model/ModelWeights.h"

#include "support/FloatFormats.h"
#include "tests/runtime/model/TinyModel.h"

#include <cmath>

#include <gtest/gtest.h>

namespace dlm::model {
namespace {

using dlm::testing::TempDir;
using dlm::testing::TinyModel;
using dlm::testing::TinyModelOptions;

// Writes `tiny` and loads its weights; the reader (whose mapping f32 weights point into) lives
// as long as the fixture.
class ModelWeightsTest : public ::testing::Test {
protected:
  StatusOr<std::shared_ptr<const ModelWeights>> load(const TinyModel &tiny,
                                                     const std::string &skip = "") {
    tiny.write(path(), skip);
    StatusOr<artifact::ArtifactReader> opened = artifact::ArtifactReader::open(path());
    if (!opened)
      return opened.status();
    reader = std::make_unique<artifact::ArtifactReader>(std::move(*opened));
    return ModelWeights::load(*reader);
  }
  std::string path() const { return dir.file("tiny.dlm"); }

  TempDir dir;
  std::unique_ptr<artifact::ArtifactReader> reader;
};

// f32 weights are copied out of the mapping too, so that a file truncated later cannot fault a
// forward (artifact faults, issue 15).
TEST_F(ModelWeightsTest, F32WeightsAreCopiedOutOfTheMapping) {
  StatusOr<std::shared_ptr<const ModelWeights>> weights = load(TinyModel({}));
  ASSERT_TRUE(weights.isOk()) << weights.status().message();
  EXPECT_GT((*weights)->ownedBytes(), 0u);
  StatusOr<const HostTensor *> widened = (*weights)->widened("lm_head");
  ASSERT_TRUE(widened.isOk()) << widened.status().message();
  const float *lmHead = (*widened)->data;
  ASSERT_NE(lmHead, nullptr);
  const uint8_t *mapped = static_cast<const uint8_t *>(reader->weights().front().data);
  EXPECT_TRUE(reinterpret_cast<const uint8_t *>(lmHead) < mapped ||
              reinterpret_cast<const uint8_t *>(lmHead) >= mapped + reader->fileSize());
  const ModelDims &d = (*weights)->dims();
  EXPECT_EQ(d.vocabSize, 40);
  EXPECT_EQ(d.embeddingSize, 48);
  EXPECT_EQ(d.headDim, 6);
  EXPECT_FALSE(d.causal);
  EXPECT_EQ((*weights)->find("layers.0.q_bias"), nullptr);
  ASSERT_NE((*weights)->find("lm_head"), nullptr);
  EXPECT_EQ((*weights)->find("lm_head")->rows, 48);
  // Vectors are one row.
  ASSERT_NE((*weights)->find("final_norm"), nullptr);
  EXPECT_EQ((*weights)->find("final_norm")->rows, 1);
}

// A matrix is widened only when a kernel asks for it (a backend that packs it from the stored
// form never holds a float32 copy), once, and to the values the artifact stores.
TEST_F(ModelWeightsTest, MatricesAreWidenedOnlyWhenAskedForAndOnce) {
  TinyModelOptions options;
  options.bf16 = true;
  TinyModel tiny(options);
  StatusOr<std::shared_ptr<const ModelWeights>> weights = load(tiny);
  ASSERT_TRUE(weights.isOk()) << weights.status().message();
  const ModelWeights &w = **weights;
  EXPECT_NE(w.find("final_norm")->data, nullptr); // vectors: at load
  EXPECT_EQ(w.find("lm_head")->data, nullptr);
  ASSERT_NE(w.stored("lm_head"), nullptr);
  EXPECT_EQ(w.stored("lm_head")->dtype, artifact::DType::bf16);
  const size_t before = w.ownedBytes();
  StatusOr<const HostTensor *> first = w.widened("lm_head");
  ASSERT_TRUE(first.isOk()) << first.status().message();
  EXPECT_EQ(*first, w.find("lm_head"));
  EXPECT_EQ(w.ownedBytes(), before + 48 * 16 * sizeof(float));
  const std::vector<float> &expected = tiny.weight("lm_head");
  ASSERT_EQ(expected.size(), size_t(48 * 16));
  for (size_t i = 0; i < expected.size(); ++i)
    ASSERT_EQ((*first)->data[i], expected[i]) << i;
  StatusOr<const HostTensor *> again = w.widened("lm_head");
  ASSERT_TRUE(again.isOk());
  EXPECT_EQ((*again)->data, (*first)->data);
  EXPECT_EQ(w.ownedBytes(), before + 48 * 16 * sizeof(float));
  EXPECT_FALSE(w.widened("no_such_weight").isOk());
}

// An int8 matrix widens to q * its row's scale; without its scales the artifact is refused by
// name.
TEST_F(ModelWeightsTest, Int8MatricesWidenWithTheirRowScales) {
  TinyModelOptions options;
  options.int8 = true;
  TinyModel tiny(options);
  StatusOr<std::shared_ptr<const ModelWeights>> weights = load(tiny);
  ASSERT_TRUE(weights.isOk()) << weights.status().message();
  EXPECT_EQ((*weights)->stored("layers.0.up")->dtype, artifact::DType::i8);
  StatusOr<const HostTensor *> up = (*weights)->widened("layers.0.up");
  ASSERT_TRUE(up.isOk()) << up.status().message();
  const std::vector<float> &expected = tiny.weight("layers.0.up");
  for (size_t i = 0; i < expected.size(); ++i)
    ASSERT_EQ((*up)->data[i], expected[i]) << i;

  StatusOr<std::shared_ptr<const ModelWeights>> unscaled = load(tiny, "layers.1.down.scale");
  ASSERT_FALSE(unscaled.isOk());
  EXPECT_NE(unscaled.status().message().find(
                "i8 weight 'layers.1.down' needs its 16 row scales in a vector "
                "'layers.1.down.scale'"),
            std::string::npos)
      << unscaled.status().message();
}

// An int4 matrix widens to q * its group's scale; without its group scales the artifact is
// refused by name.
TEST_F(ModelWeightsTest, Int4MatricesWidenWithTheirGroupScales) {
  TinyModelOptions options;
  options.int4Group = 8;
  TinyModel tiny(options);
  StatusOr<std::shared_ptr<const ModelWeights>> weights = load(tiny);
  ASSERT_TRUE(weights.isOk()) << weights.status().message();
  const StoredTensor *stored = (*weights)->stored("layers.0.down");
  ASSERT_NE(stored, nullptr);
  EXPECT_EQ(stored->dtype, artifact::DType::i4);
  EXPECT_EQ(stored->groupSize, 8);
  EXPECT_EQ(stored->groups(), 3); // 24 inputs
  StatusOr<const HostTensor *> down = (*weights)->widened("layers.0.down");
  ASSERT_TRUE(down.isOk()) << down.status().message();
  const std::vector<float> &expected = tiny.weight("layers.0.down");
  for (size_t i = 0; i < expected.size(); ++i)
    ASSERT_EQ((*down)->data[i], expected[i]) << i;

  StatusOr<std::shared_ptr<const ModelWeights>> unscaled = load(tiny, "layers.1.down.scale");
  ASSERT_FALSE(unscaled.isOk());
  EXPECT_NE(unscaled.status().message().find(
                "i4 weight 'layers.1.down' needs its group scales in an f16 matrix "
                "'layers.1.down.scale' of 16 rows"),
            std::string::npos)
      << unscaled.status().message();
}

TEST(FloatFormats, F16RoundsToNearestEven) {
  for (uint32_t code = 0; code < 0x10000; ++code) {
    const float value = floatFromF16(static_cast<uint16_t>(code));
    if (!std::isnan(value))
      ASSERT_EQ(f16FromFloat(value), code) << code;
  }
  for (uint16_t code = 0; code < 0x7bff; ++code) { // every pair of finite neighbours
    const float low = floatFromF16(code), high = floatFromF16(static_cast<uint16_t>(code + 1));
    const uint16_t even = code % 2 == 0 ? code : static_cast<uint16_t>(code + 1);
    ASSERT_EQ(f16FromFloat((low + high) / 2), even) << "between codes " << code;
    ASSERT_EQ(f16FromFloat(low + (high - low) * 0.4f), code);
    ASSERT_EQ(f16FromFloat(low + (high - low) * 0.6f), code + 1);
  }
  EXPECT_EQ(f16FromFloat(65520.0f), 0x7c00); // rounds past the largest half: infinity
  EXPECT_EQ(f16FromFloat(-1e30f), 0xfc00);
  EXPECT_EQ(f16FromFloat(1e-9f), 0x0000); // below half the smallest subnormal
  EXPECT_EQ(f16FromFloat(__builtin_nanf("")) & 0x7c00, 0x7c00);
}

// A derived form is made once per weight and kind, and shared.
TEST_F(ModelWeightsTest, DerivedFormsAreMadeOnceAndShared) {
  StatusOr<std::shared_ptr<const ModelWeights>> weights = load(TinyModel({}));
  ASSERT_TRUE(weights.isOk()) << weights.status().message();
  int made = 0;
  auto make = [&](const StoredTensor &stored) -> StatusOr<std::shared_ptr<const int64_t>> {
    ++made;
    return std::make_shared<const int64_t>(stored.rows * stored.cols);
  };
  auto first = (*weights)->derived<int64_t>("lm_head", "count", make);
  auto second = (*weights)->derived<int64_t>("lm_head", "count", make);
  ASSERT_TRUE(first.isOk() && second.isOk());
  EXPECT_EQ(**first, 48 * 16);
  EXPECT_EQ(first->get(), second->get());
  EXPECT_EQ(made, 1);
  (void)(*weights)->derived<int64_t>("lm_head", "another kind", make);
  EXPECT_EQ(made, 2);
  auto failing = [](const StoredTensor &) -> StatusOr<std::shared_ptr<const int64_t>> {
    return Status::error("cannot");
  };
  StatusOr<std::shared_ptr<const int64_t>> failed =
      (*weights)->derived<int64_t>("layers.0.up", "count", failing);
  ASSERT_FALSE(failed.isOk());
  EXPECT_NE(failed.status().message().find("weight 'layers.0.up'"), std::string::npos);
  EXPECT_FALSE((*weights)->derived<int64_t>("missing", "count", make).isOk());
}

TEST_F(ModelWeightsTest, Bf16WeightsAreConvertedOnceAtLoad) {
  TinyModelOptions options;
  options.bf16 = true;
  options.qkvBias = true;
  options.qkNorm = true;
  StatusOr<std::shared_ptr<const ModelWeights>> weights = load(TinyModel(options));
  ASSERT_TRUE(weights.isOk()) << weights.status().message();
  EXPECT_GT((*weights)->ownedBytes(), 0u);
  EXPECT_NE((*weights)->find("layers.1.k_norm"), nullptr);
  EXPECT_NE((*weights)->find("layers.1.v_bias"), nullptr);
}

// The weights are what the artifact carries, whatever they are for: a missing one is found by
// the kernel record that reads it (KernelProgramTest.MissingWeightNamesTheRecordAndTheWeight).
TEST_F(ModelWeightsTest, TheArtifactsWeightsByName) {
  StatusOr<std::shared_ptr<const ModelWeights>> weights = load(TinyModel({}), "layers.1.up");
  ASSERT_TRUE(weights.isOk()) << weights.status().message();
  EXPECT_EQ((*weights)->find("layers.1.up"), nullptr);
  EXPECT_NE((*weights)->find("layers.1.down"), nullptr);
}

// The OCP FP8 spec's known points of E4M3 ("e4m3fn").
TEST(FloatFormats, E4m3KnownPoints) {
  EXPECT_EQ(floatFromE4m3(0x00), 0.0f);
  EXPECT_EQ(floatFromE4m3(0x01), 0.001953125f); // smallest subnormal, 2^-9
  EXPECT_EQ(floatFromE4m3(0x08), 0.015625f);    // smallest normal, 2^-6
  EXPECT_EQ(floatFromE4m3(0x38), 1.0f);
  EXPECT_EQ(floatFromE4m3(0x7E), 448.0f); // largest finite
  EXPECT_EQ(floatFromE4m3(0xC0), -2.0f);
  EXPECT_TRUE(std::isnan(floatFromE4m3(0x7F)));
  EXPECT_TRUE(std::isnan(floatFromE4m3(0xFF)));
}

// Encoding: every finite code decodes and encodes back to itself; a midpoint between neighbours
// goes to the even code; values past 448 saturate; NaN stays NaN; a value below half the smallest
// subnormal is a signed zero.
TEST(FloatFormats, E4m3EncodesToNearestEven) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f)
      continue;
    EXPECT_EQ(int(e4m3FromFloat(floatFromE4m3(static_cast<uint8_t>(code)))), code);
  }
  for (int code = 0; code < 0x7e; ++code) {
    const float low = floatFromE4m3(static_cast<uint8_t>(code)),
                high = floatFromE4m3(static_cast<uint8_t>(code + 1));
    const int even = code % 2 == 0 ? code : code + 1;
    EXPECT_EQ(int(e4m3FromFloat((low + high) / 2)), even) << "between codes " << code;
    EXPECT_EQ(int(e4m3FromFloat(-(low + high) / 2)), 0x80 | even) << "between codes " << code;
    EXPECT_EQ(int(e4m3FromFloat(low + (high - low) * 0.4f)), code);
    EXPECT_EQ(int(e4m3FromFloat(low + (high - low) * 0.6f)), code + 1);
  }
  EXPECT_EQ(e4m3FromFloat(1000.0f), 0x7E);
  EXPECT_EQ(e4m3FromFloat(-1e30f), 0xFE);
  EXPECT_EQ(e4m3FromFloat(464.0f), 0x7E); // the midpoint to the NaN code: saturates
  EXPECT_EQ(e4m3FromFloat(1e-4f), 0x00);
  EXPECT_EQ(e4m3FromFloat(-1e-4f), 0x80);
  EXPECT_EQ(e4m3FromFloat(__builtin_nanf("")) & 0x7F, 0x7F);
}

TEST(ModelDimsTest, ConfigProblemsAreNamed) {
  TinyModel tiny({});
  artifact::ModelConfig config = tiny.config();
  EXPECT_TRUE(modelDims(config).isOk());

  artifact::ModelConfig heads = config;
  heads.numKvHeads = 3;
  EXPECT_EQ(modelDims(heads).status().message(),
            "model config: num_kv_heads 3 does not divide num_heads 4");

  artifact::ModelConfig odd = config;
  odd.headDim = 5;
  EXPECT_EQ(modelDims(odd).status().message(),
            "model config: head_dim 5 is odd; rotary embeddings need pairs");

  artifact::ModelConfig rope = config;
  rope.extra["rope_style"] = std::string("gptj");
  EXPECT_EQ(modelDims(rope).status().message(), "not supported yet: rope_style 'gptj'");

  artifact::ModelConfig mask = config;
  mask.attentionMask = artifact::AttentionMaskKind::sliding_window;
  EXPECT_EQ(modelDims(mask).status().message(),
            "not supported yet: attention mask 'sliding_window'");

  artifact::ModelConfig small = config;
  small.embeddingSize = 10;
  EXPECT_EQ(modelDims(small).status().message(),
            "model config: embedding_size 10 is smaller than vocab_size 40");
}

TEST(ModelDimsTest, LogitShiftAndMaskKindAreRead) {
  TinyModelOptions options;
  options.causal = true;
  options.logitShift = true;
  StatusOr<ModelDims> dims = modelDims(TinyModel(options).config());
  ASSERT_TRUE(dims.isOk());
  EXPECT_TRUE(dims->causal);
  EXPECT_TRUE(dims->logitShift);
}

} // namespace
} // namespace dlm::model
