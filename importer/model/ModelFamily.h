// What the importer knows about one checkpoint architecture: how config.json is read into a
// ModelConfig, and which checkpoint tensor backs each canonical weight of the runtime.
#pragma once

#include "runtime/artifact/ArtifactFormat.h"
#include "support/Status.h"

#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dlm::importer {

// Structural switches of the transformer the runtime and the IR builder need beyond the sizes.
struct ArchitectureTraits {
  bool qkvBias = false;    // q/k/v projections carry biases (Qwen2, Dream)
  bool qkNorm = false;     // per-head RMSNorm of q and k before RoPE (Qwen3)
  bool logitShift = false; // logits row i predicts token i+1's slot from i (Dream)
  // Of each head, the first rotaryDim dims rotate, the rest pass through (LLaDA2's partial
  // rotary); 0: the whole head.
  int64_t rotaryDim = 0;
  // A block_causal model (LLaDA2): the block its attention goes by, dlmc's --block-length (the
  // compilation sets it), and the block_size config.json states (0: none).
  int64_t attentionBlock = 0;
  int64_t statedBlockSize = 0;
};

// One weight the model needs: its canonical (architecture-independent) name, the checkpoint
// tensor that holds it, and the shape that tensor must have.
struct WeightBinding {
  std::string canonicalName;
  std::string checkpointName;
  std::vector<int64_t> shape;
  // When not empty, the weight is these checkpoint tensors, each of `partShape`, stacked in
  // order (Qwen3-MoE stores each expert's projections apart; the runtime reads one [E, ...]
  // tensor), and checkpointName only names the stack; with `fusedOrStacked`, checkpointName is
  // the weight where the checkpoint holds it and the stack otherwise (DiffusionGemma's experts
  // are one fused tensor as published in bf16, split per expert where a quantizer split them).
  std::vector<std::string> stackedFrom = {};
  std::vector<int64_t> partShape = {};
  bool fusedOrStacked = false;
  // When not empty, the weight is rows [firstRow, firstRow + shape[0]) of this checkpoint tensor
  // of `partShape` (LLaDA2's fused query_key_value: q, k and v are its row blocks), and
  // checkpointName only names the slice.
  std::string rowsOf = {};
  int64_t firstRow = 0;
};

// The routed experts of a sparse decoder (Qwen3-MoE, LLaDA2): a layer has them when its router
// weight is bound, the dense MLP otherwise; and a shared expert beside them when its gate is.
struct SparseExperts {
  int64_t experts = 0;
  int64_t topK = 0;
  int64_t expertIntermediate = 0;
  bool normalizeTopK = false; // norm_topk_prob: the chosen weights renormalised to sum 1
  // LLaDA2: sigmoid scores (an expert bias, when bound, only chooses), the choice limited to the
  // topGroups best of `groups` groups, the routed sum scaled by routedScale.
  bool sigmoidScores = false;
  int64_t groups = 1;
  int64_t topGroups = 1;
  double routedScale = 1.0;
};

// One layer of a block-diffusion Gemma (DiffusionGemma): its attention geometry, which differs
// between sliding-window and full-attention layers (docs/design/diffusion-gemma.md §1.2, §3).
struct BlockDiffusionLayer {
  bool sliding = false;
  int64_t headDim = 0;
  int64_t kvHeads = 0;
  double ropeTheta = 0;
  int64_t rotatedPairs = 0;  // RoPE pairs (j, j + hd/2) that rotate; the rest pass through
  bool valueFromKey = false; // no v_proj: V is the raw k projection (full layers)
};

// What a DiffusionGemma checkpoint adds to ModelConfig: per-layer geometry, the sliding window,
// the experts, the logit soft-cap and the canvas.
struct BlockDiffusionStructure {
  std::vector<BlockDiffusionLayer> layers;
  int64_t slidingWindow = 0;
  int64_t experts = 0;
  int64_t topK = 0;
  int64_t expertIntermediate = 0;
  double logitSoftcap = 30.0;
  int64_t canvasLength = 0;
};

