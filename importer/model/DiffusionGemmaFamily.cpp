// config.json / generation_config.json of DiffusionGemma, read as transformers 5.23 reads them
// (configuration_diffusion_gemma.py, generation_diffusion_gemma.py; the line references are in
// docs/design/diffusion-gemma.md §1).
#include "importer/model/DiffusionGemmaFamily.h"
#include "support/JsonText.h"

#include "importer/model/CanonicalWeights.h"
#include "importer/model/ConfigFields.h"
#include "importer/model/ExpertBindings.h"
#include "runtime/model/ModelSpec.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <map>

namespace dlm::importer {
namespace {

using nlohmann::json;

std::string str(int64_t value) { return std::to_string(value); }

// layer_types, or transformers' default: every sixth layer full attention; the last layer is
// always full attention.
StatusOr<std::vector<bool>> slidingLayers(const json &text, int64_t layers) {
  std::vector<bool> sliding(static_cast<size_t>(layers));
  auto it = text.find("layer_types");
  if (it == text.end() || it->is_null()) {
    for (int64_t i = 0; i < layers; ++i)
      sliding[static_cast<size_t>(i)] = (i + 1) % 6 != 0;
  } else {
    if (!it->is_array() || static_cast<int64_t>(it->size()) != layers)
      return Status::error("config.json: text_config.layer_types must list the " + str(layers) +
                           " layers' types");
    for (int64_t i = 0; i < layers; ++i) {
      const json &type = (*it)[static_cast<size_t>(i)];
      if (type == "sliding_attention")
        sliding[static_cast<size_t>(i)] = true;
      else if (type == "full_attention")
        sliding[static_cast<size_t>(i)] = false;
      else
        return Status::error("config.json: text_config.layer_types[" + str(i) +
                             "] must be sliding_attention or full_attention");
    }
  }
  sliding.back() = false;
  return sliding;
}

struct RopeOfType {
  double theta = 0;
  std::string type;
  double partialFactor = 1.0;
};

// rope_parameters[layer type], with transformers' defaults.
StatusOr<RopeOfType> ropeParameters(const json &text, const char *layerType) {
  RopeOfType rope;
  const bool sliding = std::string(layerType) == "sliding_attention";
  rope.type = sliding ? "default" : "proportional";
  rope.theta = sliding ? 1e4 : 1e6;
  rope.partialFactor = sliding ? 1.0 : 0.25;
  auto all = text.find("rope_parameters");
  if (all == text.end() || all->is_null())
    return rope;
  const std::string where = std::string("config.json: text_config.rope_parameters.") + layerType;
  if (!all->is_object() || !all->contains(layerType) || !(*all)[layerType].is_object())
    return Status::error(where + " is missing");
  ConfigFields f((*all)[layerType], where);
  const json &p = (*all)[layerType];
  if (p.contains("rope_type") && !p["rope_type"].is_string())
    return Status::error(where + ".rope_type must be a string");
  rope.type = p.value("rope_type", std::string("default"));
  DLM_ASSIGN_OR_RETURN(rope.theta, f.positiveNumberOr("rope_theta", 1e4));
  DLM_ASSIGN_OR_RETURN(rope.partialFactor, f.positiveNumberOr("partial_rotary_factor", 1.0));
  double factor;
  DLM_ASSIGN_OR_RETURN(factor, f.positiveNumberOr("factor", 1.0));
  if (factor != 1.0)
    return Status::error("not supported yet: " + where + ".factor " + jsonExcerpt(p["factor"]));
  if (rope.type != "default" && rope.type != "proportional")
    return Status::error("not supported yet: " + where + ".rope_type '" + rope.type + "'");
  if (rope.partialFactor > 1.0)
    return Status::error(where + ".partial_rotary_factor must be at most 1");
  return rope;
}

// The pairs a layer's RoPE rotates: all hd/2 for "default" (only a full rotary width is
// supported there); int(factor * hd // 2) for "proportional" (ROPE:194-266).
StatusOr<int64_t> rotatedPairs(const RopeOfType &rope, int64_t headDim) {
  if (rope.type == "default") {
    if (rope.partialFactor != 1.0)
      return Status::error("not supported yet: default RoPE with partial_rotary_factor " +
                           std::to_string(rope.partialFactor));
    return headDim / 2;
  }
  return static_cast<int64_t>(std::floor(rope.partialFactor * static_cast<double>(headDim) / 2));
}

// per_layer_config ({"05": {"head_dim": 512, "num_key_value_heads": 2}, ...}), or the
// constructor's spelling global_head_dim (default 512) + num_global_key_value_heads, which then
// applies to every full-attention layer.
Status applyLayerOverrides(const json &text, const std::vector<bool> &sliding,
                           std::vector<BlockDiffusionLayer> &layers) {
  auto perLayer = text.find("per_layer_config");
  if (perLayer != text.end() && !perLayer->is_null()) {
    if (!perLayer->is_object())
      return Status::error("config.json: text_config.per_layer_config must be an object");
    for (const auto &[key, value] : perLayer->items()) {
      const std::string where = "config.json: text_config.per_layer_config[\"" + key + "\"]";
      if (key.empty() || key.size() > 9 ||
          key.find_first_not_of("0123456789") != std::string::npos)
        return Status::error(where + ": the key must be a layer index");
      const int64_t layer = std::stoll(key);
      if (layer >= static_cast<int64_t>(layers.size()))
        return Status::error(where + ": there are only " + str(static_cast<int64_t>(layers.size())) +
                             " layers");
      if (!value.is_object())
        return Status::error(where + " must be an object");
      for (const auto &[field, unused] : value.items())
        if (field != "head_dim" && field != "num_key_value_heads")
          return Status::error("not supported yet: " + where + "." + field);
      ConfigFields f(value, where);
      BlockDiffusionLayer &l = layers[static_cast<size_t>(layer)];
      DLM_ASSIGN_OR_RETURN(l.headDim, f.positiveIntOr("head_dim", l.headDim));
      DLM_ASSIGN_OR_RETURN(l.kvHeads, f.positiveIntOr("num_key_value_heads", l.kvHeads));
      if (l.headDim > (int64_t{1} << 24) || l.kvHeads > (int64_t{1} << 24))
        return Status::error(where + ": head_dim and num_key_value_heads must be at most 2^24");
    }
    return Status::ok();
  }
  ConfigFields f(text, "config.json: text_config");
  int64_t globalHeadDim, globalKvHeads;
  DLM_ASSIGN_OR_RETURN(globalHeadDim, f.positiveIntOr("global_head_dim", 512));
  DLM_ASSIGN_OR_RETURN(globalKvHeads, f.positiveIntOr("num_global_key_value_heads", 0));
  if (globalHeadDim > (int64_t{1} << 24) || globalKvHeads > (int64_t{1} << 24))
    return Status::error("config.json: text_config.global_head_dim and "
                         "num_global_key_value_heads must be at most 2^24");
  for (size_t i = 0; i < layers.size(); ++i) {
    if (sliding[i])
      continue;
    layers[i].headDim = globalHeadDim;
    if (globalKvHeads > 0)
      layers[i].kvHeads = globalKvHeads;
  }
  return Status::ok();
}

Status checkLayer(const BlockDiffusionLayer &l, int64_t heads, size_t index) {
  const std::string where = "config.json: layer " + str(static_cast<int64_t>(index));
  if (heads % l.kvHeads != 0)
    return Status::error(where + ": " + str(heads) + " attention heads are not a multiple of " +
                         str(l.kvHeads) + " key/value heads");
  if (l.headDim % 2 != 0)
    return Status::error(where + ": head_dim " + str(l.headDim) +
                         " must be even for rotary embeddings");
  return Status::ok();
}

// DiffusionGemmaGenerationConfig.validate (GEN:159-195) and EntropyBoundSamplerConfig's check,
// over the knobs generation_config.json gave (transformers' defaults for the others).
Status checkSamplerKnobs(const artifact::Attributes &knobs) {
  auto real = [&](std::string_view name, double fallback) {
    auto it = knobs.find(std::string(name));
    return it == knobs.end() ? fallback : std::get<double>(it->second);
  };
  const double tMin = real(spec::kKnobTMin, 0.4), tMax = real(spec::kKnobTMax, 0.8);
  auto fail = [](const std::string &what) {
    return Status::error("generation_config.json: " + what);
  };
  if (tMin < 0)
    return fail("t_min must be >= 0, got " + std::to_string(tMin));
  if (tMax <= tMin)
    return fail("t_max must be greater than t_min, got " + std::to_string(tMax) + " <= " +
                std::to_string(tMin));
  if (!(real(spec::kKnobEntropyBound, 0.1) > 0))
    return fail("sampler_config.entropy_bound must be > 0");
  if (!(real(spec::kKnobConfidenceThreshold, 0.005) > 0))
    return fail("confidence_threshold must be > 0");
  return Status::ok();
}

// Sampler knobs of the diffusion-gemma decode program, from generation_config.json.
Status readGeneration(const json &generation, ModelDescription &d) {
  if (!generation.is_object())
    return Status::error("generation_config.json: not a JSON object");
  ConfigFields f(generation, "generation_config.json");
  auto knobInt = [&](const char *field, std::string_view knob) -> Status {
    if (!generation.contains(field) || generation[field].is_null())
      return Status::ok();
    DLM_ASSIGN_OR_RETURN(int64_t value, f.positiveInt(field));
    d.knobDefaults[std::string(knob)] = value;
    return Status::ok();
  };
  auto knobReal = [&](const json &object, const char *field, std::string_view knob) -> Status {
    if (!object.contains(field) || object[field].is_null())
      return Status::ok();
    if (!object[field].is_number() || !std::isfinite(object[field].get<double>()))
      return Status::error(std::string("generation_config.json: field '") + field +
                           "' must be a number");
    d.knobDefaults[std::string(knob)] = object[field].get<double>();
    return Status::ok();
  };
  DLM_RETURN_IF_ERROR(knobInt("max_new_tokens", spec::kKnobMaxNewTokens));
  DLM_RETURN_IF_ERROR(knobInt("max_denoising_steps", spec::kKnobMaxSteps));
  DLM_RETURN_IF_ERROR(knobReal(generation, "t_min", spec::kKnobTMin));
  DLM_RETURN_IF_ERROR(knobReal(generation, "t_max", spec::kKnobTMax));
  DLM_RETURN_IF_ERROR(knobReal(generation, "confidence_threshold", spec::kKnobConfidenceThreshold));
  if (generation.contains("stability_threshold") && !generation["stability_threshold"].is_null()) {
    const json &s = generation["stability_threshold"];
    if (!s.is_number_integer() || s.get<int64_t>() < 0)
      return Status::error("generation_config.json: field 'stability_threshold' must be an "
                           "integer >= 0");
    d.knobDefaults[std::string(spec::kKnobStabilityThreshold)] = s.get<int64_t>();
  }
  if (auto sampler = generation.find("sampler_config");
      sampler != generation.end() && !sampler->is_null()) {
    if (!sampler->is_object() || sampler->value("_cls_name", std::string()) !=
                                     "EntropyBoundSamplerConfig")
      return Status::error("not supported yet: generation_config.json sampler_config other than "
                           "EntropyBoundSamplerConfig");
    DLM_RETURN_IF_ERROR(knobReal(*sampler, "entropy_bound", spec::kKnobEntropyBound));
  }
  // EOS and padding come from generation_config.json only (GEN:679-680).
  DLM_ASSIGN_OR_RETURN(d.config.eosTokenIds, f.tokenIds("eos_token_id"));
  DLM_ASSIGN_OR_RETURN(d.config.padTokenId, f.tokenId("pad_token_id"));
  if (d.config.padTokenId >= d.config.vocabSize)
    return Status::error("generation_config.json: pad_token_id " +
                         std::to_string(d.config.padTokenId) + " is outside the vocabulary (" +
                         std::to_string(d.config.vocabSize) + ")");
  // max_length caps prompt + output and, with max_new_tokens left at 256, replaces it
  // (GEN:888-890, 1200-1201): a per-request rule dlm's program does not have.
  if (generation.contains("max_length") && !generation["max_length"].is_null())
    return Status::error("not supported yet: generation_config.json max_length (give "
                         "max_new_tokens instead)");
  return checkSamplerKnobs(d.knobDefaults);
}

// The tensors as save_pretrained writes them: the decoder copy of the tied stack, the encoder's
// own layer scalars (§2).
std::vector<WeightBinding> bindWeights(const artifact::ModelConfig &c,
                                       const BlockDiffusionStructure &s) {
  const int64_t h = c.hiddenSize, inner = c.intermediateSize, experts = s.experts,
                expertInner = s.expertIntermediate;
  std::vector<WeightBinding> weights;
  auto global = [&](std::string_view role, const std::string &name, std::vector<int64_t> shape) {
    weights.push_back({std::string(role), name, std::move(shape)});
  };
  global(spec::kEmbed, "model.decoder.embed_tokens.weight", {c.embeddingSize, h});
  global(spec::kFinalNorm, "model.decoder.norm.weight", {h});
  const std::string sc = "model.decoder.self_conditioning.";
  global(spec::kScPreNorm, sc + "pre_norm.weight", {h});
  global(spec::kScGate, sc + "gate_proj.weight", {inner, h});
  global(spec::kScUp, sc + "up_proj.weight", {inner, h});
  global(spec::kScDown, sc + "down_proj.weight", {h, inner});
  for (int64_t i = 0; i < c.numLayers; ++i) {
    const BlockDiffusionLayer &l = s.layers[static_cast<size_t>(i)];
    const int64_t q = c.numHeads * l.headDim, kv = l.kvHeads * l.headDim;
    const std::string p = "model.decoder.layers." + str(i) + ".";
    auto add = [&](std::string_view role, const std::string &suffix, std::vector<int64_t> shape) {
      weights.push_back({spec::layerWeightName(i, role), p + suffix, std::move(shape)});
    };
    add(spec::kAttnNorm, "input_layernorm.weight", {h});
    add(spec::kQ, "self_attn.q_proj.weight", {q, h});
    add(spec::kK, "self_attn.k_proj.weight", {kv, h});
    if (!l.valueFromKey)
      add(spec::kV, "self_attn.v_proj.weight", {kv, h});
    add(spec::kO, "self_attn.o_proj.weight", {h, q});
    add(spec::kQNorm, "self_attn.q_norm.weight", {l.headDim});
    add(spec::kKNorm, "self_attn.k_norm.weight", {l.headDim});
    add(spec::kPostAttnNorm, "post_attention_layernorm.weight", {h});
    add(spec::kMlpNorm, "pre_feedforward_layernorm.weight", {h});
    add(spec::kGate, "mlp.gate_proj.weight", {inner, h});
    add(spec::kUp, "mlp.up_proj.weight", {inner, h});
    add(spec::kDown, "mlp.down_proj.weight", {h, inner});
    add(spec::kPostMlpNorm, "post_feedforward_layernorm_1.weight", {h});
    add(spec::kPreExpertNorm, "pre_feedforward_layernorm_2.weight", {h});
    add(spec::kPostExpertNorm, "post_feedforward_layernorm_2.weight", {h});
    add(spec::kPostFfnNorm, "post_feedforward_layernorm.weight", {h});
    add(spec::kRouter, "router.proj.weight", {experts, h});
    add(spec::kRouterScale, "router.scale", {h});
    add(spec::kExpertScale, "router.per_expert_scale", {experts});
    add(spec::kExpertsGateUp, "experts.gate_up_proj", {experts, 2 * expertInner, h});
    add(spec::kExpertsDown, "experts.down_proj", {experts, h, expertInner});
    // Fused as published in bf16; LLM Compressor's FP8 may split them per expert (2-D projections
    // with their weight scales), stacked back here.
    WeightBinding &down = weights.back(), &gateUp = weights[weights.size() - 2];
    gateUp.fusedOrStacked = down.fusedOrStacked = true;
    stackExpertProjections(gateUp, down, p + "experts.", {h, experts, expertInner});
    add(spec::kLayerScalar, "layer_scalar", {1});
    weights.push_back({spec::layerWeightName(i, spec::kEncoderLayerScalar),
                       "model.encoder.language_model.layers." + str(i) + ".layer_scalar", {1}});
  }
  return weights;
}

} // namespace

StatusOr<ModelDescription> describeDiffusionGemma(const json &config, const json *generation) {
  ModelDescription d = describing("diffusion_gemma", "DiffusionGemmaForBlockDiffusion");
  artifact::ModelConfig &c = d.config;
  auto textIt = config.find("text_config");
  if (textIt == config.end() || !textIt->is_object())
    return Status::error("config.json: missing field 'text_config' (an object)");
  const json &text = *textIt;
  ConfigFields root(config);
  ConfigFields f(text, "config.json: text_config");

  bool tied;
  DLM_ASSIGN_OR_RETURN(tied, root.boolOr("tie_word_embeddings", true));
  if (!tied)
    return Status::error("not supported yet: DiffusionGemma with tie_word_embeddings = false "
                         "(separate encoder weights and LM head)");
  c.tiedEmbeddings = true;
  BlockDiffusionStructure s;
  DLM_ASSIGN_OR_RETURN(s.canvasLength, root.positiveIntOr("canvas_length", 256));

  DLM_ASSIGN_OR_RETURN(c.hiddenSize, f.positiveIntOr("hidden_size", 2304));
  DLM_ASSIGN_OR_RETURN(c.numHeads, f.positiveIntOr("num_attention_heads", 8));
  DLM_ASSIGN_OR_RETURN(c.numKvHeads, f.positiveIntOr("num_key_value_heads", 4));
  DLM_ASSIGN_OR_RETURN(c.headDim, f.positiveIntOr("head_dim", 256));
  DLM_ASSIGN_OR_RETURN(c.numLayers, f.positiveIntOr("num_hidden_layers", 30, ConfigFields::kMaxLayers));
  DLM_ASSIGN_OR_RETURN(c.intermediateSize, f.positiveIntOr("intermediate_size", 9216));
  DLM_ASSIGN_OR_RETURN(c.vocabSize, f.positiveIntOr("vocab_size", 262144));
  c.embeddingSize = c.vocabSize;
  DLM_ASSIGN_OR_RETURN(c.rmsNormEps, f.positiveNumberOr("rms_norm_eps", 1e-6));
  DLM_ASSIGN_OR_RETURN(c.maxPositions, f.positiveIntOr("max_position_embeddings", 131072));
  DLM_ASSIGN_OR_RETURN(c.bosTokenId, f.tokenId("bos_token_id"));
  DLM_ASSIGN_OR_RETURN(s.slidingWindow, f.positiveIntOr("sliding_window", 512));
  // The MoE block is always built (MOD:606-610): these are required.
  DLM_ASSIGN_OR_RETURN(s.experts, f.positiveInt("num_experts", ConfigFields::kMaxExperts));
  DLM_ASSIGN_OR_RETURN(s.topK, f.positiveInt("top_k_experts"));
  DLM_ASSIGN_OR_RETURN(s.expertIntermediate, f.positiveInt("moe_intermediate_size"));
  if (s.topK > s.experts)
    return Status::error("config.json: text_config.top_k_experts (" + str(s.topK) +
                         ") exceeds num_experts (" + str(s.experts) + ")");
  // A class attribute, not written by save_pretrained; a config.json may still override it.
  DLM_ASSIGN_OR_RETURN(s.logitSoftcap, f.positiveNumberOr("final_logit_softcapping", 30.0));
  bool attentionBias;
  DLM_ASSIGN_OR_RETURN(attentionBias, f.boolOr("attention_bias", false));
  if (attentionBias)
    return Status::error("not supported yet: DiffusionGemma with attention_bias = true");
  if (text.contains("hidden_activation") && text["hidden_activation"] != "gelu_pytorch_tanh")
    return Status::error("not supported yet: hidden_activation " +
                         jsonExcerpt(text["hidden_activation"]) + " (DiffusionGemma uses "
                         "gelu_pytorch_tanh)");
  if (text.contains("use_bidirectional_attention") && text["use_bidirectional_attention"] == "all")
    return Status::error("not supported yet: use_bidirectional_attention \"all\"");

  DLM_ASSIGN_OR_RETURN(std::vector<bool> sliding, slidingLayers(text, c.numLayers));
  s.layers.assign(static_cast<size_t>(c.numLayers), {false, c.headDim, c.numKvHeads, 0, 0, false});
  for (size_t i = 0; i < s.layers.size(); ++i)
    s.layers[i].sliding = sliding[i];
  DLM_RETURN_IF_ERROR(applyLayerOverrides(text, sliding, s.layers));
  DLM_ASSIGN_OR_RETURN(RopeOfType slidingRope, ropeParameters(text, "sliding_attention"));
  DLM_ASSIGN_OR_RETURN(RopeOfType fullRope, ropeParameters(text, "full_attention"));
  for (size_t i = 0; i < s.layers.size(); ++i) {
    BlockDiffusionLayer &l = s.layers[i];
    DLM_RETURN_IF_ERROR(checkLayer(l, c.numHeads, i));
    const RopeOfType &rope = l.sliding ? slidingRope : fullRope;
    l.ropeTheta = rope.theta;
    DLM_ASSIGN_OR_RETURN(l.rotatedPairs, rotatedPairs(rope, l.headDim));
    l.valueFromKey = !l.sliding;
  }
  c.ropeTheta = slidingRope.theta;
  // The encoder is causal, the decoder bidirectional: the kernel records say which per function.
  c.attentionMask = artifact::AttentionMaskKind::bidirectional;
  if (generation)
    DLM_RETURN_IF_ERROR(readGeneration(*generation, d));
  d.knobDefaults[std::string(spec::kKnobCanvasLength)] = s.canvasLength;
  DLM_RETURN_IF_ERROR(checkHeads(c));
  c.extra["sliding_window"] = s.slidingWindow;
  c.extra["num_experts"] = s.experts;
  c.extra["top_k_experts"] = s.topK;
  c.extra["canvas_length"] = s.canvasLength;
  d.weights = bindWeights(c, s);
  d.blockDiffusion = std::move(s);
  d.notes.push_back("the vision tower (model.encoder.vision_tower.*, "
                    "model.encoder.embed_vision.*) is not imported: dlm runs DiffusionGemma on "
                    "text");
  return d;
}

} // namespace dlm::importer
