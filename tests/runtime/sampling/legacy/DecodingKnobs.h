// The run-time knobs of a decoding program, resolved from three layers: built-in defaults (those
// of tests/reference/generate.py), the artifact's DecodingProgram (policy and knobs written by
// dlmc), and a request's overrides, all named as in runtime/model/ModelSpec.h.
#pragma once

#include "runtime/artifact/ArtifactFormat.h"
#include "support/Status.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dlm::sampling {

enum class Policy { lowConfidence, entropyBound };

struct DecodingKnobs {
  Policy policy = Policy::lowConfidence;
  int64_t genLength = 32;
  int64_t blockLength = 8;
  // low-confidence
  int64_t steps = 16;
  std::optional<double> threshold;
  // Threshold only: the last step of a block unmasks every candidate left (off: none).
  std::optional<int64_t> stepCap;
  double temperature = 0;
  // entropy-bound
  int64_t maxSteps = 48;
  double tMin = 0.4;
  double tMax = 0.8;
  double entropyBound = 0.1;
  int64_t stabilityThreshold = 1;
  double confidenceThreshold = 0.005;
  // "mask", "uniform" or empty (mask when the model has a mask token).
  std::string noise;
  // Steps per unrolled loop iteration (spec::kKnobUnrollSteps); 0: the backend's default.
  int64_t unrollSteps = 0;
};

// "low-confidence" / "entropy-bound" (underscores are accepted for hyphens); an error names the
// policies there are.
StatusOr<Policy> parsePolicy(std::string_view name);
const char *policyName(Policy policy);

// Defaults, then `programPolicy` (empty: keep the default) and `programKnobs`, then
// `overrides`. Errors name the knob: "unknown knob 'stepz'", "knob 'steps' must be an integer".
StatusOr<DecodingKnobs> resolveKnobs(std::string_view programPolicy,
                                     const artifact::Attributes &programKnobs,
                                     const artifact::Attributes &overrides);

} // namespace dlm::sampling
