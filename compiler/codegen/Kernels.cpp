// What the generators share outside the text: the vector width rule and the names of their
// enumerations, as they appear in kernel names, specialisation records and dlm-codegen options.
#include "compiler/codegen/Kernels.h"

namespace dlm::codegen {

int vectorWidth(ElementType type, int64_t count) {
  for (int width = 16 / elementBytes(type); width > 1; width /= 2)
    if (count % width == 0)
      return width;
  return 1;
}

int elementBytes(ElementType type) { return type == ElementType::bf16 ? 2 : 4; }

std::string_view elementTypeName(ElementType type) {
  return type == ElementType::bf16 ? "bf16" : "f32";
}

std::string_view maskKindName(MaskKind kind) {
  switch (kind) {
  case MaskKind::causal:
    return "causal";
  case MaskKind::bidirectional:
    return "bidirectional";
  case MaskKind::blockCausal:
    return "block_causal";
  case MaskKind::slidingWindow:
    return "sliding_window";
  case MaskKind::slidingWindowSymmetric:
    return "sliding_window_symmetric";
  case MaskKind::bidirectionalWindow:
    return "bidirectional_window";
  }
  return "unknown";
}

std::string_view activationName(Activation activation) {
  return activation == Activation::silu ? "silu" : "gelu_tanh";
}

std::string_view acceptRuleName(AcceptRule rule) {
  switch (rule) {
  case AcceptRule::entropyBound:
    return "entropy_bound";
  case AcceptRule::confidenceThreshold:
    return "confidence_threshold";
  case AcceptRule::topK:
    return "top_k";
  }
  return "unknown";
}

std::string_view noiseKindName(NoiseKind noise) {
  return noise == NoiseKind::maskToken ? "mask" : "uniform";
}

std::string_view renoiseCandidatesName(RenoiseCandidates candidates) {
  return candidates == RenoiseCandidates::everyRejected ? "every_rejected" : "masked_only";
}

std::string_view samplerConfidenceName(SamplerConfidence confidence) {
  return confidence == SamplerConfidence::unitTemperature ? "unit_temperature" : "at_temperature";
}

} // namespace dlm::codegen
