#include "importer/model/ExpertBindings.h"

#include "importer/model/CanonicalWeights.h"

#include <algorithm>

namespace dlm::importer {

void stackExpertProjections(WeightBinding &gateUp, WeightBinding &down, const std::string &experts,
                            const ExpertSizes &sizes) {
  gateUp.partShape = {sizes.expertIntermediate, sizes.hidden};
  down.partShape = {sizes.hidden, sizes.expertIntermediate};
  for (int64_t expert = 0; expert < sizes.experts; ++expert) {
    const std::string p = experts + std::to_string(expert) + ".";
    gateUp.stackedFrom.push_back(p + "gate_proj.weight");
    gateUp.stackedFrom.push_back(p + "up_proj.weight");
    down.stackedFrom.push_back(p + "down_proj.weight");
  }
}

void bindRoutedExperts(std::vector<WeightBinding> &weights, int64_t layer,
                       const std::string &prefix, const ExpertSizes &sizes,
                       const ExpertTensorNames &names) {
  const int64_t h = sizes.hidden, e = sizes.experts, inner = sizes.expertIntermediate;
  auto add = [&](std::string_view role, const std::string &name, std::vector<int64_t> shape) {
    weights.push_back({spec::layerWeightName(layer, role), prefix + name, std::move(shape)});
  };
  add(spec::kRouter, names.router, {e, h});
  if (!names.expertBias.empty())
    add(spec::kExpertBias, names.expertBias, {e});
  WeightBinding gateUp{spec::layerWeightName(layer, spec::kExpertsGateUp),
                       prefix + names.experts + "*.{gate,up}_proj.weight",
                       {e, 2 * inner, h}};
  WeightBinding down{spec::layerWeightName(layer, spec::kExpertsDown),
                     prefix + names.experts + "*.down_proj.weight",
                     {e, h, inner}};
  stackExpertProjections(gateUp, down, prefix + names.experts, sizes);
  weights.push_back(std::move(gateUp));
  weights.push_back(std::move(down));
  if (names.shared.empty())
    return;
  const int64_t shared = sizes.sharedIntermediate;
  add(spec::kSharedGate, names.shared + "gate_proj.weight", {shared, h});
  add(spec::kSharedUp, names.shared + "up_proj.weight", {shared, h});
  add(spec::kSharedDown, names.shared + "down_proj.weight", {h, shared});
}

void unbindDenseMlp(std::vector<WeightBinding> &weights, int64_t layer) {
  weights.erase(
      std::remove_if(weights.begin(), weights.end(),
                     [&](const WeightBinding &w) {
                       return w.canonicalName == spec::layerWeightName(layer, spec::kGate) ||
                              w.canonicalName == spec::layerWeightName(layer, spec::kUp) ||
                              w.canonicalName == spec::layerWeightName(layer, spec::kDown);
                     }),
      weights.end());
}

} // namespace dlm::importer
