// What the runtime tools say of a model whose weights are generated, not trained (dlmc compile
// --random-parameters, then dlm-params random): whatever it generates means nothing, how fast it
// generates it is the point. Every output of such a run says so, so that no one mistakes it for
// a real model's.
#pragma once

#include "runtime/session/Session.h"

#include <nlohmann/json.hpp>

#include <string>

namespace dlm::tools {

// "weights: random (seed 7): outputs mean nothing, timings do"; empty for trained weights.
std::string randomWeightsNotice(const LoadedModel &model);

// Prints "TOOL: <notice>" to stderr when the weights are random.
void warnIfRandomWeights(const char *tool, const LoadedModel &model);

// Adds "random_weights" (true or false) and, when true, "random_seed" to a tool's --json object.
void addRandomWeights(nlohmann::json &out, const LoadedModel &model);

} // namespace dlm::tools
