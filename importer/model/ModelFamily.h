// What the importer knows about one checkpoint architecture: how config.json is read into a
// ModelConfig, and which checkpoint tensor backs each canonical weight of the runtime.
#pragma once

#include "runtime/artifact/ArtifactFormat.h"
#include "support/Status.h"

#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <string>
#include <vector>

namespace dlm::importer {

// Structural switches of the transformer the runtime and the IR builder need beyond the sizes.
struct ArchitectureTraits {
  bool qkvBias = false;    // q/k/v projections carry biases (Qwen2, Dream)
  bool qkNorm = false;     // per-head RMSNorm of q and k before RoPE (Qwen3)
  bool logitShift = false; // logits row i predicts token i+1's slot from i (Dream)
};

// One weight the model needs: its canonical (architecture-independent) name, the checkpoint
// tensor that holds it, and the shape that tensor must have.
struct WeightBinding {
  std::string canonicalName;
  std::string checkpointName;
  std::vector<int64_t> shape;
};

struct ModelDescription {
  std::string family; // "llada", "dream", "qwen2", "qwen3", "llama"
  artifact::ModelConfig config;
  ArchitectureTraits traits;
  std::vector<WeightBinding> weights;
};

// Reads config.json (already parsed) into a description, or a named error:
// "unknown architecture 'X'", "architecture X is not supported yet", "config.json: field ...".
StatusOr<ModelDescription> describeModel(const nlohmann::json &config);

} // namespace dlm::importer
