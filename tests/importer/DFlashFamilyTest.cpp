// DFlash drafters read against tests/reference/dflash/fixtures (made with the authors' dflash
// 0.1.0): target layer ids (explicit and build_target_layer_ids' default), block size, mask id,
// per-layer attention, the weight bindings against the safetensors headers, and each named error
// on edited copies of the configs.
#include "importer/model/CanonicalWeights.h"
#include "importer/model/DFlashFamily.h"
#include "importer/safetensors/Safetensors.h"
#include "support/TextFile.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <unistd.h>

namespace dlm::importer {
namespace {

using nlohmann::json;

const std::string kFixtures = DLM_DFLASH_FIXTURES;

json readJson(const std::string &path) {
  StatusOr<std::string> text = readTextFile(path);
  EXPECT_TRUE(text.isOk()) << path;
  return text.isOk() ? json::parse(*text) : json();
}

class DFlashFamilyTest : public ::testing::Test {
protected:
  void SetUp() override {
    StatusOr<ModelDescription> target = describeModel(readJson(kFixtures + "/target/config.json"));
    ASSERT_TRUE(target.isOk()) << target.status().message();
    target_ = std::move(*target);
    explicit_ = readJson(kFixtures + "/dflash_explicit/config.json");
    default_ = readJson(kFixtures + "/dflash_default/config.json");
  }

  DraftDescription describe(const json &config) {
    StatusOr<DraftDescription> d = describeDFlashDraft(config, target_);
    EXPECT_TRUE(d.isOk()) << d.status().message();
    return d.isOk() ? std::move(*d) : DraftDescription{};
  }
  std::string error(const json &config) {
    StatusOr<DraftDescription> d = describeDFlashDraft(config, target_);
    EXPECT_FALSE(d.isOk());
    return d.isOk() ? std::string() : d.status().message();
  }

