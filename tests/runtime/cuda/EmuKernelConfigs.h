// The kernel specialisations the conformance suite runs on the emulated device. The generator
// (EmuKernelGenerator.cpp) compiles exactly these into the test binary at build time; the tests
// regenerate them to learn the kernels' names. Shapes vary per test at run time (query counts,
// KV lengths, pages, rows); these are the compile-time parameters, chosen to cover every mask
// kind, GQA and MHA, every attention layout (4, 2 and 1 rows per warp; a value tile sharing the
// key tile's storage), vector and scalar access paths, f32 and bf16.
#pragma once

#include "compiler/codegen/Kernels.h"

#include <vector>

namespace dlm::cudatest {

inline std::vector<codegen::AttentionParams> attentionConfigs() {
  using codegen::MaskKind;
  return {
      {64, 4, 2, 16, MaskKind::causal},
      {64, 4, 2, 16, MaskKind::bidirectional},
      {64, 4, 2, 16, MaskKind::blockCausal},
      {64, 4, 2, 16, MaskKind::slidingWindow},
      {64, 4, 2, 16, MaskKind::slidingWindowSymmetric},
      {128, 8, 1, 32, MaskKind::bidirectional},
      {256, 4, 4, 8, MaskKind::slidingWindowSymmetric},
      {512, 2, 1, 16, MaskKind::blockCausal},
  };
}

inline std::vector<codegen::RmsNormParams> rmsNormConfigs() {
  using codegen::ElementType;
  return {
      {96, true, ElementType::bf16},  {2816, true, ElementType::bf16},
      {100, true, ElementType::f32},  {37, false, ElementType::bf16},
      {64, false, ElementType::bf16},
  };
}

inline std::vector<codegen::RopeParams> ropeConfigs() {
  using codegen::ElementType;
  return {
      {64, 0, 0, 0, 10000.0, ElementType::bf16},
      {128, 64, 0, 0, 1000000.0, ElementType::bf16},
      // "Proportional" RoPE: pairs span the whole head, only the first 16 rotate.
      {128, 128, 16, 128, 1000000.0, ElementType::bf16},
      {32, 0, 0, 0, 500000.0, ElementType::f32},
  };
}

inline std::vector<codegen::GatedActivationParams> gatedActivationConfigs() {
  using codegen::Activation;
  using codegen::ElementType;
  return {
      {200, Activation::silu, ElementType::bf16},
      {77, Activation::geluTanh, ElementType::bf16},
      {64, Activation::silu, ElementType::f32},
  };
}

inline std::vector<codegen::SamplerParams> samplerConfigs() {
  using codegen::ElementType;
  return {
      {1000, ElementType::f32, 0.0, 256},
      {4099, ElementType::bf16, 0.0, 256},
      {512, ElementType::f32, 30.0, 128},
  };
}

inline std::vector<codegen::AcceptParams> acceptConfigs() {
  using codegen::AcceptRule;
  return {
      {37, AcceptRule::entropyBound, false},       {256, AcceptRule::entropyBound, false},
      {40, AcceptRule::confidenceThreshold, true}, {33, AcceptRule::topK, true},
      {64, AcceptRule::entropyBound, true},
  };
}

inline std::vector<codegen::RenoiseParams> renoiseConfigs() {
  using codegen::NoiseKind;
  return {
      {500, NoiseKind::uniform, false},
      {500, NoiseKind::maskToken, false},
      {500, NoiseKind::uniform, true},
  };
}

} // namespace dlm::cudatest
