// config.json readers for the supported families and their checkpoint tensor names.
#include "importer/model/ModelFamily.h"
#include "support/JsonText.h"

#include "importer/model/CanonicalWeights.h"
#include "importer/model/ConfigFields.h"
#include "importer/model/DFlashFamily.h"
#include "importer/model/DiffusionGemmaFamily.h"
#include "importer/model/ExpertBindings.h"
#include "importer/model/LLaDA2Family.h"
#include "runtime/model/ModelSpec.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>

namespace dlm::importer {
namespace {

using nlohmann::json;

} // namespace

// Checks the relations between sizes every transformer here relies on.
Status checkHeads(const artifact::ModelConfig &c) {
  if (c.numHeads % c.numKvHeads != 0)
    return Status::error("config.json: attention heads (" + std::to_string(c.numHeads) +
                         ") must be a multiple of key/value heads (" +
                         std::to_string(c.numKvHeads) + ")");
  if (c.headDim % 2 != 0)
    return Status::error("config.json: head dimension " + std::to_string(c.headDim) +
                         " must be even for rotary embeddings");
  if (c.embeddingSize < c.vocabSize)
    return Status::error("config.json: embedding_size (" + std::to_string(c.embeddingSize) +
                         ") is smaller than vocab_size (" + std::to_string(c.vocabSize) + ")");
  for (int64_t id : c.eosTokenIds)
    if (id >= c.vocabSize)
      return Status::error("config.json: eos token id " + std::to_string(id) +
                           " is outside the vocabulary (" + std::to_string(c.vocabSize) + ")");
  if (c.maskTokenId >= c.vocabSize)
    return Status::error("config.json: mask_token_id " + std::to_string(c.maskTokenId) +
                         " is outside the vocabulary (" + std::to_string(c.vocabSize) + ")");
  return Status::ok();
}

Status readDimensions(const ConfigFields &f, const DimensionKeys &keys, artifact::ModelConfig &c) {
  DLM_ASSIGN_OR_RETURN(c.hiddenSize, f.positiveInt(keys.hidden));
  DLM_ASSIGN_OR_RETURN(c.numHeads, f.positiveInt(keys.heads));
  DLM_ASSIGN_OR_RETURN(c.numKvHeads, f.positiveIntOr(keys.kvHeads, c.numHeads));
  DLM_ASSIGN_OR_RETURN(c.numLayers, f.positiveInt(keys.layers, ConfigFields::kMaxLayers));
  DLM_ASSIGN_OR_RETURN(c.intermediateSize, f.positiveInt(keys.intermediate));
  return Status::ok();
}

namespace {

// The per-layer tensor names of one family, as printf-free suffix functions of the layer.
struct LayerNames {
  std::string prefix; // e.g. "model.layers." — the layer index follows, then a '.'
  std::string attnNorm, q, k, v, o, mlpNorm, gate, up, down;
  std::string qBias = {}, kBias = {}, vBias = {}; // empty when the family has none
  std::string qNorm = {}, kNorm = {};             // empty when the family has none
};

std::vector<WeightBinding> bindWeights(const artifact::ModelConfig &c, const LayerNames &names,
                                       const std::string &embed, const std::string &finalNorm,
                                       const std::string &lmHead) {
  const int64_t h = c.hiddenSize, qDim = c.numHeads * c.headDim,
                kvDim = c.numKvHeads * c.headDim, inner = c.intermediateSize;
  std::vector<WeightBinding> weights;
  weights.push_back({std::string(spec::kEmbed), embed, {c.embeddingSize, h}});
  for (int64_t i = 0; i < c.numLayers; ++i) {
    std::string p = names.prefix + std::to_string(i) + ".";
    auto add = [&](std::string_view role, const std::string &suffix,
                   std::vector<int64_t> shape) {
      if (!suffix.empty())
        weights.push_back({spec::layerWeightName(i, role), p + suffix, std::move(shape)});
    };
    add(spec::kAttnNorm, names.attnNorm, {h});
    add(spec::kQ, names.q, {qDim, h});
    add(spec::kK, names.k, {kvDim, h});
    add(spec::kV, names.v, {kvDim, h});
    add(spec::kQBias, names.qBias, {qDim});
    add(spec::kKBias, names.kBias, {kvDim});
    add(spec::kVBias, names.vBias, {kvDim});
    add(spec::kQNorm, names.qNorm, {c.headDim});
    add(spec::kKNorm, names.kNorm, {c.headDim});
    add(spec::kO, names.o, {h, qDim});
    add(spec::kMlpNorm, names.mlpNorm, {h});
    add(spec::kGate, names.gate, {inner, h});
    add(spec::kUp, names.up, {inner, h});
    add(spec::kDown, names.down, {h, inner});
  }
  weights.push_back({std::string(spec::kFinalNorm), finalNorm, {h}});
  if (!c.tiedEmbeddings)
    weights.push_back({std::string(spec::kLmHead), lmHead, {c.embeddingSize, h}});
  return weights;
}

// LLaDA: OLMo-style config and names under model.transformer.
StatusOr<ModelDescription> describeLLaDA(const json &j) {
  ConfigFields f(j);
  ModelDescription d = describing("llada", "LLaDAModelLM");
  artifact::ModelConfig &c = d.config;
  DLM_RETURN_IF_ERROR(readDimensions(f, kOlmoDimensions, c));
  DLM_ASSIGN_OR_RETURN(c.vocabSize, f.positiveInt("vocab_size"));
  DLM_ASSIGN_OR_RETURN(c.embeddingSize, f.positiveIntOr("embedding_size", c.vocabSize));
  DLM_ASSIGN_OR_RETURN(c.ropeTheta, f.positiveNumberOr("rope_theta", 10000.0));
  DLM_ASSIGN_OR_RETURN(c.rmsNormEps, f.positiveNumberOr("rms_norm_eps", 1e-5));
  DLM_ASSIGN_OR_RETURN(c.maskTokenId, f.tokenId("mask_token_id"));
  DLM_ASSIGN_OR_RETURN(c.eosTokenIds, f.tokenIds("eos_token_id"));
  DLM_ASSIGN_OR_RETURN(c.padTokenId, f.tokenId("pad_token_id"));
  DLM_ASSIGN_OR_RETURN(c.maxPositions, f.positiveIntOr("max_sequence_length", 4096));
  DLM_ASSIGN_OR_RETURN(c.tiedEmbeddings, f.boolOr("weight_tying", false));
  bool bias;
  DLM_ASSIGN_OR_RETURN(bias, f.boolOr("include_bias", false));
  if (bias)
    return Status::error("not supported yet: LLaDA with include_bias = true");
  if (c.hiddenSize % c.numHeads != 0)
    return Status::error("config.json: d_model (" + std::to_string(c.hiddenSize) +
                         ") must be a multiple of n_heads (" + std::to_string(c.numHeads) + ")");
  c.headDim = c.hiddenSize / c.numHeads;
  if (c.maskTokenId < 0)
    return Status::error("config.json: LLaDA needs mask_token_id");
  c.attentionMask = artifact::AttentionMaskKind::bidirectional;
  DLM_RETURN_IF_ERROR(checkHeads(c));
  LayerNames n{"model.transformer.blocks.", "attn_norm.weight", "q_proj.weight",
               "k_proj.weight", "v_proj.weight", "attn_out.weight", "ff_norm.weight",
               "ff_proj.weight", "up_proj.weight", "ff_out.weight"};
  d.weights = bindWeights(c, n, "model.transformer.wte.weight", "model.transformer.ln_f.weight",
                          "model.transformer.ff_out.weight");
  return d;
}

} // namespace

// The RoPE base: transformers 5 writes it only inside rope_parameters ({"rope_theta": ...,
// "rope_type": "default"}), transformers 4 as a top-level rope_theta; 10000 when neither is there.
// Also read by DFlashFamily.cpp.
StatusOr<double> ropeTheta(const json &j) {
  auto it = j.find("rope_parameters");
  if (it == j.end() || it->is_null())
    return ConfigFields(j).positiveNumberOr("rope_theta", 10000.0);
  if (!it->is_object())
    return Status::error("config.json: field 'rope_parameters' must be an object");
  auto typeIt = it->find("rope_type");
  if (typeIt != it->end() && !typeIt->is_string())
    return Status::error("config.json: rope_parameters.rope_type must be a string");
  const std::string type = typeIt == it->end() ? "default" : typeIt->get<std::string>();
  if (type != "default")
    return Status::error("not supported yet: rope_parameters with rope_type '" + type + "'");
  for (const auto &[key, unused] : it->items())
    if (key != "rope_type" && key != "rope_theta")
      return Status::error("not supported yet: rope_parameters." + key);
  return ConfigFields(*it, "config.json: rope_parameters").positiveNumberOr("rope_theta", 10000.0);
}

Status readSpecialTokens(const ConfigFields &f, artifact::ModelConfig &c) {
  DLM_ASSIGN_OR_RETURN(c.maskTokenId, f.tokenId("mask_token_id"));
  DLM_ASSIGN_OR_RETURN(c.eosTokenIds, f.tokenIds("eos_token_id"));
  DLM_ASSIGN_OR_RETURN(c.bosTokenId, f.tokenId("bos_token_id"));
  DLM_ASSIGN_OR_RETURN(c.padTokenId, f.tokenId("pad_token_id"));
  return Status::ok();
}

Status readHuggingFaceDecoder(const json &j, const ConfigFields &f, artifact::ModelConfig &c) {
  DLM_RETURN_IF_ERROR(readDimensions(f, kHuggingFaceDimensions, c));
  DLM_ASSIGN_OR_RETURN(c.vocabSize, f.positiveInt("vocab_size"));
  c.embeddingSize = c.vocabSize;
  if (c.hiddenSize % c.numHeads != 0 && (!j.contains("head_dim") || j["head_dim"].is_null()))
    return Status::error("config.json: hidden_size (" + std::to_string(c.hiddenSize) +
                         ") must be a multiple of num_attention_heads (" +
                         std::to_string(c.numHeads) + ") when head_dim is not given");
  DLM_ASSIGN_OR_RETURN(c.headDim, f.positiveIntOr("head_dim", c.hiddenSize / c.numHeads));
  DLM_ASSIGN_OR_RETURN(c.ropeTheta, ropeTheta(j));
  DLM_ASSIGN_OR_RETURN(c.rmsNormEps, f.positiveNumberOr("rms_norm_eps", 1e-6));
  DLM_RETURN_IF_ERROR(readSpecialTokens(f, c));
  DLM_ASSIGN_OR_RETURN(c.maxPositions, f.positiveIntOr("max_position_embeddings", 4096));
  DLM_ASSIGN_OR_RETURN(c.tiedEmbeddings, f.boolOr("tie_word_embeddings", false));
  return Status::ok();
}

namespace {

// Qwen2 / Qwen3 / Llama / Dream share Hugging Face's naming under model.layers.
struct HfFamily {
  const char *family;
  bool qkvBias, qkNorm, logitShift, bidirectional, needsMaskToken;
};

// A decoder layer's tensors under Hugging Face's names (model.layers.N.self_attn / mlp), with the
// q/k/v biases and the per-head q/k norms when the model has them.
LayerNames huggingFaceLayerNames(bool qkvBias, bool qkNorm) {
  LayerNames n{"model.layers.",
               "input_layernorm.weight",
               "self_attn.q_proj.weight",
               "self_attn.k_proj.weight",
               "self_attn.v_proj.weight",
               "self_attn.o_proj.weight",
               "post_attention_layernorm.weight",
               "mlp.gate_proj.weight",
               "mlp.up_proj.weight",
               "mlp.down_proj.weight"};
  if (qkvBias) {
    n.qBias = "self_attn.q_proj.bias";
    n.kBias = "self_attn.k_proj.bias";
    n.vBias = "self_attn.v_proj.bias";
  }
  if (qkNorm) {
    n.qNorm = "self_attn.q_norm.weight";
    n.kNorm = "self_attn.k_norm.weight";
  }
  return n;
}

StatusOr<ModelDescription> describeHfDecoder(const json &j, const std::string &architecture,
                                             const HfFamily &kind) {
  ConfigFields f(j);
  ModelDescription d = describing(kind.family, architecture);
  d.traits = {kind.qkvBias, kind.qkNorm, kind.logitShift};
  artifact::ModelConfig &c = d.config;
  DLM_RETURN_IF_ERROR(readHuggingFaceDecoder(j, f, c));
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    return Status::error("not supported yet: rope_scaling " + jsonExcerpt(j["rope_scaling"]));
  // Qwen2 / Qwen3 with use_sliding_window attend to a window in some layers: refused rather than
  // run with full attention (both imports would otherwise compute another model past the window).
  bool slidingWindow;
  DLM_ASSIGN_OR_RETURN(slidingWindow, f.boolOr("use_sliding_window", false));
  if (slidingWindow)
    return Status::error(std::string("not supported yet: ") + kind.family +
                         " with use_sliding_window = true");
  bool attentionBias;
  DLM_ASSIGN_OR_RETURN(attentionBias, f.boolOr("attention_bias", kind.qkvBias));
  if (attentionBias != kind.qkvBias)
    return Status::error(std::string("not supported yet: ") + kind.family +
                         " with attention_bias = " + (attentionBias ? "true" : "false"));
  if (kind.needsMaskToken && c.maskTokenId < 0)
    return Status::error(std::string("config.json: ") + kind.family + " needs mask_token_id");
  c.attentionMask = kind.bidirectional ? artifact::AttentionMaskKind::bidirectional
                                       : artifact::AttentionMaskKind::causal;
  DLM_RETURN_IF_ERROR(checkHeads(c));
  const LayerNames n = huggingFaceLayerNames(kind.qkvBias, kind.qkNorm);
  d.weights = bindWeights(c, n, "model.embed_tokens.weight", "model.norm.weight",
                          "lm_head.weight");
  return d;
}

// Qwen3-MoE: Qwen3's attention; a layer's MLP is routed experts unless mlp_only_layers lists it
// or it falls between decoder_sparse_step steps (transformers' Qwen3MoeDecoderLayer). The
// checkpoint stores each expert's projections apart; they are stacked into the experts' tensors
// here. Absent fields take Qwen3MoeConfig's defaults.
StatusOr<ModelDescription> describeQwen3Moe(const json &j, const std::string &architecture) {
  DLM_ASSIGN_OR_RETURN(
      ModelDescription d,
      describeHfDecoder(j, architecture, {"qwen3_moe", false, true, false, false, false}));
  ConfigFields f(j);
  const artifact::ModelConfig &c = d.config;
  SparseExperts &s = d.sparseExperts.emplace();
  // Published checkpoints say num_experts; transformers 5 maps it to num_local_experts and
  // writes that.
  int64_t published;
  DLM_ASSIGN_OR_RETURN(published, f.positiveIntOr("num_experts", 128, ConfigFields::kMaxExperts));
  DLM_ASSIGN_OR_RETURN(s.experts,
                       f.positiveIntOr("num_local_experts", published, ConfigFields::kMaxExperts));
  if (j.contains("num_experts") && s.experts != published)
    return Status::error("config.json: num_experts (" + std::to_string(published) +
                         ") and num_local_experts (" + std::to_string(s.experts) + ") disagree");
  DLM_ASSIGN_OR_RETURN(s.topK, f.positiveIntOr("num_experts_per_tok", 8));
  DLM_ASSIGN_OR_RETURN(s.expertIntermediate, f.positiveIntOr("moe_intermediate_size", 768));
  DLM_ASSIGN_OR_RETURN(s.normalizeTopK, f.boolOr("norm_topk_prob", false));
  int64_t sparseStep;
  DLM_ASSIGN_OR_RETURN(sparseStep, f.positiveIntOr("decoder_sparse_step", 1));
  std::vector<int64_t> denseLayers;
  DLM_ASSIGN_OR_RETURN(denseLayers, f.nonNegativeInts("mlp_only_layers", "layer indices", false));
  if (s.topK > s.experts)
    return Status::error("config.json: num_experts_per_tok (" + std::to_string(s.topK) +
                         ") exceeds num_experts (" + std::to_string(s.experts) + ")");
  for (int64_t layer : denseLayers)
    if (layer >= c.numLayers)
      return Status::error("config.json: mlp_only_layers names layer " + std::to_string(layer) +
                           " of " + std::to_string(c.numLayers));
  for (int64_t layer = 0; layer < c.numLayers; ++layer) {
    if (std::count(denseLayers.begin(), denseLayers.end(), layer) || (layer + 1) % sparseStep != 0)
      continue;
    unbindDenseMlp(d.weights, layer);
    bindRoutedExperts(d.weights, layer, "model.layers." + std::to_string(layer) + ".",
                      {c.hiddenSize, s.experts, s.expertIntermediate, 0}, {});
  }
  return d;
}

// LLaDA-MoE's sparse layers (moe_layer_freq: 0 a dense MLP, else experts): softmax top-k over all
// experts, the chosen probabilities as they are, the shared expert beside them when
// shared_expert_intermediate_size is not null.
Status bindLLaDAMoEExperts(const json &j, const ConfigFields &f, ModelDescription &d) {
  const artifact::ModelConfig &c = d.config;
  SparseExperts &s = d.sparseExperts.emplace();
  DLM_ASSIGN_OR_RETURN(s.experts, f.positiveInt("num_experts", ConfigFields::kMaxExperts));
  DLM_ASSIGN_OR_RETURN(s.topK, f.positiveInt("num_experts_per_tok"));
  DLM_ASSIGN_OR_RETURN(s.expertIntermediate, f.positiveInt("expert_intermediate_size"));
  if (s.topK > s.experts)
    return Status::error("config.json: num_experts_per_tok (" + std::to_string(s.topK) +
                         ") exceeds num_experts (" + std::to_string(s.experts) + ")");
  std::vector<int64_t> sparse;
  DLM_ASSIGN_OR_RETURN(sparse, f.nonNegativeInts("moe_layer_freq", "per-layer flags", false));
  if (static_cast<int64_t>(sparse.size()) != c.numLayers)
    return Status::error("config.json: moe_layer_freq has " + std::to_string(sparse.size()) +
                         " entries for " + std::to_string(c.numLayers) + " layers");
  int64_t shared = 0;
  if (!j["shared_expert_intermediate_size"].is_null()) {
    DLM_ASSIGN_OR_RETURN(shared, f.positiveInt("shared_expert_intermediate_size"));
  }
  ExpertTensorNames names;
  if (shared > 0)
    names.shared = "shared_expert.";
  for (int64_t layer = 0; layer < c.numLayers; ++layer) {
    if (sparse[static_cast<size_t>(layer)] == 0)
      continue;
    unbindDenseMlp(d.weights, layer);
    bindRoutedExperts(d.weights, layer, "model.layers." + std::to_string(layer) + ".",
                      {c.hiddenSize, s.experts, s.expertIntermediate, shared}, names);
  }
  return Status::ok();
}

// LLaDA-MoE's fields the remote code reads without a usable default (-1 placeholders or none).
constexpr const char *kLLaDAMoERequired[] = {"vocab_size",
                                             "hidden_size",
                                             "num_hidden_layers",
                                             "num_attention_heads",
                                             "dense_intermediate_size",
                                             "expert_intermediate_size",
                                             "shared_expert_intermediate_size",
                                             "rope_theta",
                                             "partial_rotary_factor",
                                             "num_experts",
                                             "num_experts_per_tok",
                                             "moe_layer_freq"};

// What LLaDA-MoE's forward does not compute the way dlm would, refused by name.
Status refuseLLaDAMoEOptions(const json &j, const ConfigFields &f) {
  for (const char *field : kLLaDAMoERequired)
    if (!j.contains(field))
      return Status::error(std::string("config.json: missing field '") + field +
                           "' (LLaDAMoEModelLM has no usable default for it)");
  std::string act = j.value("hidden_act", std::string("silu"));
  if (act != "silu")
    return Status::error("config.json: LLaDA-MoE hidden_act must be \"silu\", got \"" + act + "\"");
  for (const char *field : {"attention_bias", "moe_router_enable_expert_bias"}) {
    bool set;
    DLM_ASSIGN_OR_RETURN(set, f.boolOr(field, false));
    if (set)
      return Status::error(std::string("not supported yet: LLaDA-MoE with ") + field + " = true");
  }
  for (const char *field : {"clip_qkv", "rope_scaling"})
    if (j.contains(field) && !j[field].is_null())
      return Status::error(std::string("not supported yet: LLaDA-MoE with ") + field + " " +
                           jsonExcerpt(j[field]));
  return Status::ok();
}

// LLaDA-MoE (LLaDAMoEModelLM; tests/reference/llada_moe/README.md): LLaDA's bidirectional
// diffusion on a Qwen-style MoE decoder under Hugging Face names: QK norm (qk_layernorm), partial
// rotary, moe_layer_freq's dense (0) and sparse layers, softmax top-k routing without
// renormalisation, and a shared expert at the layer's level. head_dim is hidden / heads.
StatusOr<ModelDescription> describeLLaDAMoE(const json &j, const std::string &architecture) {
  ConfigFields f(j);
  DLM_RETURN_IF_ERROR(refuseLLaDAMoEOptions(j, f));
  ModelDescription d = describing("llada_moe", architecture);
  artifact::ModelConfig &c = d.config;
  DLM_RETURN_IF_ERROR(readDimensions(f,
                                     {"hidden_size", "num_attention_heads", "num_key_value_heads",
                                      "num_hidden_layers", "dense_intermediate_size"},
                                     c));
  DLM_ASSIGN_OR_RETURN(c.vocabSize, f.positiveInt("vocab_size"));
  c.embeddingSize = c.vocabSize;
  if (c.hiddenSize % c.numHeads != 0)
    return Status::error("config.json: hidden_size (" + std::to_string(c.hiddenSize) +
                         ") must be a multiple of num_attention_heads (" +
                         std::to_string(c.numHeads) + ")");
  c.headDim = c.hiddenSize / c.numHeads;
  int64_t statedHeadDim;
  DLM_ASSIGN_OR_RETURN(statedHeadDim, f.positiveIntOr("head_dim", c.headDim));
  if (statedHeadDim != c.headDim)
    return Status::error("config.json: head_dim " + std::to_string(statedHeadDim) +
                         " is not hidden_size / num_attention_heads (" + std::to_string(c.headDim) +
                         "), which LLaDA-MoE's attention uses");
  DLM_ASSIGN_OR_RETURN(c.ropeTheta, f.positiveNumberOr("rope_theta", 0));
  double factor;
  DLM_ASSIGN_OR_RETURN(factor, f.positiveNumberOr("partial_rotary_factor", 0));
  d.traits.rotaryDim = static_cast<int64_t>(static_cast<double>(c.headDim) * factor);
  if (factor > 1 || d.traits.rotaryDim < 2 || d.traits.rotaryDim % 2 != 0)
    return Status::error(
        "config.json: partial_rotary_factor " + jsonExcerpt(j["partial_rotary_factor"]) +
        " does not rotate an even number of the head's " + std::to_string(c.headDim) + " dims");
  DLM_ASSIGN_OR_RETURN(d.traits.qkNorm, f.boolOr("qk_layernorm", false));
  DLM_ASSIGN_OR_RETURN(c.rmsNormEps, f.positiveNumberOr("rms_norm_eps", 1e-5));
  DLM_ASSIGN_OR_RETURN(c.maxPositions, f.positiveIntOr("max_position_embeddings", 4096));
  DLM_ASSIGN_OR_RETURN(c.tiedEmbeddings, f.boolOr("tie_word_embeddings", false));
  DLM_RETURN_IF_ERROR(readSpecialTokens(f, c));
  d.maskTokenFromTokenizer = c.maskTokenId < 0;
  c.attentionMask = artifact::AttentionMaskKind::bidirectional;
  DLM_RETURN_IF_ERROR(checkHeads(c));
  const LayerNames n = huggingFaceLayerNames(false, d.traits.qkNorm);
  d.weights = bindWeights(c, n, "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight");
  DLM_RETURN_IF_ERROR(bindLLaDAMoEExperts(j, f, d));
  return d;
}

// generation_config.json's eos_token_id, when it names one, as the stop ids of `c` (the ones
// transformers' and SDAR's generate loops stop at: <|im_end|> beside <|endoftext|>).
Status readGenerationStopIds(const json *generation, artifact::ModelConfig &c) {
  if (!generation)
    return Status::ok();
  if (!generation->is_object())
    return Status::error("generation_config.json: not a JSON object");
  auto it = generation->find("eos_token_id");
  if (it == generation->end() || it->is_null())
    return Status::ok();
  DLM_ASSIGN_OR_RETURN(
      c.eosTokenIds, ConfigFields(*generation, "generation_config.json").tokenIds("eos_token_id"));
  for (int64_t id : c.eosTokenIds)
    if (id >= c.vocabSize)
      return Status::error("generation_config.json: eos token id " + std::to_string(id) +
                           " is outside the vocabulary (" + std::to_string(c.vocabSize) + ")");
  return Status::ok();
}

// SDAR's block diffusion (tests/reference/sdar/README.md) on a decoder `d` read as Qwen3 or
// Qwen3-MoE: attention block-causal over blocks of block_size laid from position 0, the mask token
// config.json's (else the tokenizer's mask_token, as SDAR's generate.py takes it), the stop ids
// generation_config.json's (SDAR's loop stops at <|im_end|> and <|endoftext|>); decoded by
// block-refinement with SDAR's evaluation settings as defaults: denoising steps = block length
// (one commit a step at least) and low_confidence_dynamic at threshold 0.95 (SGLang's
// LowConfidence is the same at those).
Status makeSdarBlockDiffusion(ModelDescription &d, const json *generation, int64_t blockSize) {
  d.config.attentionMask = artifact::AttentionMaskKind::block_causal;
  d.maskTokenFromTokenizer = d.config.maskTokenId < 0;
  DLM_RETURN_IF_ERROR(readGenerationStopIds(generation, d.config));
  d.traits.statedBlockSize = blockSize;
  d.traits.attentionBlock = blockSize;
  d.defaultPolicies = "block-refinement";
  d.knobDefaults["steps_per_block"] = blockSize;
  d.knobDefaults[std::string(spec::kKnobThreshold)] = 0.95;
  // A block's steps are steps_per_block however short the request (SDAR's loop has no bound).
  d.knobDefaults["minimal_topk"] = int64_t{0};
  return Status::ok();
}

// config.json's block_size; `what` says what its absence means.
StatusOr<int64_t> sdarBlockSize(const json &j, const std::string &what) {
  auto it = j.find("block_size");
  if (it == j.end() || it->is_null())
    return Status::error("config.json: " + what);
  return ConfigFields(j).positiveInt("block_size");
}

// SDAR-MoE (SDARMoeForCausalLM; SGLang's sdar_moe.py): Qwen3-MoE's decoder with experts in every
// layer (SGLang reads neither decoder_sparse_step nor mlp_only_layers, so a config that would make
// Qwen3-MoE dense somewhere is refused), attending and decoded as SDAR.
StatusOr<ModelDescription> describeSdarMoe(const json &j, const std::string &architecture,
                                           const json *generation) {
  int64_t blockSize;
  DLM_ASSIGN_OR_RETURN(blockSize,
                       sdarBlockSize(j, architecture + " needs block_size, the block it was "
                                                       "trained with (SDAR's published "
                                                       "checkpoints say 4)"));
  if (blockSize < 2)
    return Status::error("config.json: " + architecture +
                         " with block_size 1 (blocks of one "
                         "token) is no block diffusion");
  ConfigFields f(j);
  int64_t sparseStep;
  DLM_ASSIGN_OR_RETURN(sparseStep, f.positiveIntOr("decoder_sparse_step", 1));
  std::vector<int64_t> denseLayers;
  DLM_ASSIGN_OR_RETURN(denseLayers, f.nonNegativeInts("mlp_only_layers", "layer indices", false));
  if (sparseStep != 1 || !denseLayers.empty())
    return Status::error("not supported yet: " + architecture +
                         " with dense layers (decoder_sparse_step " + std::to_string(sparseStep) +
                         ", mlp_only_layers " + jsonExcerpt(j.value("mlp_only_layers", json())) +
                         "): SGLang's SDAR-MoE puts experts in every layer");
  DLM_ASSIGN_OR_RETURN(ModelDescription d, describeQwen3Moe(j, architecture));
  d.family = "sdar_moe";
  DLM_RETURN_IF_ERROR(makeSdarBlockDiffusion(d, generation, blockSize));
  return d;
}

// SDARForCausalLM names two kinds of checkpoint: SDAR's block diffusion (block-causal attention
// over blocks of block_size) and I-DLM's (seed 003), a Qwen3 trained causally to verify and
// propose in one forward, decoded by introspective strided decoding
// (docs/design/speculative-decoding.md). config.json's block_size tells them apart: I-DLM's is 1.
StatusOr<ModelDescription> describeSdar(const json &j, const std::string &architecture,
                                        const json *generation) {
  int64_t blockSize;
  DLM_ASSIGN_OR_RETURN(
      blockSize,
      sdarBlockSize(j, architecture + " without block_size is ambiguous: an I-DLM checkpoint "
                                      "(causal, decoded by introspective strided decoding) says "
                                      "block_size 1, an SDAR block diffusion checkpoint its block "
                                      "size; add the one it was trained with"));
  if (blockSize != 1) {
    DLM_ASSIGN_OR_RETURN(
        ModelDescription d,
        describeHfDecoder(j, architecture, {"sdar", false, true, false, false, false}));
    DLM_RETURN_IF_ERROR(makeSdarBlockDiffusion(d, generation, blockSize));
    return d;
  }
  DLM_ASSIGN_OR_RETURN(
      ModelDescription d,
      describeHfDecoder(j, architecture, {"qwen3", false, true, false, false, true}));
  d.defaultPolicies = "introspective-strided,autoregressive";
  return d;
}

// config.json, the architecture, generation_config.json when the checkpoint has one.
using Describe =
    std::function<StatusOr<ModelDescription>(const json &, const std::string &, const json *)>;

Describe hf(HfFamily kind) {
  return [kind](const json &j, const std::string &architecture, const json *) {
    return describeHfDecoder(j, architecture, kind);
  };
}

// A family that reads config.json alone.
Describe fromConfig(StatusOr<ModelDescription> (*describe)(const json &, const std::string &)) {
  return [describe](const json &j, const std::string &architecture, const json *) {
    return describe(j, architecture);
  };
}

// The decoder architectures imported from their config.json (and generation_config.json), by
// class name.
const std::map<std::string, Describe> &importedDecoders() {
  // family, qkv bias, qk norm, logit shift, bidirectional, needs a mask token
  static const std::map<std::string, Describe> decoders = {
      {"LLaDAModelLM",
       [](const json &j, const std::string &, const json *) { return describeLLaDA(j); }},
      {"DreamModel", hf({"dream", true, false, true, true, true})},
      {"Qwen2ForCausalLM", hf({"qwen2", true, false, false, false, false})},
      {"Qwen3ForCausalLM", hf({"qwen3", false, true, false, false, false})},
      {"LlamaForCausalLM", hf({"llama", false, false, false, false, false})},
      {"Qwen3MoeForCausalLM", fromConfig(describeQwen3Moe)},
      {"SDARForCausalLM", describeSdar},
      {"SDARMoeForCausalLM", describeSdarMoe},
      {"LLaDA2MoeModelLM", fromConfig(describeLLaDA2)},
      {"LLaDAMoEModelLM", fromConfig(describeLLaDAMoE)},
  };
  return decoders;
}

constexpr const char *kDiffusionGemma = "DiffusionGemmaForBlockDiffusion";
constexpr const char *kDFlashDraft = "DFlashDraftModel";
// Architectures dLLM users bring that dlm will import, but not yet (none today).
constexpr std::array<const char *, 0> kNotYet{};

} // namespace

StatusOr<std::string> configArchitecture(const json &config) {
  if (!config.is_object())
    return Status::error("config.json: not a JSON object");
  auto archIt = config.find("architectures");
  if (archIt == config.end() || !archIt->is_array() || archIt->empty() ||
      !(*archIt)[0].is_string())
    return Status::error("config.json: missing field 'architectures' (a list of class names)");
  return (*archIt)[0].get<std::string>();
}

StatusOr<ModelDescription> describeModel(const json &config, const json *generation) {
  StatusOr<std::string> named = configArchitecture(config);
  if (!named)
    return named.status();
  const std::string &architecture = *named;
  const std::map<std::string, Describe> &supported = importedDecoders();

  // A drafter is only read beside its target (DFlashFamily.cpp, describeDFlashDraft).
  if (architecture == kDFlashDraft)
    return Status::error(kDFlashNeedsTarget);
  if (architecture == kDiffusionGemma)
    return describeDiffusionGemma(config, generation);
  if (auto it = supported.find(architecture); it != supported.end())
    return it->second(config, architecture, generation);
  for (const char *name : kNotYet)
    if (architecture == name)
      return Status::error("architecture " + architecture + " is not supported yet");
  std::string known = kDiffusionGemma;
  for (const auto &[name, unused] : supported)
    known += (known.empty() ? "" : ", ") + name;
  return Status::error("unknown architecture '" + architecture + "' (supported: " + known + ")");
}

std::vector<KnownArchitecture> knownArchitectures() {
  using Support = KnownArchitecture::Support;
  std::vector<KnownArchitecture> known;
  for (const auto &[name, unused] : importedDecoders())
    known.push_back({name, Support::imported});
  known.push_back({kDiffusionGemma, Support::imported});
  known.push_back({kDFlashDraft, Support::besideItsTarget});
  for (const char *name : kNotYet)
    known.push_back({name, Support::notYet});
  return known;
}

} // namespace dlm::importer
