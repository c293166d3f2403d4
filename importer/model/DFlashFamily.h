// DFlash drafters (DFlashDraftModel of the authors' PyPI package dflash 0.1.0, z-lab): a small
// Qwen3 stack that drafts a block of tokens from the target's hidden states. config.json is read
// as dflash/model.py reads it (tests/reference/dflash/README.md, "DFlash semantics"), checked
// against the target it drafts for, and its tensors are bound under the "draft." prefix
// (docs/design/speculative-decoding.md §2.1).
#pragma once

#include "importer/model/ModelFamily.h"
#include "importer/safetensors/Safetensors.h"

#include <optional>
#include <string>
#include <vector>

namespace dlm::importer {

// What `dlmc import` says about a DFlash drafter given alone.
inline constexpr const char *kDFlashNeedsTarget =
    "a DFlash drafter needs its target: dlmc compile TARGET --draft DRAFT";

// One draft layer's attention (model.py:363-367, mask 157-171).
struct DraftLayer {
  bool sliding = false; // layer_types[i] == "sliding_attention"
  // Keys at positions <= the query's only; false: every block query sees the whole block.
  bool causal = false;
  // 0: no window. Otherwise query - key < window, and also key - query < window when not causal.
  int64_t window = 0;
};

struct DraftDescription {
  // The drafter's geometry: hidden, heads, KV heads, head_dim, intermediate, layers, rms eps and
  // rope theta are the drafter's; vocabSize / embeddingSize are the target's (the drafter reads
  // the target's embedding table and LM head) and maskTokenId is the drafter's mask id.
  // architecture "DFlashDraftModel", attentionMask unspecified (per layer: `layers`).
  artifact::ModelConfig config;
  ArchitectureTraits traits; // qkNorm; no biases
  std::vector<DraftLayer> layers;
  // config.sliding_window as Qwen3Config keeps it (null unless use_sliding_window): 0 when none.
  int64_t slidingWindow = 0;
  // The top-level is_causal, which overrides every layer's causality when given.
  std::optional<bool> isCausal;

  int64_t blockSize = 16;
  int64_t maskTokenId = -1;
  // Target layer l means the target's hidden_states[l + 1]; fc's input is their concatenation
  // in this order.
  std::vector<int64_t> targetLayerIds;
  bool targetLayerIdsDefaulted = false; // from build_target_layer_ids
  double inputEmbeddingScale = 1.0;
  double outputMultiplier = 1.0;
  double finalLogitSoftcap = 0.0; // 0: none (dflash applies it only when > 0)

  // draft.fc [H, n*H], draft.hidden_norm [H], draft.final_norm [H], draft.layers.i.<role>.
  std::vector<WeightBinding> weights;
  std::vector<std::string> notes;
};

// dflash's build_target_layer_ids (model.py:25-34): one draft layer taps [L // 2]; n layers tap
// round(1 + i (L - 4) / (n - 1)) with Python's round half to even.
std::vector<int64_t> buildTargetLayerIds(int64_t targetLayers, int64_t draftLayers);

// Reads a DFlashDraftModel config.json (already parsed) for `target`, or a named error.
StatusOr<DraftDescription> describeDFlashDraft(const nlohmann::json &config,
                                               const ModelDescription &target);

// A drafter checkpoint directory (config.json + safetensors; no tokenizer), described for
// `target` and its tensors checked: each bound tensor present with the bound shape (fc's with a
// named error) and a usable dtype; DFlash2 tensors refused; other extra tensors ignored, as the
// target's import ignores them.
struct ImportedDraft {
  std::string directory;
  DraftDescription draft;
  std::optional<safetensors::SafetensorsCheckpoint> tensors; // always set on success
  std::vector<const safetensors::TensorView *> views;      // views[i] backs draft.weights[i]
};
StatusOr<ImportedDraft> importDFlashDraft(const std::string &directory,
                                          const ModelDescription &target);

// Defined in ModelFamily.cpp: the relations between sizes every transformer here relies on, and
// the RoPE base of a transformers config (rope_parameters, else rope_theta, else 10000).
Status checkHeads(const artifact::ModelConfig &config);
StatusOr<double> ropeTheta(const nlohmann::json &config);

} // namespace dlm::importer
