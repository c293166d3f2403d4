// Kernel specialisations at the shapes of the models dlm targets (LLaDA-8B, Dream-7B, the
// DiffusionGemma 26B layers, their vocabularies and canvases), for the NVRTC tests: resource
// reports at these shapes are the ones that matter on a GPU.
#pragma once

#include "compiler/codegen/Kernels.h"

#include <vector>

namespace dlm::cudatest {

inline std::vector<codegen::AttentionParams> productionAttentionConfigs() {
  using codegen::MaskKind;
  return {
      {128, 32, 32, 16, MaskKind::bidirectional},         // LLaDA-8B canvas
      {128, 32, 32, 16, MaskKind::blockCausal},           // LLaDA block diffusion
      {128, 28, 4, 16, MaskKind::causal},                 // Dream-7B prefill / commit
      {256, 16, 8, 16, MaskKind::slidingWindowSymmetric}, // DiffusionGemma sliding, canvas
      {256, 16, 8, 16, MaskKind::slidingWindow},          // DiffusionGemma sliding, commit
      {512, 16, 2, 16, MaskKind::bidirectional},          // DiffusionGemma global
  };
}

inline std::vector<codegen::RmsNormParams> productionRmsNormConfigs() {
  return {{4096}, {3584}, {2816}, {128}, {256, false}};
}

inline std::vector<codegen::RopeParams> productionRopeConfigs() {
  return {{128, 0, 0, 0, 500000.0},
          {256, 0, 0, 0, 10000.0},
          {512, 512, 64, 512, 1000000.0}}; // DiffusionGemma "proportional"
}

inline std::vector<codegen::GatedActivationParams> productionGatedActivationConfigs() {
  return {{12288, codegen::Activation::silu}, {2112, codegen::Activation::geluTanh}};
}

inline std::vector<codegen::SamplerParams> productionSamplerConfigs() {
  using codegen::ElementType;
  return {{126464, ElementType::f32, 0.0, 256},
          {152064, ElementType::bf16, 0.0, 256},
          {262144, ElementType::f32, 30.0, 256}};
}

inline std::vector<codegen::AcceptParams> productionAcceptConfigs() {
  using codegen::AcceptRule;
  return {{256, AcceptRule::entropyBound, false},
          {32, AcceptRule::confidenceThreshold, true},
          {64, AcceptRule::topK, true}};
}

inline std::vector<codegen::RenoiseParams> productionRenoiseConfigs() {
  using codegen::NoiseKind;
  return {{262144, NoiseKind::uniform, false},
          {126464, NoiseKind::maskToken, false},
          {262144, NoiseKind::uniform, true}};
}

} // namespace dlm::cudatest
