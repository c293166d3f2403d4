// The kernels one model needs on a GPU, chosen from its config and decoding policy, at the
// device precision: the embedding lookup, the K/V store into the paged cache, the attention
// variants its passes use (the model's mask and the causal prefill / commit), the row norms
// (hidden width; per head for q/k norms), RoPE, the gated activation, the fused sampler, the
// accept rule and renoising. GEMMs (with their biases and the residual adds, beta = 1) are
// cuBLASLt's and are not listed.
#pragma once

#include "compiler/codegen/KernelSource.h"
#include "compiler/codegen/Kernels.h"
#include "runtime/artifact/ArtifactFormat.h"
#include "support/Status.h"

#include <string>
#include <vector>

namespace dlm::codegen {

struct ModelKernelOptions {
  std::string policy = "low-confidence"; // or "entropy-bound"
  bool confidenceThreshold = false;      // low-confidence with --threshold
  int64_t canvas = 32;                   // block length
  int64_t pageSize = 16;
  // The device precision: activations, K/V pages and (converted at load time) weights. f32 runs
  // the tiny test models comparably with the float32 CPU backend; bf16 is the production choice.
  ElementType element = ElementType::bf16;
};

// Named errors when a shape is outside what a generator serves (e.g. a head dim that is not a
// multiple of 8) or a mask kind no kernel serves yet.
StatusOr<std::vector<KernelSource>> kernelsForModel(const artifact::ModelConfig &config,
                                                    const ModelKernelOptions &options);

} // namespace dlm::codegen
