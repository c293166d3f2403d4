// dlmc compile --weights f32|bf16|int8|fp8: the storage precision of the projection weights (the
// weight of every linear and norm_linear record), for every backend. int8 and fp8 (E4M3) are
// weight-only, one scale per output channel, stored as an 8-bit matrix beside an f32 vector
// "<name>.scale" (runtime/model/ModelWeights.h). 8-bit weights (an FP8 checkpoint's, or an
// artifact's) convert too: read with their scales, which are then replaced or dropped. The CPU
// backend keeps bf16 and int8 weights so in memory (runtime/cpu/PackedLinear.h); the CUDA device
// keeps int8 weights in 8 bits and widens each to its precision before the GEMM (the widen_weight
// kernel). Embedding tables, the LM head and norm weights stay as the checkpoint stores them.
// Without --weights every weight stays as stored.
#pragma once

#include "runtime/artifact/ArtifactWriter.h"
#include "support/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dlm::pipeline {

struct WeightPrecisionReport {
  std::string precision; // as asked, or "as stored"
  int64_t converted = 0; // projection weights converted
  int64_t projections = 0;
  uint64_t projectionBytes = 0; // what the projection weights take in the artifact
};

// Converts the projection weights `program` names in `weights` to `precision` ("f32", "bf16",
// "int8" or "fp8", the last two with their scale vectors; empty: none), keeping the converted bytes
// in `owned` (which must outlive the artifact write). Errors name the precision or the weight.
StatusOr<WeightPrecisionReport>
convertProjectionWeights(const artifact::KernelTarget &program, const std::string &precision,
                         std::vector<artifact::WeightSource> &weights,
                         std::vector<std::vector<uint8_t>> &owned);

// "weights: bf16 (84 projection matrices converted, 162.0 MiB; embeddings, LM head and norms as
// stored)".
std::string describe(const WeightPrecisionReport &report);

} // namespace dlm::pipeline
