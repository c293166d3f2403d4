// DiffusionGemmaForBlockDiffusion checkpoints as transformers 5.23 saves them: config.json's
// text_config (per-layer head geometry, sliding window, RoPE per layer type, experts),
// generation_config.json's sampler defaults and EOS, and the decoder-copy tensor names
// (docs/design/diffusion-gemma.md §1-§2).
#pragma once

#include "importer/model/ModelFamily.h"

namespace dlm::importer {

// `generation` may be null (no generation_config.json: no EOS stop, transformers' defaults).
StatusOr<ModelDescription> describeDiffusionGemma(const nlohmann::json &config,
                                                  const nlohmann::json *generation);

// Defined in ModelFamily.cpp: the relations between sizes every transformer here relies on.
Status checkHeads(const artifact::ModelConfig &config);

} // namespace dlm::importer
