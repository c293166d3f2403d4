// The kernels one model needs on a GPU, chosen from its config and decoding policy: the
// attention variants its passes use (the canvas mask and the causal commit), the row norms,
// RoPE, the gated activation, the fused sampler, the accept rule and renoising. GEMMs are
// cuBLASLt's and are not listed.
#pragma once

#include "compiler/codegen/KernelSource.h"
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
};

// Named errors when a shape is outside what a generator serves (e.g. a head dim that is not a
// multiple of 32).
StatusOr<std::vector<KernelSource>> kernelsForModel(const artifact::ModelConfig &config,
                                                    const ModelKernelOptions &options);

} // namespace dlm::codegen
