// dlmc compile --weights f32|bf16: the storage precision of the projection weights (the weight of
// every linear and norm_linear record), for every backend. The CPU backend keeps bf16 weights
// bf16 in memory (runtime/cpu/PackedLinear.h); the CUDA device's precision follows (bf16
// weights: bf16 kernels). Embedding tables, the LM head and norm weights stay as the checkpoint
// stores them. Without --weights every weight stays as stored.
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

// Converts the projection weights `program` names in `weights` to `precision` ("f32" or "bf16";
// empty: none), keeping the converted bytes in `owned` (which must outlive the artifact write).
// Errors name the precision or the weight.
StatusOr<WeightPrecisionReport>
convertProjectionWeights(const artifact::KernelTarget &program, const std::string &precision,
                         std::vector<artifact::WeightSource> &weights,
                         std::vector<std::vector<uint8_t>> &owned);

// "weights: bf16 (84 projection matrices converted, 162.0 MiB; embeddings, LM head and norms as
// stored)".
std::string describe(const WeightPrecisionReport &report);

} // namespace dlm::pipeline
