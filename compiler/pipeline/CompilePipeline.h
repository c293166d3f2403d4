// The one compile pipeline, shared by dlmc compile and dlm-opt (--dlm-compile-pipeline):
// canonicalize, CSE, dlm-fuse-norm-linear, dlm-lower-to-kernel-program (@forward as kernel
// records with a per-token-row memory plan) and dlm-unroll-diffusion-loop (@generate's denoise
// loops, `unroll` guarded steps per iteration; 1: not unrolled). @forward keeps a dynamic token
// count (prompts vary per request), so its memory is planned per token row, by the lowering.
#pragma once

#include "mlir/Pass/PassManager.h"

#include <cstdint>

namespace dlm::pipeline {

struct PipelineOptions {
  int64_t unroll = 4;
};

void buildCompilePipeline(mlir::OpPassManager &pm, const PipelineOptions &options);

// Registers --dlm-compile-pipeline (option unroll) with the pass registry (dlm-opt).
void registerCompilePipeline();

} // namespace dlm::pipeline
