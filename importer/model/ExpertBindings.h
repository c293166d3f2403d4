// The bindings of a sparse layer's routed experts and shared expert, which the MoE families
// (Qwen3-MoE, LLaDA2, LLaDA-MoE) name alike but for their prefixes: the router [E, H], an expert
// bias [E], the experts stored one tensor per projection and expert (stacked into the
// [E, 2I, H] gate_up and [E, H, I] down weights the moe record reads) and a shared expert's
// gated MLP.
#pragma once

#include "importer/model/ModelFamily.h"

#include <string>
#include <vector>

namespace dlm::importer {

// Tensor names after the layer's prefix ("model.layers.3.").
struct ExpertTensorNames {
  std::string router = "mlp.gate.weight";
  std::string expertBias = {};          // empty: the layer has none
  std::string experts = "mlp.experts."; // then "{e}.{gate,up,down}_proj.weight"
  std::string shared = {};              // empty: none; then "{gate,up,down}_proj.weight"
};

struct ExpertSizes {
  int64_t hidden = 0, experts = 0, expertIntermediate = 0;
  int64_t sharedIntermediate = 0; // 0: no shared expert
};

// Sets gateUp and down to the stacks of the experts' projections stored apart, each expert's
// "<experts><e>.{gate,up,down}_proj.weight" (`experts` the full prefix): gateUp [E, 2I, H] takes
// each expert's gate rows then its up rows, down [E, H, I].
void stackExpertProjections(WeightBinding &gateUp, WeightBinding &down, const std::string &experts,
                            const ExpertSizes &sizes);

// Binds layer `layer`'s router, expert bias, stacked experts and shared expert, the checkpoint's
// tensors under `prefix` + `names`.
void bindRoutedExperts(std::vector<WeightBinding> &weights, int64_t layer,
                       const std::string &prefix, const ExpertSizes &sizes,
                       const ExpertTensorNames &names);

// Removes layer `layer`'s dense MLP bindings (gate, up, down), which its experts replace.
void unbindDenseMlp(std::vector<WeightBinding> &weights, int64_t layer);

} // namespace dlm::importer
