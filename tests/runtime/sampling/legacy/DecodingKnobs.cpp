#include "tests/runtime/sampling/legacy/DecodingKnobs.h"

#include "runtime/model/ModelSpec.h"

#include <algorithm>
#include <cmath>

namespace dlm::sampling {

namespace {
constexpr std::string_view kPolicyLowConfidence = "low-confidence";
constexpr std::string_view kPolicyEntropyBound = "entropy-bound";
} // namespace


StatusOr<Policy> parsePolicy(std::string_view name) {
  std::string normalized(name);
  std::replace(normalized.begin(), normalized.end(), '_', '-');
  if (normalized == kPolicyLowConfidence)
    return Policy::lowConfidence;
  if (normalized == kPolicyEntropyBound)
    return Policy::entropyBound;
  return Status::error("unknown policy '" + std::string(name) + "' (expected " +
                       std::string(kPolicyLowConfidence) + " or " +
                       std::string(kPolicyEntropyBound) + ")");
}

const char *policyName(Policy policy) {
  return policy == Policy::lowConfidence ? kPolicyLowConfidence.data()
                                         : kPolicyEntropyBound.data();
}

namespace {

using artifact::AttributeValue;

Status wrongType(std::string_view key, const char *expected) {
  return Status::error("knob '" + std::string(key) + "' must be " + expected);
}

Status readInteger(std::string_view key, const AttributeValue &value, int64_t &out) {
  if (const auto *i = std::get_if<int64_t>(&value)) {
    out = *i;
    return Status::ok();
  }
  // A real with an integral value is accepted: JSON and command lines do not always keep 16
  // apart from 16.0.
  if (const auto *d = std::get_if<double>(&value); d && std::isfinite(*d) && *d == std::floor(*d)) {
    out = static_cast<int64_t>(*d);
    return Status::ok();
  }
  return wrongType(key, "an integer");
}

Status readReal(std::string_view key, const AttributeValue &value, double &out) {
  if (const auto *d = std::get_if<double>(&value)) {
    out = *d;
    return Status::ok();
  }
  if (const auto *i = std::get_if<int64_t>(&value)) {
    out = static_cast<double>(*i);
    return Status::ok();
  }
  return wrongType(key, "a number");
}

Status readText(std::string_view key, const AttributeValue &value, std::string &out) {
  if (const auto *s = std::get_if<std::string>(&value)) {
    out = *s;
    return Status::ok();
  }
  return wrongType(key, "a string");
}

Status applyKnob(std::string_view key, const AttributeValue &value, DecodingKnobs &knobs) {
  if (key == spec::kKnobPolicy) {
    std::string name;
    DLM_RETURN_IF_ERROR(readText(key, value, name));
    StatusOr<Policy> policy = parsePolicy(name);
    if (!policy)
      return policy.status();
    knobs.policy = *policy;
    return Status::ok();
  }
  if (key == spec::kKnobGenLength)
    return readInteger(key, value, knobs.genLength);
  if (key == spec::kKnobBlockLength)
    return readInteger(key, value, knobs.blockLength);
  if (key == spec::kKnobSteps)
    return readInteger(key, value, knobs.steps);
  if (key == spec::kKnobThreshold) {
    if (const auto *s = std::get_if<std::string>(&value)) {
      if (*s != spec::kThresholdNone)
        return wrongType(key, "a number or \"none\"");
      knobs.threshold.reset();
      return Status::ok();
    }
    double threshold = 0;
    DLM_RETURN_IF_ERROR(readReal(key, value, threshold));
    knobs.threshold = threshold;
    return Status::ok();
  }
  if (key == spec::kKnobStepCap) {
    if (const auto *s = std::get_if<std::string>(&value)) {
      if (*s != spec::kThresholdNone)
        return wrongType(key, "an integer or \"none\"");
      knobs.stepCap.reset();
      return Status::ok();
    }
    int64_t cap = 0;
    DLM_RETURN_IF_ERROR(readInteger(key, value, cap));
    if (cap < 1)
      return Status::error("knob 'step_cap' must be at least 1, got " + std::to_string(cap));
    knobs.stepCap = cap;
    return Status::ok();
  }
  if (key == spec::kKnobTemperature)
    return readReal(key, value, knobs.temperature);
  if (key == spec::kKnobTMin)
    return readReal(key, value, knobs.tMin);
  if (key == spec::kKnobTMax)
    return readReal(key, value, knobs.tMax);
  if (key == spec::kKnobMaxSteps)
    return readInteger(key, value, knobs.maxSteps);
  if (key == spec::kKnobEntropyBound)
    return readReal(key, value, knobs.entropyBound);
  if (key == spec::kKnobStabilityThreshold)
    return readInteger(key, value, knobs.stabilityThreshold);
  if (key == spec::kKnobConfidenceThreshold)
    return readReal(key, value, knobs.confidenceThreshold);
  if (key == spec::kKnobNoise) {
    DLM_RETURN_IF_ERROR(readText(key, value, knobs.noise));
    if (knobs.noise != spec::kNoiseMask && knobs.noise != spec::kNoiseUniform)
      return Status::error("knob 'noise' must be \"mask\" or \"uniform\", got \"" + knobs.noise +
                           "\"");
    return Status::ok();
  }
  if (key == spec::kKnobUnrollSteps) {
    DLM_RETURN_IF_ERROR(readInteger(key, value, knobs.unrollSteps));
    if (knobs.unrollSteps < 1)
      return Status::error("knob 'unroll_steps' must be at least 1, got " +
                           std::to_string(knobs.unrollSteps));
    return Status::ok();
  }
  return Status::error("unknown knob '" + std::string(key) + "'");
}

} // namespace

StatusOr<DecodingKnobs> resolveKnobs(std::string_view programPolicy,
                                     const artifact::Attributes &programKnobs,
                                     const artifact::Attributes &overrides) {
  DecodingKnobs knobs;
  if (!programPolicy.empty()) {
    StatusOr<Policy> policy = parsePolicy(programPolicy);
    if (!policy)
      return policy.status().withContext("artifact decoding program");
    knobs.policy = *policy;
  }
  for (const auto &[key, value] : programKnobs) {
    Status status = applyKnob(key, value, knobs);
    if (!status)
      return status.withContext("artifact decoding program");
  }
  for (const auto &[key, value] : overrides)
    DLM_RETURN_IF_ERROR(applyKnob(key, value, knobs));
  return knobs;
}

} // namespace dlm::sampling
