// Builds @generate, the decoding program of a policy, out of dlm ops around the model's
// @forward: blocks left to right, a dlm.diffusion_loop per block, dlm.denoise_step and
// dlm.entropy_accept inside it.
#pragma once

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace dlm::programs {

struct DecodingPolicy {
  // "low-confidence" (LLaDA: top-k schedule, or confidence threshold when threshold > 0) or
  // "entropy-bound" (DiffusionGemma's accept rule with mask renoising).
  std::string name;
  int64_t genLength = 0;
  int64_t blockLength = 0;
  int64_t steps = 0; // over all blocks (low-confidence)
  double threshold = 0.0;
  // Threshold only: the block's step cap (0: none; a block then runs as many steps as its
  // confidence needs, at most block_length since each step unmasks at least one position).
  int64_t stepCap = 0;
  // entropy-bound
  double tMin = 0.4, tMax = 0.8, entropyBound = 0.1, confidenceBound = 0.005;
  int64_t maxSteps = 48, stability = 1;
  int64_t pageSize = 16;
};

// Adds @generate(prompt: tensor<?xi32>, temperature: f32, request_key: i64)
//   -> tensor<gen_length x i32> to a module that holds @forward and its dlm.* attributes.
// The program is the exact (`--cache none`) form: every denoise step runs @forward over the
// whole sequence. Errors (bad lengths, unknown policy) are emitted on the module.
mlir::LogicalResult buildGenerateFunction(mlir::ModuleOp module, const DecodingPolicy &policy);

// Whether buildGenerateFunction writes `policy` (low-confidence, entropy-bound); the others have
// only their decode program.
bool hasGenerateFunction(std::string_view policy);

} // namespace dlm::programs
