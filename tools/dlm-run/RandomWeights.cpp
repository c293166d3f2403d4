#include "tools/dlm-run/RandomWeights.h"

#include <iostream>

namespace dlm::tools {

std::string randomWeightsNotice(const LoadedModel &model) {
  const std::optional<uint64_t> seed = model.randomWeightSeed();
  if (!seed)
    return "";
  return "weights: random (seed " + std::to_string(*seed) +
         "): outputs mean nothing, timings do";
}

void warnIfRandomWeights(const char *tool, const LoadedModel &model) {
  const std::string notice = randomWeightsNotice(model);
  if (!notice.empty())
    std::cerr << tool << ": " << notice << "\n";
}

void addRandomWeights(nlohmann::json &out, const LoadedModel &model) {
  const std::optional<uint64_t> seed = model.randomWeightSeed();
  out["random_weights"] = seed.has_value();
  if (seed)
    out["random_seed"] = *seed;
}

} // namespace dlm::tools
