// DFlashDraftModel config.json and tensors, read as dflash 0.1.0's model.py reads them (the line
// references model.py:N are those of tests/reference/dflash/README.md). The drafter's config is
// a transformers Qwen3Config, so Qwen3Config's defaults and __post_init__ apply to its Qwen3
// fields (head_dim 128, layer_types from sliding_window / max_window_layers, sliding_window kept
// only with use_sliding_window).
#include "importer/model/DFlashFamily.h"

#include "importer/model/CanonicalWeights.h"
#include "importer/model/Checkpoint.h"
#include "importer/model/ConfigFields.h"
#include "importer/model/ModelFamily.h"
#include "support/JsonText.h"
#include "support/ShapeText.h"
#include "support/TextFile.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>

namespace dlm::importer {
namespace {

using nlohmann::json;

std::string str(int64_t value) { return std::to_string(value); }

// _draft_value (model.py:127-132): dflash_config[name] when the key is there, else the
// top-level field; null when neither has it. A null value counts as absent (the default
// applies; dflash would fail on most of them).
struct DraftValue {
  const json *value = nullptr;
  std::string field; // "dflash_config.block_size" or "block_size", for errors
};

DraftValue draftValue(const json &config, const char *name) {
  auto section = config.find("dflash_config");
  if (section != config.end() && section->is_object()) {
    auto it = section->find(name);
    if (it != section->end())
      return {it->is_null() ? nullptr : &*it, std::string("dflash_config.") + name};
  }
  auto it = config.find(name);
  if (it != config.end())
    return {it->is_null() ? nullptr : &*it, name};
  return {nullptr, name};
}

Status fieldError(const DraftValue &v, const std::string &what) {
  return Status::error("config.json: field '" + v.field + "' must be " + what + ", got " +
                       v.value->dump());
}

StatusOr<int64_t> draftPositiveInt(const json &config, const char *name, int64_t fallback) {
  DraftValue v = draftValue(config, name);
  if (!v.value)
    return fallback;
  if (!v.value->is_number_integer() || v.value->get<int64_t>() <= 0)
    return fieldError(v, "a positive integer");
  return v.value->get<int64_t>();
}

StatusOr<double> draftNumber(const json &config, const char *name, double fallback) {
  DraftValue v = draftValue(config, name);
  if (!v.value)
    return fallback;
  if (!v.value->is_number() || !std::isfinite(v.value->get<double>()))
    return fieldError(v, "a finite number");
  return v.value->get<double>();
}

// Qwen3Config.__post_init__: sliding_window is kept only with use_sliding_window (default 4096),
// and layer_types, when not given, are sliding from max_window_layers on when there is a window.
Status readLayers(const json &config, int64_t numLayers, DraftDescription &d) {
  ConfigFields f(config);
  bool useSliding;
  DLM_ASSIGN_OR_RETURN(useSliding, f.boolOr("use_sliding_window", false));
  int64_t window;
  DLM_ASSIGN_OR_RETURN(window, f.positiveIntOr("sliding_window", 4096));
  d.slidingWindow = useSliding ? window : 0;
  int64_t maxWindowLayers = 28;
  if (config.contains("max_window_layers") && !config["max_window_layers"].is_null()) {
    const json &m = config["max_window_layers"];
    if (!m.is_number_integer() || m.get<int64_t>() < 0)
      return Status::error("config.json: field 'max_window_layers' must be an integer >= 0, got " +
                           jsonExcerpt(m));
    maxWindowLayers = m.get<int64_t>();
  }
  auto causalIt = config.find("is_causal"); // top-level only (getattr, model.py:365)
  if (causalIt != config.end() && !causalIt->is_null()) {
    if (!causalIt->is_boolean())
      return Status::error("config.json: field 'is_causal' must be true or false, got " +
                           causalIt->dump());
    d.isCausal = causalIt->get<bool>();
  }

  d.layers.assign(static_cast<size_t>(numLayers), DraftLayer{});
  auto types = config.find("layer_types");
  const bool given = types != config.end() && !types->is_null();
  if (given && (!types->is_array() || static_cast<int64_t>(types->size()) != numLayers))
    return Status::error("config.json: layer_types must list the " + str(numLayers) +
                         " draft layers' types");
  for (int64_t i = 0; i < numLayers; ++i) {
    DraftLayer &l = d.layers[static_cast<size_t>(i)];
    if (given) {
      const json &type = (*types)[static_cast<size_t>(i)];
      if (type == "sliding_attention")
        l.sliding = true;
      else if (type != "full_attention")
        return Status::error("not supported yet: DFlash draft layer_types[" + str(i) + "] = " +
                             jsonExcerpt(type) + " (full_attention or sliding_attention)");
    } else {
      l.sliding = d.slidingWindow > 0 && i >= maxWindowLayers;
    }
    // model.py:363-367: sliding layers are causal with config.sliding_window (possibly none),
    // full layers bidirectional without a window; a top-level is_causal decides for all.
    l.causal = d.isCausal ? *d.isCausal : l.sliding;
    l.window = l.sliding ? d.slidingWindow : 0;
  }
  return Status::ok();
}

// target_layer_ids from the config, or build_target_layer_ids of num_target_layers (read at the
// top level only, as model.py:563 does) and the draft layer count.
Status readTargetLayers(const json &config, const ModelDescription &target, DraftDescription &d) {
  const int64_t targetLayers = target.config.numLayers;
  std::optional<int64_t> numTargetLayers;
  if (config.contains("num_target_layers") && !config["num_target_layers"].is_null()) {
    DLM_ASSIGN_OR_RETURN(int64_t n, ConfigFields(config).positiveInt("num_target_layers", ConfigFields::kMaxLayers));
    numTargetLayers = n;
    if (n != targetLayers)
      return Status::error("config.json: the DFlash drafter's num_target_layers (" + str(n) +
                           ") differs from the target's layer count (" + str(targetLayers) + ")");
  }
  DraftValue ids = draftValue(config, "target_layer_ids");
  if (ids.value) {
    if (!ids.value->is_array() || ids.value->empty())
      return fieldError(ids, "a non-empty list of target layer indices");
    for (const json &id : *ids.value) {
      if (!id.is_number_integer())
        return fieldError(ids, "a non-empty list of target layer indices");
      d.targetLayerIds.push_back(id.get<int64_t>());
    }
  } else {
    if (!numTargetLayers)
      return Status::error("config.json: a DFlash drafter without target_layer_ids needs "
                           "num_target_layers");
    d.targetLayerIds = buildTargetLayerIds(*numTargetLayers, d.config.numLayers);
    d.targetLayerIdsDefaulted = true;
  }
  for (size_t i = 0; i < d.targetLayerIds.size(); ++i) {
    const int64_t id = d.targetLayerIds[i];
    if (id < 0 || id >= targetLayers)
      return Status::error("config.json: DFlash target_layer_ids[" + str(static_cast<int64_t>(i)) +
                           "] = " + str(id) + " is outside the target's layers [0, " +
                           str(targetLayers) + ")" +
                           (d.targetLayerIdsDefaulted ? " (build_target_layer_ids default)" : ""));
  }
  return Status::ok();
}

// Fields of dflash_config other implementations read (vLLM, SpecForge) but dflash 0.1.0 does not:
// they change nothing here, which the compile report says.
void noteUnreadFields(const json &config, DraftDescription &d) {
  static const char *const kUnread[] = {"use_aux_hidden_state", "causal", "use_swa",
                                        "swa_window_size", "attention_sink_bias",
                                        "target_hidden_size"};
  auto section = config.find("dflash_config");
  if (section == config.end() || !section->is_object())
    return;
  for (const char *name : kUnread)
    if (section->contains(name))
      d.notes.push_back(std::string("dflash_config.") + name + " = " +
                        jsonExcerpt((*section)[name]) +
                        " is ignored, as dflash 0.1.0 ignores it");
}

std::vector<WeightBinding> bindDraftWeights(const DraftDescription &d) {
  const artifact::ModelConfig &c = d.config;
  const int64_t h = c.hiddenSize, qDim = c.numHeads * c.headDim,
                kvDim = c.numKvHeads * c.headDim, inner = c.intermediateSize,
                taps = static_cast<int64_t>(d.targetLayerIds.size());
  std::vector<WeightBinding> weights;
  auto global = [&](std::string_view role, const std::string &name, std::vector<int64_t> shape) {
    weights.push_back({spec::draftWeightName(role), name, std::move(shape)});
  };
  global(spec::kContextFc, "fc.weight", {h, taps * h});
  global(spec::kContextNorm, "hidden_norm.weight", {h});
  for (int64_t i = 0; i < c.numLayers; ++i) {
    const std::string p = "layers." + str(i) + ".";
    auto add = [&](std::string_view role, const std::string &suffix, std::vector<int64_t> shape) {
      weights.push_back(
          {spec::draftWeightName(spec::layerWeightName(i, role)), p + suffix, std::move(shape)});
    };
    add(spec::kAttnNorm, "input_layernorm.weight", {h});
    add(spec::kQ, "self_attn.q_proj.weight", {qDim, h});
    add(spec::kK, "self_attn.k_proj.weight", {kvDim, h});
    add(spec::kV, "self_attn.v_proj.weight", {kvDim, h});
    add(spec::kQNorm, "self_attn.q_norm.weight", {c.headDim});
    add(spec::kKNorm, "self_attn.k_norm.weight", {c.headDim});
    add(spec::kO, "self_attn.o_proj.weight", {h, qDim});
    add(spec::kMlpNorm, "post_attention_layernorm.weight", {h});
    add(spec::kGate, "mlp.gate_proj.weight", {inner, h});
    add(spec::kUp, "mlp.up_proj.weight", {inner, h});
    add(spec::kDown, "mlp.down_proj.weight", {h, inner});
  }
  global(spec::kFinalNorm, "norm.weight", {h});
  return weights;
}

// DFlash2DraftModel's own modules (model.py:492-548, 630-660), which a DFlashDraftModel lacks.
bool isDFlash2Tensor(const std::string &name) {
  if (name.rfind("candidate_selector.", 0) == 0)
    return true;
  if (name.rfind("layers.", 0) != 0)
    return false;
  const size_t dot = name.find('.', 7);
  return dot != std::string::npos && (name.compare(dot, 16, ".attention_conv.") == 0 ||
                                      name.compare(dot, 10, ".mlp_conv.") == 0);
}

} // namespace

std::vector<int64_t> buildTargetLayerIds(int64_t targetLayers, int64_t draftLayers) {
  if (draftLayers == 1)
    return {targetLayers / 2}; // Python's // floors; targetLayers > 0 here
  std::vector<int64_t> ids;
  const int64_t span = (targetLayers - 3) - 1;
  for (int64_t i = 0; i < draftLayers; ++i) {
    // Python: round(start + (i * span) / (n - 1)): an exact integer product, a true division,
    // then round() to the nearest integer with ties to even. std::nearbyint under the default
    // rounding mode (FE_TONEAREST) is exactly that; std::round would take 2.5 to 3, and
    // build_target_layer_ids(7, 3) must be [1, 2, 4], not [1, 3, 4].
    const double x = 1.0 + static_cast<double>(i * span) / static_cast<double>(draftLayers - 1);
    ids.push_back(static_cast<int64_t>(std::nearbyint(x)));
  }
  return ids;
}

StatusOr<DraftDescription> describeDFlashDraft(const json &config, const ModelDescription &target) {
  StatusOr<std::string> named = configArchitecture(config);
  if (!named)
    return named.status();
  const std::string &architecture = *named;
  if (architecture == "DFlash2DraftModel")
    return Status::error("not supported yet: DFlash2DraftModel (grouped dynamic convolutions and "
                         "the candidate selector); --draft takes a DFlashDraftModel");
  if (architecture != "DFlashDraftModel")
    return Status::error("config.json: architecture '" + architecture +
                         "' is not a DFlash drafter (expected DFlashDraftModel)");
  if (config.contains("dflash_config") && !config["dflash_config"].is_null() &&
      !config["dflash_config"].is_object())
    return Status::error("config.json: field 'dflash_config' must be an object");

  DraftDescription d;
  artifact::ModelConfig &c = d.config;
  c.architecture = architecture;
  ConfigFields f(config);
  DLM_RETURN_IF_ERROR(readDimensions(f, kHuggingFaceDimensions, c));
  // Qwen3Config's default is 128, not hidden / heads: model.py:345's getattr fallback never
  // applies to a Qwen3Config.
  DLM_ASSIGN_OR_RETURN(c.headDim, f.positiveIntOr("head_dim", 128));
  DLM_ASSIGN_OR_RETURN(c.rmsNormEps, f.positiveNumberOr("rms_norm_eps", 1e-6));
  DLM_ASSIGN_OR_RETURN(c.ropeTheta, ropeTheta(config));
  DLM_ASSIGN_OR_RETURN(c.maxPositions, f.positiveIntOr("max_position_embeddings", 32768));
  if (config.contains("rope_scaling") && !config["rope_scaling"].is_null())
    return Status::error("not supported yet: rope_scaling " + jsonExcerpt(config["rope_scaling"]));
  bool attentionBias;
  DLM_ASSIGN_OR_RETURN(attentionBias, f.boolOr("attention_bias", false));
  if (attentionBias)
    return Status::error("not supported yet: DFlash drafter with attention_bias = true "
                         "(q/k/v/o biases)");
  if (config.contains("hidden_act") && !config["hidden_act"].is_null() &&
      config["hidden_act"] != "silu")
    return Status::error("not supported yet: DFlash drafter with hidden_act " +
                         jsonExcerpt(config["hidden_act"]) + " (dlm's MLP is SiLU-gated)");
  d.traits.qkNorm = true;

  // The drafter has no vocabulary of its own: it embeds with the target's table and projects
  // with the target's head.
  c.vocabSize = target.config.vocabSize;
  c.embeddingSize = target.config.embeddingSize;
  if (c.hiddenSize != target.config.hiddenSize)
    return Status::error("config.json: the DFlash drafter's hidden_size (" + str(c.hiddenSize) +
                         ") differs from the target's hidden size (" +
                         str(target.config.hiddenSize) + "); dflash 0.1.0's fc takes the "
                         "target's hidden states at the drafter's width");

  DLM_ASSIGN_OR_RETURN(d.blockSize, draftPositiveInt(config, "block_size", 16));
  DraftValue mask = draftValue(config, "mask_token_id");
  if (!mask.value)
    return Status::error("config.json: a DFlash drafter needs mask_token_id (in dflash_config or "
                         "at the top level)");
  if (!mask.value->is_number_integer() || mask.value->get<int64_t>() < 0)
    return fieldError(mask, "a non-negative token id");
  d.maskTokenId = mask.value->get<int64_t>();
  if (d.maskTokenId >= target.config.vocabSize)
    return Status::error("config.json: the DFlash mask_token_id " + str(d.maskTokenId) +
                         " is outside the target's vocabulary (" +
                         str(target.config.vocabSize) + ")");
  c.maskTokenId = d.maskTokenId;
  DLM_ASSIGN_OR_RETURN(d.inputEmbeddingScale, draftNumber(config, "input_embedding_scale", 1.0));
  DLM_ASSIGN_OR_RETURN(d.outputMultiplier, draftNumber(config, "output_multiplier", 1.0));
  double softcap;
  DLM_ASSIGN_OR_RETURN(softcap, draftNumber(config, "final_logit_softcapping", 0.0));
  d.finalLogitSoftcap = softcap > 0 ? softcap : 0.0; // model.py:602-604

  DLM_RETURN_IF_ERROR(readLayers(config, c.numLayers, d));
  DLM_RETURN_IF_ERROR(readTargetLayers(config, target, d));
  DLM_RETURN_IF_ERROR(checkHeads(c));
  if (d.slidingWindow > 0)
    c.extra["sliding_window"] = d.slidingWindow;
  noteUnreadFields(config, d);
  d.weights = bindDraftWeights(d);
  return d;
}

StatusOr<ImportedDraft> importDFlashDraft(const std::string &directory,
                                          const ModelDescription &target) {
  namespace fs = std::filesystem;
  const std::string where = "draft checkpoint '" + directory + "'";
  std::error_code ec;
  if (!fs::is_directory(fs::path(directory), ec))
    return Status::error(where + " is not a directory");
  ImportedDraft result;
  result.directory = directory;

  auto configText = readTextFile(fs::path(directory) / "config.json");
  if (!configText)
    return configText.status().withContext(where);
  StatusOr<json> config = parseJsonText(*configText, "config.json");
  if (!config)
    return config.status().withContext(where);
  auto description = describeDFlashDraft(*config, target);
  if (!description)
    return description.status().withContext(where);
  result.draft = std::move(*description);

  auto tensors = safetensors::SafetensorsCheckpoint::open(directory);
  if (!tensors)
    return tensors.status().withContext(where);
  result.tensors.emplace(std::move(*tensors));
  for (const std::string &name : result.tensors->names())
    if (isDFlash2Tensor(name))
      return Status::error(where + ": not supported yet: DFlash2 tensor '" + name +
                           "' (grouped dynamic convolutions / candidate selector)");

  const DraftDescription &d = result.draft;
  for (const WeightBinding &binding : d.weights) {
    const safetensors::TensorView *view = result.tensors->find(binding.checkpointName);
    if (!view)
      return Status::error(where + ": tensor '" + binding.checkpointName +
                           "' is missing (needed for weight '" + binding.canonicalName + "')");
    auto loaded = result.tensors->load(binding.checkpointName);
    if (!loaded)
      return loaded.status().withContext(where);
    if (view->shape != binding.shape) {
      if (binding.checkpointName == "fc.weight")
        return Status::error(
            where + ": tensor 'fc.weight' has shape " + shapeText(view->shape) +
            ", expected [H, n*H] = " + shapeText(binding.shape) + " (hidden " +
            str(d.config.hiddenSize) + ", " + str(static_cast<int64_t>(d.targetLayerIds.size())) +
            " target layers tapped)");
      return Status::error(where + ": tensor '" + binding.checkpointName + "' has shape " +
                           shapeText(view->shape) + ", expected " + shapeText(binding.shape) +
                           " from config.json");
    }
    auto dtype = weightDType(*view);
    if (!dtype)
      return dtype.status().withContext(where);
    if (*dtype == artifact::DType::fp8_e4m3)
      return Status::error(where + ": not supported yet: an FP8 drafter (tensor '" +
                           binding.checkpointName + "')");
    result.views.push_back(view);
  }
  return std::move(result);
}

} // namespace dlm::importer
