// Kernel specialisations at the shapes of the models dlm targets (LLaDA-8B, Dream-7B, the
// DiffusionGemma 26B layers, their vocabularies and canvases), for the NVRTC tests: resource
// reports at these shapes are the ones that matter on a GPU.
#pragma once

#include "compiler/codegen/Kernels.h"

#include <vector>

namespace dlm::cudatest {

inline std::vector<codegen::AttentionParams> productionAttentionConfigs() {
  using codegen::ElementType;
  using codegen::MaskKind;
  return {
      {128, 32, 32, 16, MaskKind::bidirectional},         // LLaDA-8B canvas
      {128, 32, 32, 16, MaskKind::blockCausal},           // LLaDA block diffusion
      {128, 28, 4, 16, MaskKind::causal},                 // Dream-7B prefill / commit
      {256, 16, 8, 16, MaskKind::slidingWindowSymmetric}, // DiffusionGemma sliding, canvas
      {256, 16, 8, 16, MaskKind::slidingWindow},          // DiffusionGemma sliding, commit
      {512, 16, 2, 16, MaskKind::bidirectional},          // DiffusionGemma global
      // A float32 device: the tiny test models (head_dim 16; qwen3 32) and a d128 model.
      {16, 4, 2, 16, MaskKind::bidirectional, ElementType::f32},
      {16, 4, 2, 16, MaskKind::causal, ElementType::f32},
      {32, 4, 2, 16, MaskKind::causal, ElementType::f32},
      {128, 28, 4, 16, MaskKind::causal, ElementType::f32},
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

// LLaDA and Dream rank by the temperature-1 confidence; DiffusionGemma's entropy-bound sampler
// reads none (and here also writes the softmax statistics).
inline std::vector<codegen::SamplerParams> productionSamplerConfigs() {
  using codegen::ElementType;
  using codegen::SamplerConfidence;
  return {{126464, ElementType::f32, 0.0, 256, SamplerConfidence::unitTemperature},
          {152064, ElementType::bf16, 0.0, 256, SamplerConfidence::unitTemperature},
          {262144, ElementType::f32, 30.0, 256, SamplerConfidence::atTemperature, true}};
}

inline std::vector<codegen::AcceptParams> productionAcceptConfigs() {
  using codegen::AcceptRule;
  return {{256, AcceptRule::entropyBound, false},
          {32, AcceptRule::confidenceThreshold, true},
          {64, AcceptRule::topK, true}};
}

inline std::vector<codegen::RenoiseParams> productionRenoiseConfigs() {
  using codegen::NoiseKind;
  using codegen::RenoiseCandidates;
  return {{262144, NoiseKind::uniform, false, RenoiseCandidates::everyRejected},
          {126464, NoiseKind::maskToken, false, RenoiseCandidates::maskedOnly},
          {126464, NoiseKind::maskToken, false, RenoiseCandidates::everyRejected},
          {262144, NoiseKind::uniform, true}};
}

// The device block loop's gate at the accept kernels' canvases, one warp to the 1024 limit.
inline std::vector<codegen::BlockLoopGateParams> productionBlockLoopGateConfigs() {
  return {{32}, {64}, {256}, {1024}};
}

// Embedding rows (LLaDA-8B, Dream-7B hidden sizes) and KV rows (kv_heads * head_dim), both
// precisions.
inline std::vector<codegen::EmbeddingParams> productionEmbeddingConfigs() {
  using codegen::ElementType;
  return {{4096, ElementType::bf16}, {3584, ElementType::bf16}, {4096, ElementType::f32}};
}

inline std::vector<codegen::WidenWeightParams> productionWidenWeightConfigs() {
  using codegen::ElementType;
  using codegen::StoredWeight;
  return {{StoredWeight::i8, ElementType::bf16},
          {StoredWeight::fp8E4m3, ElementType::bf16},
          {StoredWeight::i8, ElementType::f32},
          {StoredWeight::i4, ElementType::bf16, 32},
          {StoredWeight::i4, ElementType::f32, 128}};
}

inline std::vector<codegen::QuantizeRowsParams> productionQuantizeRowsConfigs() {
  using codegen::ElementType;
  return {{4096, ElementType::bf16}, {14336, ElementType::bf16}, {2816, ElementType::bf16}};
}

inline std::vector<codegen::KvStoreParams> productionKvStoreConfigs() {
  using codegen::ElementType;
  return {{4096, 16, ElementType::bf16}, {512, 16, ElementType::bf16}, {512, 16, ElementType::f32}};
}

// DiffusionGemma's records on the device (the 26B-A4B text config: H 2816, 128 experts of width
// 704, top 8, heads 16 / kv 8 of 256 on sliding layers, 16 / 2 of 512 on full layers, window
// 1024, embedding scale sqrt(2816), soft-cap 30) in bf16, and the tiny fixtures' shapes in f32
// (H 56, 4 experts of width 12, top 2; d16 sliding, d32 full layers).
inline std::vector<codegen::AttentionParams> diffusionGemmaAttentionConfigs() {
  using codegen::ElementType;
  using codegen::MaskKind;
  return {
      {256, 16, 8, 16, MaskKind::bidirectionalWindow}, // sliding layers, decoder
      {256, 16, 8, 16, MaskKind::slidingWindow},       // sliding layers, encoder
      {512, 16, 2, 16, MaskKind::causal},              // full layers, encoder
      {16, 4, 2, 16, MaskKind::bidirectionalWindow, ElementType::f32},
      {16, 4, 2, 16, MaskKind::slidingWindow, ElementType::f32},
      {32, 4, 1, 16, MaskKind::bidirectional, ElementType::f32},
      {32, 4, 1, 16, MaskKind::causal, ElementType::f32},
  };
}

inline std::vector<codegen::MoeParams> diffusionGemmaMoeConfigs() {
  using codegen::ElementType;
  return {{2816, 128, 8, 704, ElementType::bf16},
          {2816, 128, 8, 704, ElementType::f32},
          {56, 4, 2, 12, ElementType::f32}};
}

// The soft embedding of self-conditioning: H 2816 for the 26B model's vocabulary of 262144 (the
// input width is a run-time argument), bf16 and f32 tables; H 56 for the fixtures.
inline std::vector<codegen::SoftEmbeddingParams> diffusionGemmaSoftEmbeddingConfigs() {
  using codegen::ElementType;
  return {{2816, ElementType::bf16}, {2816, ElementType::f32}, {56, ElementType::f32}};
}

inline std::vector<codegen::EmbeddingParams> diffusionGemmaEmbeddingConfigs() {
  using codegen::ElementType;
  return {{2816, ElementType::bf16, 53.06599664568481}, {56, ElementType::f32, 7.483314773547883}};
}

inline std::vector<codegen::ScaleParams> diffusionGemmaScaleConfigs() {
  using codegen::ElementType;
  return {{2816, ElementType::bf16}, {56, ElementType::f32}};
}

inline std::vector<codegen::AddParams> diffusionGemmaAddConfigs() {
  using codegen::ElementType;
  return {{2816, ElementType::bf16}, {56, ElementType::f32}};
}

inline std::vector<codegen::SoftcapParams> diffusionGemmaSoftcapConfigs() { return {{30.0}}; }

inline std::vector<codegen::RmsNormParams> diffusionGemmaRmsNormConfigs() {
  using codegen::ElementType;
  // Weightless: the v norm per head (256, 512; 16, 32 in the fixtures).
  return {{256, false}, {512, false}, {16, false, ElementType::f32}, {32, false, ElementType::f32}};
}

inline std::vector<codegen::RopeParams> diffusionGemmaRopeConfigs() {
  using codegen::ElementType;
  // Sliding layers rotate every pair; full layers the first quarter (rotated_pairs), at the
  // frequencies of the whole head.
  return {{256, 0, 0, 0, 10000.0},
          {512, 512, 64, 512, 1000000.0},
          {32, 32, 4, 32, 1000000.0, ElementType::f32}};
}

inline std::vector<codegen::GatedActivationParams> diffusionGemmaGatedActivationConfigs() {
  using codegen::ElementType;
  return {{2112, codegen::Activation::geluTanh},
          {48, codegen::Activation::geluTanh, ElementType::f32}};
}

} // namespace dlm::cudatest
