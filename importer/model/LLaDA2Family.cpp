// LLaDA2.x: config.json read as SGLang 0.5.23's sglang/srt/models/llada2.py reads it, with its
// getattr defaults where it has them and every structural field required (the defaults of
// BailingMoeV2Config, LLaDA2's base family, are that class's, not necessarily LLaDA2's).
#include "importer/model/LLaDA2Family.h"

#include "importer/model/CanonicalWeights.h"
#include "importer/model/ConfigFields.h"
#include "importer/model/DFlashFamily.h"
#include "importer/model/ExpertBindings.h"
#include "support/JsonText.h"

#include <nlohmann/json.hpp>

#include <cmath>

namespace dlm::importer {
namespace {

using nlohmann::json;

// Fields SGLang reads as plain attributes: a published config.json has them all.
constexpr const char *kRequiredFields[] = {
    "vocab_size",          "hidden_size",       "num_hidden_layers",     "num_attention_heads",
    "num_key_value_heads", "intermediate_size", "rms_norm_eps",          "hidden_act",
    "tie_word_embeddings", "num_experts",       "first_k_dense_replace", "max_position_embeddings"};

Status checkRequired(const json &j) {
  for (const char *field : kRequiredFields)
    if (!j.contains(field))
      return Status::error(std::string("config.json: missing field '") + field +
                           "' (LLaDA2MoeModelLM reads it without a default)");
  return Status::ok();
}

// Structural options no LLaDA2 import computes yet, refused by name.
Status refuseUnsupported(const json &j, const ConfigFields &f) {
  std::string act;
  DLM_ASSIGN_OR_RETURN(act, f.textOr("hidden_act", "silu"));
  if (act != "silu")
    return Status::error("config.json: LLaDA2 hidden_act must be \"silu\", got \"" + act + "\"");
  for (const char *field : {"use_bias", "use_qkv_bias", "norm_head"}) {
    bool set;
    DLM_ASSIGN_OR_RETURN(set, f.boolOr(field, false));
    if (set)
      return Status::error(std::string("not supported yet: LLaDA2 with ") + field + " = true");
  }
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    return Status::error("not supported yet: rope_scaling " + jsonExcerpt(j["rope_scaling"]));
  // LLaDA2.2's DELETE and SPLIT tokens edit the sequence's length (SGLang's JointThresholdInDel);
  // decoded without that rule they would come out as text.
  for (const char *field : {"delete_token_id", "split_token_id"})
    if (j.contains(field) && !j[field].is_null())
      return Status::error(std::string("not supported yet: LLaDA2.2's insert/delete editing (") +
                           field + " " + jsonExcerpt(j[field]) + ")");
  if (j.contains("expert_capacity") && !j["expert_capacity"].is_null())
    return Status::error("not supported yet: LLaDA2.2's block routing (expert_capacity " +
                         jsonExcerpt(j["expert_capacity"]) + ")");
  return Status::ok();
}

// partial_rotary_factor wins over rotary_dim when both are there, as in SGLang.
StatusOr<int64_t> rotaryDim(const json &j, const ConfigFields &f, int64_t headDim) {
  int64_t rotary = headDim;
  auto factor = j.find("partial_rotary_factor");
  if (factor != j.end() && !factor->is_null()) {
    if (!factor->is_number() || !(factor->get<double>() > 0) || factor->get<double>() > 1)
      return Status::error("config.json: field 'partial_rotary_factor' must be in (0, 1], got " +
                           jsonExcerpt(*factor));
    rotary = static_cast<int64_t>(static_cast<double>(headDim) * factor->get<double>());
  } else {
    DLM_ASSIGN_OR_RETURN(rotary, f.positiveIntOr("rotary_dim", headDim));
  }
  if (rotary < 2 || rotary % 2 != 0 || rotary > headDim)
    return Status::error("config.json: the rotary dims (" + std::to_string(rotary) +
                         ") must be even and in [2, head_dim " + std::to_string(headDim) + "]");
  return rotary;
}

// The router: SGLang accepts softmax scores without an expert bias or sigmoid scores with one;
// group-limited choice (n_group, topk_group) when either is set.
Status readRouting(const ConfigFields &f, SparseExperts &s, bool &expertBias,
                   std::vector<std::string> &notes) {
  std::string scoring;
  DLM_ASSIGN_OR_RETURN(scoring, f.textOr("score_function", "softmax"));
  DLM_ASSIGN_OR_RETURN(expertBias, f.boolOr("moe_router_enable_expert_bias", false));
  if (scoring != "softmax" && scoring != "sigmoid")
    return Status::error("config.json: score_function must be \"softmax\" or \"sigmoid\", got \"" +
                         scoring + "\"");
  s.sigmoidScores = scoring == "sigmoid";
  if (s.sigmoidScores != expertBias)
    return Status::error("config.json: LLaDA2 routes with softmax scores and no expert bias or "
                         "sigmoid scores with one (moe_router_enable_expert_bias), as SGLang "
                         "requires; got score_function \"" +
                         scoring + "\" with the bias " + (expertBias ? "on" : "off"));
  int64_t groups, topGroups;
  DLM_ASSIGN_OR_RETURN(groups, f.nonNegativeIntOr("n_group", 0, ConfigFields::kMaxExperts));
  DLM_ASSIGN_OR_RETURN(topGroups, f.nonNegativeIntOr("topk_group", 0, ConfigFields::kMaxExperts));
  if (groups > 0 || topGroups > 0) {
    if (topGroups == 0 || topGroups > groups || s.experts % groups != 0)
      return Status::error("config.json: topk_group (" + std::to_string(topGroups) +
                           ") must be in [1, n_group " + std::to_string(groups) +
                           "] and n_group must divide num_experts (" + std::to_string(s.experts) +
                           ")");
    if (!s.sigmoidScores && groups > 1)
      return Status::error("not supported yet: group-limited routing with softmax scores");
    s.groups = groups;
    s.topGroups = topGroups;
  }
  if (s.topK > s.topGroups * (s.experts / s.groups))
    return Status::error("config.json: num_experts_per_tok (" + std::to_string(s.topK) +
                         ") exceeds the experts of the topk_group best groups");
  DLM_ASSIGN_OR_RETURN(s.routedScale, f.positiveNumberOr("routed_scaling_factor", 1.0));
  std::string routerType;
  DLM_ASSIGN_OR_RETURN(routerType, f.textOr("router_dtype", ""));
  if (routerType != "fp32")
    notes.push_back("the router computes in float32 (config.json's router_dtype is \"" +
                    routerType + "\": SGLang's router would compute in bf16)");
  return Status::ok();
}

struct Widths {
  int64_t hidden, qDim, kvDim, headDim, dense, expert, shared, experts;
};

void bindAttention(ModelDescription &d, int64_t layer, const std::string &p, const Widths &w,
                   bool qkNorm) {
  auto add = [&](std::string_view role, const std::string &name, std::vector<int64_t> shape) {
    d.weights.push_back({spec::layerWeightName(layer, role), p + name, std::move(shape)});
  };
  add(spec::kAttnNorm, "input_layernorm.weight", {w.hidden});
  // q, k and v are the row blocks of the fused projection, in that order.
  const std::string fused = p + "attention.query_key_value.weight";
  const std::vector<int64_t> fusedShape{w.qDim + 2 * w.kvDim, w.hidden};
  auto slice = [&](std::string_view role, const char *part, int64_t first, int64_t rows) {
    WeightBinding b{spec::layerWeightName(layer, role), fused + "[" + part + "]", {rows, w.hidden}};
    b.partShape = fusedShape;
    b.rowsOf = fused;
    b.firstRow = first;
    d.weights.push_back(std::move(b));
  };
  slice(spec::kQ, "q", 0, w.qDim);
  slice(spec::kK, "k", w.qDim, w.kvDim);
  slice(spec::kV, "v", w.qDim + w.kvDim, w.kvDim);
  if (qkNorm) {
    add(spec::kQNorm, "attention.query_layernorm.weight", {w.headDim});
    add(spec::kKNorm, "attention.key_layernorm.weight", {w.headDim});
  }
  add(spec::kO, "attention.dense.weight", {w.hidden, w.qDim});
  add(spec::kMlpNorm, "post_attention_layernorm.weight", {w.hidden});
}

void bindExperts(ModelDescription &d, int64_t layer, const std::string &p, const Widths &w,
                 bool expertBias) {
  ExpertTensorNames names;
  if (expertBias)
    names.expertBias = "mlp.gate.expert_bias";
  if (w.shared > 0)
    names.shared = "mlp.shared_experts.";
  bindRoutedExperts(d.weights, layer, p, {w.hidden, w.experts, w.expert, w.shared}, names);
}

void bindDenseMlp(ModelDescription &d, int64_t layer, const std::string &p, const Widths &w) {
  d.weights.push_back(
      {spec::layerWeightName(layer, spec::kGate), p + "mlp.gate_proj.weight", {w.dense, w.hidden}});
  d.weights.push_back(
      {spec::layerWeightName(layer, spec::kUp), p + "mlp.up_proj.weight", {w.dense, w.hidden}});
  d.weights.push_back(
      {spec::layerWeightName(layer, spec::kDown), p + "mlp.down_proj.weight", {w.hidden, w.dense}});
}

// The sizes of the experts; `firstSparse` = numLayers when the model has none.
Status readExperts(const json &j, const ConfigFields &f, ModelDescription &d, Widths &w,
                   int64_t &firstSparse, bool &expertBias) {
  DLM_ASSIGN_OR_RETURN(firstSparse,
                       f.nonNegativeIntOr("first_k_dense_replace", 0, ConfigFields::kMaxLayers));
  if (j["num_experts"].is_null()) {
    firstSparse = d.config.numLayers;
    return Status::ok();
  }
  SparseExperts &s = d.sparseExperts.emplace();
  DLM_ASSIGN_OR_RETURN(s.experts, f.positiveInt("num_experts", ConfigFields::kMaxExperts));
  DLM_ASSIGN_OR_RETURN(s.topK, f.positiveInt("num_experts_per_tok"));
  DLM_ASSIGN_OR_RETURN(s.expertIntermediate, f.positiveInt("moe_intermediate_size"));
  DLM_ASSIGN_OR_RETURN(s.normalizeTopK, f.boolOr("norm_topk_prob", false));
  if (!j.contains("norm_topk_prob"))
    return Status::error("config.json: missing field 'norm_topk_prob' (LLaDA2MoeModelLM reads "
                         "it without a default)");
  if (s.topK > s.experts)
    return Status::error("config.json: num_experts_per_tok (" + std::to_string(s.topK) +
                         ") exceeds num_experts (" + std::to_string(s.experts) + ")");
  DLM_RETURN_IF_ERROR(readRouting(f, s, expertBias, d.notes));
  int64_t sharedExperts, sharedWidth;
  DLM_ASSIGN_OR_RETURN(sharedExperts,
                       f.nonNegativeIntOr("num_shared_experts", 0, ConfigFields::kMaxExperts));
  DLM_ASSIGN_OR_RETURN(
      sharedWidth, f.positiveIntOr("moe_shared_expert_intermediate_size", s.expertIntermediate));
  w.experts = s.experts;
  w.expert = s.expertIntermediate;
  w.shared = sharedExperts * sharedWidth;
  return Status::ok();
}

} // namespace

StatusOr<ModelDescription> describeLLaDA2(const json &j, const std::string &architecture) {
  DLM_RETURN_IF_ERROR(checkRequired(j));
  ConfigFields f(j);
  DLM_RETURN_IF_ERROR(refuseUnsupported(j, f));
  ModelDescription d = describing("llada2", architecture);
  artifact::ModelConfig &c = d.config;
  DLM_RETURN_IF_ERROR(readHuggingFaceDecoder(j, f, c));
  // SGLang reads it without a default: a null one is refused, not read as 4096.
  DLM_ASSIGN_OR_RETURN(c.maxPositions, f.positiveInt("max_position_embeddings"));
  c.attentionMask = artifact::AttentionMaskKind::block_causal;
  d.defaultPolicies = "block-refinement";
  d.maskTokenFromTokenizer = c.maskTokenId < 0;
  DLM_ASSIGN_OR_RETURN(d.traits.qkNorm, f.boolOr("use_qk_norm", true));
  DLM_ASSIGN_OR_RETURN(d.traits.rotaryDim, rotaryDim(j, f, c.headDim));
  DLM_ASSIGN_OR_RETURN(d.traits.statedBlockSize, f.nonNegativeIntOr("block_size", 0));
  // The block its attention goes by until a compilation sets --block-length's: the stated one,
  // else SGLang's 32 (dlmc import builds the forward with it).
  d.traits.attentionBlock = d.traits.statedBlockSize > 0 ? d.traits.statedBlockSize : 32;
  DLM_RETURN_IF_ERROR(checkHeads(c));

  Widths w{c.hiddenSize,
           c.numHeads * c.headDim,
           c.numKvHeads * c.headDim,
           c.headDim,
           c.intermediateSize,
           0,
           0,
           0};
  int64_t firstSparse = 0;
  bool expertBias = false;
  DLM_RETURN_IF_ERROR(readExperts(j, f, d, w, firstSparse, expertBias));
  d.weights.push_back(
      {std::string(spec::kEmbed), "model.word_embeddings.weight", {c.embeddingSize, c.hiddenSize}});
  for (int64_t layer = 0; layer < c.numLayers; ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    bindAttention(d, layer, p, w, d.traits.qkNorm);
    if (layer < firstSparse)
      bindDenseMlp(d, layer, p, w);
    else
      bindExperts(d, layer, p, w, expertBias);
  }
  d.weights.push_back({std::string(spec::kFinalNorm), "model.norm.weight", {c.hiddenSize}});
  if (!c.tiedEmbeddings)
    d.weights.push_back(
        {std::string(spec::kLmHead), "lm_head.weight", {c.embeddingSize, c.hiddenSize}});
  return d;
}

} // namespace dlm::importer
