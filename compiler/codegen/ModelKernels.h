// The kernels one model needs on a GPU, at the device precision: for its kernel program, exactly
// the kernels its records launch (each record names its kernel); for its decoding policy, the
// fused sampler, the accept rule, the block loop's gate and renoising. GEMMs (with their biases
// and the residual accumulation, beta = 1) are cuBLASLt's and are not generated.
#pragma once

#include "compiler/codegen/KernelSource.h"
#include "compiler/codegen/Kernels.h"
#include "runtime/artifact/ArtifactFormat.h"
#include "support/Status.h"

#include <map>
#include <string>
#include <vector>

namespace dlm::codegen {

struct ModelKernelOptions {
  // or "entropy-bound"; the device block loop's decoding kernels serve only these two
  std::string policy = "low-confidence";
  // The policy is decoded on the host over the device's forwards (diffusion-gemma, autoregressive,
  // introspective-strided): no decoding kernels.
  bool hostDecoding = false;
  bool confidenceThreshold = false;      // low-confidence with --threshold
  int64_t canvas = 32;                   // block length
  int64_t pageSize = 16;
  // The device precision: activations, K/V pages and (converted at load time) weights. f32 runs
  // the tiny test models comparably with the float32 CPU backend; bf16 is the production choice.
  ElementType element = ElementType::bf16;
  // The artifact's 8-bit projection weights (i8 from --weights int8, fp8_e4m3 from an FP8
  // checkpoint) by canonical name: a linear or norm_linear record whose weight is one also
  // launches the kernel that widens it to the device precision before its GEMM, and an FP8 one
  // also the kernel that quantizes its input rows for an FP8 GEMM.
  std::map<std::string, NarrowWeight> narrowWeights;
};

// The kernel every record of a kernel program (runtime/model/KernelProgram.h) launches, each
// kernel once, and the record's `cuda_kernel` parameter set to its entry point: norm_linear and
// lm_head name their norm (their GEMM is cuBLASLt's), linear names none (or, for a narrow
// weight, its widening kernel, which norm_linear names after its norm). A record that launches
// several kernels names them comma-separated: lm_head its norm and its soft-cap (either may be
// absent), moe its route, plan, gate_up, down and combine kernels. `weightShapes` are the
// artifact's weights by canonical name. Named errors for a shape no generator serves (a head dim
// that is not a multiple of 8) or a record kind without a CUDA kernel.
using WeightShapes = std::map<std::string, std::vector<int64_t>>;
StatusOr<std::vector<KernelSource>> kernelsForProgram(std::vector<artifact::Kernel> &records,
                                                      const WeightShapes &weightShapes,
                                                      const ModelKernelOptions &options);

// The decoding policy's kernels (sampler, accept, gate, renoise), chosen so that the device
// makes the CPU decoder's decisions (runtime/sampling/). None for "diffusion-gemma", whose
// decode program drives the device forwards from the host (the device block loop does not run
// it).
StatusOr<std::vector<KernelSource>> decodingKernels(const artifact::ModelConfig &config,
                                                    const ModelKernelOptions &options);

} // namespace dlm::codegen
