// The kernel specialisations the conformance suite runs on the emulated device. The generator
// (EmuKernelGenerator.cpp) compiles exactly these into the test binary at build time; the tests
// regenerate them to learn the kernels' names. Shapes vary per test at run time (query counts,
// KV lengths, pages, rows); these are the compile-time parameters, chosen to cover every mask
// kind, GQA and MHA, every attention layout (4, 2 and 1 rows per warp; a value tile sharing the
// key tile's storage), head dims below a warp, vector and scalar access paths, f32 and bf16.
#pragma once

#include "compiler/codegen/Kernels.h"

#include <vector>

namespace dlm::cudatest {

inline std::vector<codegen::AttentionParams> attentionConfigs() {
  using codegen::ElementType;
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
      // f32 storage (the float32 device) and head dims below a warp (the tiny test models): idle
      // lanes at 16 and 24, an f32 value tile sharing the key tile's storage at 256.
      {16, 4, 2, 16, MaskKind::causal, ElementType::f32},
      {16, 4, 2, 16, MaskKind::bidirectional, ElementType::f32},
      {16, 4, 4, 8, MaskKind::blockCausal, ElementType::bf16},
      {24, 6, 2, 16, MaskKind::slidingWindowSymmetric, ElementType::f32},
      {32, 4, 2, 16, MaskKind::causal, ElementType::f32},
      {64, 8, 2, 16, MaskKind::slidingWindow, ElementType::f32},
      {256, 2, 1, 16, MaskKind::bidirectional, ElementType::f32},
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

// Both confidences, with and without the softmax statistics.
inline std::vector<codegen::SamplerParams> samplerConfigs() {
  using codegen::ElementType;
  using codegen::SamplerConfidence;
  return {
      {1000, ElementType::f32, 0.0, 256},
      {4099, ElementType::bf16, 0.0, 256, SamplerConfidence::atTemperature},
      {512, ElementType::f32, 30.0, 128, SamplerConfidence::unitTemperature, true},
      {1000, ElementType::f32, 0.0, 64, SamplerConfidence::atTemperature, true},
      {333, ElementType::bf16, 0.0, 96, SamplerConfidence::unitTemperature},
      // The policies' samplers at the renoise configs' vocabulary, for DecodeStepTest.cpp.
      {500, ElementType::f32, 0.0, 128, SamplerConfidence::unitTemperature},
      {500, ElementType::f32, 0.0, 128, SamplerConfidence::atTemperature},
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
  using codegen::RenoiseCandidates;
  return {
      {500, NoiseKind::uniform, false, RenoiseCandidates::everyRejected},
      {500, NoiseKind::maskToken, false, RenoiseCandidates::maskedOnly},
      {500, NoiseKind::maskToken, false, RenoiseCandidates::everyRejected},
      {500, NoiseKind::uniform, true},
      {500, NoiseKind::maskToken, true},
  };
}

// Ragged widths (a partial column tile: 100, 200, 37), one and two column tiles (64, 128, 200,
// 256), both table precisions.
inline std::vector<codegen::SoftEmbeddingParams> softEmbeddingConfigs() {
  using codegen::ElementType;
  return {
      {100, ElementType::f32},  {200, ElementType::bf16}, {64, ElementType::f32},
      {256, ElementType::bf16}, {37, ElementType::bf16},  {128, ElementType::f32},
  };
}

// The moe record's four kernels (route, plan, gate_up and down, combine), f32: the tiny fixtures'
// shape; ragged tiles (I 70, H 100: a partial second column tile) with top 3; top_k = experts (an
// expert's list over two row tiles); more experts than the router's 8 warps; Qwen3-MoE's routing
// (no router norm or scales, SiLU experts) at qwen3_moe_tiny's shape, renormalised and not;
// LLaDA2's (sigmoid scores, expert bias, groups) at llada2_tiny's experts (another hidden size:
// the combine kernel is named by hidden size and top_k alone).
// Distinct (experts, top_k) pairs: the plan kernel is named by them alone.
inline std::vector<codegen::MoeParams> moeConfigs() {
  using codegen::Activation;
  using codegen::ElementType;
  return {
      {56, 4, 2, 12, ElementType::f32},
      {100, 8, 3, 70, ElementType::f32},
      {40, 3, 3, 20, ElementType::f32},
      {24, 16, 4, 8, ElementType::f32},
      {64, 8, 2, 32, ElementType::f32, false, true, Activation::silu},
      {48, 6, 2, 16, ElementType::f32, false, false, Activation::silu},
      // LLaDA2's: sigmoid scores, expert bias, top 2 of 4 groups, routed scale (the test's 2.5).
      {72, 16, 2, 16, ElementType::f32, false, true, Activation::silu, true, 4, 2},
  };
}

// Vector (16-byte), narrower and scalar access paths in both element types.
inline std::vector<codegen::EmbeddingParams> embeddingConfigs() {
  using codegen::ElementType;
  return {
      {64, ElementType::f32},  {64, ElementType::bf16}, {1000, ElementType::bf16},
      {37, ElementType::f32},  {37, ElementType::bf16}, {6, ElementType::f32},
  };
}

inline std::vector<codegen::KvStoreParams> kvStoreConfigs() {
  using codegen::ElementType;
  return {
      {32, 16, ElementType::f32},  {32, 16, ElementType::bf16}, {64, 4, ElementType::f32},
      {512, 8, ElementType::bf16}, {12, 3, ElementType::f32},   {10, 5, ElementType::bf16},
  };
}

// Both 8-bit formats and int4 (two group sizes) widened to both device precisions.
inline std::vector<codegen::WidenWeightParams> widenWeightConfigs() {
  using codegen::ElementType;
  using codegen::StoredWeight;
  return {
      {StoredWeight::i8, ElementType::f32},      {StoredWeight::i8, ElementType::bf16},
      {StoredWeight::fp8E4m3, ElementType::f32}, {StoredWeight::fp8E4m3, ElementType::bf16},
      {StoredWeight::i4, ElementType::f32, 8},   {StoredWeight::i4, ElementType::bf16, 4},
  };
}

// Rows narrower and wider than a block, in both element types.
inline std::vector<codegen::QuantizeRowsParams> quantizeRowsConfigs() {
  using codegen::ElementType;
  return {{64, ElementType::f32},
          {64, ElementType::bf16},
          {1000, ElementType::f32},
          {16, ElementType::bf16}};
}

} // namespace dlm::cudatest