  ModelDescription target_;
  json explicit_, default_;
};

TEST(BuildTargetLayerIds, MatchesDflash) {
  // round(2.5) = 2 in Python (half to even); half away from zero would give [1, 3, 4].
  EXPECT_EQ(buildTargetLayerIds(7, 3), (std::vector<int64_t>{1, 2, 4}));
  EXPECT_EQ(buildTargetLayerIds(36, 5), (std::vector<int64_t>{1, 9, 17, 25, 33}));
  EXPECT_EQ(buildTargetLayerIds(28, 5), (std::vector<int64_t>{1, 7, 13, 19, 25}));
  EXPECT_EQ(buildTargetLayerIds(7, 1), (std::vector<int64_t>{3}));
  EXPECT_EQ(buildTargetLayerIds(36, 2), (std::vector<int64_t>{1, 33}));
  // round(0.5) = 0, round(1.5) = 2: (6, 5) spans 1..3 in steps of 0.5.
  EXPECT_EQ(buildTargetLayerIds(6, 5), (std::vector<int64_t>{1, 2, 2, 2, 3}));
}

TEST_F(DFlashFamilyTest, ExplicitFixture) {
  DraftDescription d = describe(explicit_);
  EXPECT_EQ(d.targetLayerIds, (std::vector<int64_t>{0, 3, 6}));
  EXPECT_FALSE(d.targetLayerIdsDefaulted);
  EXPECT_EQ(d.blockSize, 4);
  EXPECT_EQ(d.maskTokenId, 255);
  EXPECT_EQ(d.config.maskTokenId, 255);
  EXPECT_EQ(d.config.hiddenSize, 64);
  EXPECT_EQ(d.config.numLayers, 2);
  EXPECT_EQ(d.config.numHeads, 4);
  EXPECT_EQ(d.config.numKvHeads, 2);
  EXPECT_EQ(d.config.headDim, 16);
  EXPECT_EQ(d.config.intermediateSize, 96);
  EXPECT_EQ(d.config.vocabSize, 256);
  EXPECT_DOUBLE_EQ(d.config.ropeTheta, 1e6);
  EXPECT_DOUBLE_EQ(d.config.rmsNormEps, 1e-6);
  EXPECT_TRUE(d.traits.qkNorm);
  EXPECT_DOUBLE_EQ(d.inputEmbeddingScale, 1.0);
  EXPECT_DOUBLE_EQ(d.outputMultiplier, 1.0);
  EXPECT_DOUBLE_EQ(d.finalLogitSoftcap, 0.0);
  EXPECT_EQ(d.slidingWindow, 0);
  EXPECT_FALSE(d.isCausal.has_value());
  ASSERT_EQ(d.layers.size(), 2u);
  for (const DraftLayer &l : d.layers) {
    EXPECT_FALSE(l.sliding);
    EXPECT_FALSE(l.causal);
    EXPECT_EQ(l.window, 0);
  }
  EXPECT_TRUE(d.notes.empty());
}

TEST_F(DFlashFamilyTest, DefaultFixture) {
  DraftDescription d = describe(default_);
  EXPECT_EQ(d.targetLayerIds, (std::vector<int64_t>{1, 2, 4}));
  EXPECT_TRUE(d.targetLayerIdsDefaulted);
  EXPECT_EQ(d.blockSize, 4); // top-level only
  EXPECT_EQ(d.maskTokenId, 255);
  EXPECT_EQ(d.config.numLayers, 3);
  EXPECT_EQ(d.config.intermediateSize, 64);
  EXPECT_EQ(d.slidingWindow, 6);
  ASSERT_EQ(d.layers.size(), 3u);
  const bool sliding[] = {true, true, false};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(d.layers[i].sliding, sliding[i]) << i;
    EXPECT_EQ(d.layers[i].causal, sliding[i]) << i;
    EXPECT_EQ(d.layers[i].window, sliding[i] ? 6 : 0) << i;
  }
}

// Every bound tensor is in the file with the bound shape, and every tensor of the file is bound.
TEST_F(DFlashFamilyTest, WeightsMatchSafetensorsHeaders) {
  for (const char *name : {"dflash_explicit", "dflash_default"}) {
    SCOPED_TRACE(name);
    const std::string dir = kFixtures + "/" + name;
    DraftDescription d = describe(readJson(dir + "/config.json"));
    StatusOr<safetensors::SafetensorsCheckpoint> file = safetensors::SafetensorsCheckpoint::open(dir);
    ASSERT_TRUE(file.isOk()) << file.status().message();
    std::map<std::string, std::vector<int64_t>> bound;
    for (const WeightBinding &w : d.weights) {
      EXPECT_EQ(w.canonicalName.rfind("draft.", 0), 0u) << w.canonicalName;
      bound[w.checkpointName] = w.shape;
      const safetensors::TensorView *view = file->find(w.checkpointName);
      ASSERT_NE(view, nullptr) << w.checkpointName;
      EXPECT_EQ(view->shape, w.shape) << w.checkpointName;
    }
    EXPECT_EQ(bound.size(), d.weights.size()) << "a tensor bound twice";
    EXPECT_EQ(file->names().size(), bound.size());
    for (const std::string &tensor : file->names())
      EXPECT_TRUE(bound.count(tensor)) << tensor << " is not bound";

    auto find = [&](const std::string &canonical) -> const WeightBinding * {
      for (const WeightBinding &w : d.weights)
        if (w.canonicalName == canonical)
          return &w;
      return nullptr;
    };
    const WeightBinding *fc = find("draft.fc");
    ASSERT_NE(fc, nullptr);
    EXPECT_EQ(fc->checkpointName, "fc.weight");
    EXPECT_EQ(fc->shape, (std::vector<int64_t>{64, 3 * 64}));
    ASSERT_NE(find("draft.hidden_norm"), nullptr);
    EXPECT_EQ(find("draft.hidden_norm")->checkpointName, "hidden_norm.weight");
    ASSERT_NE(find("draft.final_norm"), nullptr);
    EXPECT_EQ(find("draft.final_norm")->checkpointName, "norm.weight");
    ASSERT_NE(find("draft.layers.1.q"), nullptr);
    EXPECT_EQ(find("draft.layers.1.q")->checkpointName, "layers.1.self_attn.q_proj.weight");
    EXPECT_EQ(find(spec::draftWeightName(spec::layerWeightName(0, spec::kMlpNorm)))->checkpointName,
              "layers.0.post_attention_layernorm.weight");
    EXPECT_EQ(find("draft.embed"), nullptr);
    EXPECT_EQ(find("draft.lm_head"), nullptr);

    StatusOr<ImportedDraft> imported = importDFlashDraft(dir, target_);
    ASSERT_TRUE(imported.isOk()) << imported.status().message();
    EXPECT_EQ(imported->views.size(), imported->draft.weights.size());
  }
}

TEST_F(DFlashFamilyTest, DescribeModelAloneRefusesByName) {
  for (const json *config : {&explicit_, &default_}) {
    StatusOr<ModelDescription> d = describeModel(*config);
    ASSERT_FALSE(d.isOk());
    EXPECT_EQ(d.status().message(),
              "a DFlash drafter needs its target: dlmc compile TARGET --draft DRAFT");
  }
}

TEST_F(DFlashFamilyTest, NamedErrors) {
  json c = explicit_;
  c["hidden_size"] = 32;
  EXPECT_EQ(error(c), "config.json: the DFlash drafter's hidden_size (32) differs from the "
                      "target's hidden size (64); dflash 0.1.0's fc takes the target's hidden "
                      "states at the drafter's width");

  c = explicit_;
  c["num_target_layers"] = 8;
  EXPECT_EQ(error(c), "config.json: the DFlash drafter's num_target_layers (8) differs from the "
                      "target's layer count (7)");

  c = explicit_;
  c["dflash_config"]["target_layer_ids"] = {0, 3, 7};
  EXPECT_EQ(error(c), "config.json: DFlash target_layer_ids[2] = 7 is outside the target's "
                      "layers [0, 7)");
  c["dflash_config"]["target_layer_ids"] = {-1};
  EXPECT_EQ(error(c), "config.json: DFlash target_layer_ids[0] = -1 is outside the target's "
                      "layers [0, 7)");
  c["dflash_config"]["target_layer_ids"] = json::array();
  EXPECT_NE(error(c).find("'dflash_config.target_layer_ids' must be a non-empty list"),
            std::string::npos);

  c = explicit_;
  c["dflash_config"].erase("mask_token_id");
  EXPECT_EQ(error(c), "config.json: a DFlash drafter needs mask_token_id (in dflash_config or at "
                      "the top level)");
  c["mask_token_id"] = 7; // the top level serves when dflash_config has none
  EXPECT_EQ(describe(c).maskTokenId, 7);

  c = explicit_;
  c["dflash_config"]["mask_token_id"] = 256;
  EXPECT_EQ(error(c), "config.json: the DFlash mask_token_id 256 is outside the target's "
                      "vocabulary (256)");

  c = default_;
  c.erase("num_target_layers");
  EXPECT_EQ(error(c), "config.json: a DFlash drafter without target_layer_ids needs "
                      "num_target_layers");
  c["num_hidden_layers"] = 9; // default ids then fall outside a 7-layer target
  c["num_target_layers"] = 7;
  c.erase("layer_types");
  EXPECT_EQ(describe(c).targetLayerIds, buildTargetLayerIds(7, 9));

  c = explicit_;
  c["architectures"] = {"Qwen3ForCausalLM"};
  EXPECT_EQ(error(c), "config.json: architecture 'Qwen3ForCausalLM' is not a DFlash drafter "
                      "(expected DFlashDraftModel)");
  c["architectures"] = {"DFlash2DraftModel"};
  EXPECT_EQ(error(c).rfind("not supported yet: DFlash2DraftModel", 0), 0u);

  c = explicit_;
  c["attention_bias"] = true;
  EXPECT_EQ(error(c).rfind("not supported yet: DFlash drafter with attention_bias = true", 0), 0u);
  c = explicit_;
  c["hidden_act"] = "gelu";
  EXPECT_EQ(error(c).rfind("not supported yet: DFlash drafter with hidden_act", 0), 0u);
  c = explicit_;
  c["layer_types"] = {"full_attention"};
  EXPECT_EQ(error(c), "config.json: layer_types must list the 2 draft layers' types");
}

TEST_F(DFlashFamilyTest, ValueLookupOrder) {
  json c = explicit_;
  c["block_size"] = 8; // dflash_config's 4 wins
  EXPECT_EQ(describe(c).blockSize, 4);
  c["dflash_config"].erase("block_size");
  EXPECT_EQ(describe(c).blockSize, 8);
  c.erase("block_size");
  EXPECT_EQ(describe(c).blockSize, 16);

  c = explicit_;
  c["input_embedding_scale"] = 2.0;
  c["dflash_config"]["output_multiplier"] = 0.5;
  c["dflash_config"]["final_logit_softcapping"] = 30.0;
  DraftDescription d = describe(c);
  EXPECT_DOUBLE_EQ(d.inputEmbeddingScale, 2.0);
  EXPECT_DOUBLE_EQ(d.outputMultiplier, 0.5);
  EXPECT_DOUBLE_EQ(d.finalLogitSoftcap, 30.0);
  c["dflash_config"]["final_logit_softcapping"] = -1.0; // off unless > 0
  EXPECT_DOUBLE_EQ(describe(c).finalLogitSoftcap, 0.0);

  // Fields dflash 0.1.0 does not read are noted, not refused.
  c = explicit_;
  c["dflash_config"]["use_swa"] = true;
  c["dflash_config"]["attention_sink_bias"] = true;
  EXPECT_EQ(describe(c).notes.size(), 2u);
}

TEST_F(DFlashFamilyTest, LayerAttention) {
  // A top-level is_causal applies to every layer; sliding layers keep their window.
  json c = default_;
  c["is_causal"] = true;
  DraftDescription d = describe(c);
  for (const DraftLayer &l : d.layers)
    EXPECT_TRUE(l.causal);
  EXPECT_EQ(d.layers[0].window, 6);
  EXPECT_EQ(d.layers[2].window, 0);
  c["is_causal"] = false;
  d = describe(c);
  for (const DraftLayer &l : d.layers)
    EXPECT_FALSE(l.causal);
  EXPECT_EQ(d.layers[1].window, 6); // two-sided window

  // Qwen3Config nulls sliding_window without use_sliding_window: sliding layers stay causal,
  // without a window.
  c = default_;
  c["use_sliding_window"] = false;
  d = describe(c);
  EXPECT_EQ(d.slidingWindow, 0);
  EXPECT_TRUE(d.layers[0].sliding);
  EXPECT_TRUE(d.layers[0].causal);
  EXPECT_EQ(d.layers[0].window, 0);

  // Without layer_types, Qwen3Config makes layers >= max_window_layers sliding when there is a
  // window.
  c = default_;
  c.erase("layer_types");
  c["max_window_layers"] = 1;
  d = describe(c);
  EXPECT_FALSE(d.layers[0].sliding);
  EXPECT_TRUE(d.layers[1].sliding);
  EXPECT_TRUE(d.layers[2].sliding);
  EXPECT_EQ(d.layers[2].window, 6);
}

// Drafter directories with an edited config.json or an extra tensor.
class DFlashImportTest : public DFlashFamilyTest {
protected:
  void SetUp() override {
    DFlashFamilyTest::SetUp();
    std::string pattern = ::testing::TempDir() + "dlm-dflash-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void writeConfig(const json &config) {
    std::ofstream(dir_ + "/config.json") << config.dump(2);
  }
  std::string dir_;
};

TEST_F(DFlashImportTest, FcShapeIsChecked) {
  json c = explicit_;
  c["dflash_config"]["target_layer_ids"] = {0, 3};
  writeConfig(c);
  std::filesystem::copy_file(kFixtures + "/dflash_explicit/model.safetensors",
                             dir_ + "/model.safetensors");
  StatusOr<ImportedDraft> imported = importDFlashDraft(dir_, target_);
  ASSERT_FALSE(imported.isOk());
  EXPECT_EQ(imported.status().message(),
            "draft checkpoint '" + dir_ + "': tensor 'fc.weight' has shape [64, 192], expected "
            "[H, n*H] = [64, 128] (hidden 64, 2 target layers tapped)");
}

TEST_F(DFlashImportTest, DFlash2TensorsAreRefused) {
  writeConfig(explicit_);
  // A one-tensor safetensors file: header length, JSON header, 4 data bytes.
  const std::string header =
      R"({"layers.0.attention_conv.weight":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  std::ofstream out(dir_ + "/model.safetensors", std::ios::binary);
  const uint64_t length = header.size();
  out.write(reinterpret_cast<const char *>(&length), 8);
  out << header;
  out.write("\0\0\0\0", 4);
  out.close();
  StatusOr<ImportedDraft> imported = importDFlashDraft(dir_, target_);
  ASSERT_FALSE(imported.isOk());
  EXPECT_NE(imported.status().message().find(
                "not supported yet: DFlash2 tensor 'layers.0.attention_conv.weight'"),
            std::string::npos)
      << imported.status().message();
}

} // namespace
} // namespace dlm::importer