class ConfigFields;

// The names a config.json gives a transformer's dimensions.
struct DimensionKeys {
  const char *hidden, *heads, *kvHeads, *layers, *intermediate;
};
inline constexpr DimensionKeys kHuggingFaceDimensions{"hidden_size", "num_attention_heads",
                                                      "num_key_value_heads", "num_hidden_layers",
                                                      "intermediate_size"};
// LLaDA's OLMo-style names.
inline constexpr DimensionKeys kOlmoDimensions{"d_model", "n_heads", "n_kv_heads", "n_layers",
                                               "mlp_hidden_size"};
// Reads the hidden size, the attention heads, the key/value heads (the heads when absent), the
// layers and the MLP width into `c`, by `keys`.
Status readDimensions(const ConfigFields &f, const DimensionKeys &keys, artifact::ModelConfig &c);
// The special tokens a config.json names: mask_token_id, eos_token_id (one or a list),
// bos_token_id and pad_token_id (-1 / empty when absent).
Status readSpecialTokens(const ConfigFields &f, artifact::ModelConfig &c);
// What transformers' decoder configs (Qwen2/3, Llama, Dream, SDAR, LLaDA2) say alike: the
// dimensions, the vocabulary, head_dim (hidden / heads when absent or null), the RoPE base, the
// norm's eps (1e-6), the special tokens, max_position_embeddings (4096) and tie_word_embeddings.
Status readHuggingFaceDecoder(const nlohmann::json &config, const ConfigFields &f,
                              artifact::ModelConfig &c);

struct ModelDescription {
  // "llada", "llada2", "llada_moe", "dream", "qwen2", "qwen3", "qwen3_moe", "llama", "sdar",
  // "sdar_moe", "diffusion_gemma"
  std::string family;
  artifact::ModelConfig config;
  ArchitectureTraits traits;
  std::vector<WeightBinding> weights;
  std::optional<BlockDiffusionStructure> blockDiffusion; // DiffusionGemma only
  std::optional<SparseExperts> sparseExperts;            // Qwen3-MoE, LLaDA2
  // config.json names no mask token: the tokenizer's mask_token (tokenizer_config.json) is it,
  // as diffusers' LLaDA2 pipeline takes it (importCheckpoint resolves it).
  bool maskTokenFromTokenizer = false;
  // The policies dlmc compile embeds without --policy when the architecture names its own
  // (comma-separated, the default program first); empty: the compiler's rule.
  std::string defaultPolicies;
  // Defaults of decode-program knobs the checkpoint states (generation_config.json), by knob name.
  artifact::Attributes knobDefaults;
  // What the import left out on purpose, for the compile report ("the vision tower ...").
  std::vector<std::string> notes;
};

// Where every family's description starts: the family and the architecture its config names.
inline ModelDescription describing(std::string family, std::string architecture) {
  ModelDescription d;
  d.family = std::move(family);
  d.config.architecture = std::move(architecture);
  return d;
}

// An architecture (config.json's first `architectures` entry) dlm knows: imported, imported only
// beside a target (a DFlash drafter, dlmc compile --draft), or recognised and refused by name.
struct KnownArchitecture {
  enum class Support { imported, besideItsTarget, notYet };
  std::string name;
  Support support;
};
// Every architecture describeModel accepts or refuses by name (dlmc list architectures).
std::vector<KnownArchitecture> knownArchitectures();

// config.json's architecture: the first entry of its `architectures` list, or a named error
// (not an object, the field missing, empty or not a list of names).
StatusOr<std::string> configArchitecture(const nlohmann::json &config);

// Reads config.json (already parsed) into a description, or a named error:
// "unknown architecture 'X'", "architecture X is not supported yet", "config.json: field ...".
// `generation` is generation_config.json when the checkpoint has one (null otherwise).
StatusOr<ModelDescription> describeModel(const nlohmann::json &config,
                                         const nlohmann::json *generation = nullptr);

} // namespace dlm::importer
