// dlmc compile --weights f32|bf16|int8|fp8|int4: the storage precision of the projection weights
// (the weight of every linear and norm_linear record) and of the MoE expert stacks (a moe record's
// gate_up and down), for every backend. int8 and fp8 (E4M3) are weight-only, one scale per output
// channel (of every expert), stored as an 8-bit matrix or stack beside an f32 vector
// "<name>.scale" (runtime/model/ModelWeights.h). int4 is weight-only too, symmetric, one f16
// scale per group of --weight-group-size inputs of an output channel: an i4 matrix (two values a
// byte) beside an f16 matrix "<name>.scale" [rows, inputs / group]. 8-bit weights (an FP8
// checkpoint's, or an artifact's) convert too: read with their scales, which are then replaced or
// dropped. The CPU backend keeps bf16, 8-bit and 4-bit weights so in memory
// (runtime/cpu/PackedLinear.h); the CUDA device keeps 8-bit and 4-bit projection weights narrow and
// widens each to its precision before the GEMM (the widen_weight kernel), and holds expert stacks
// (and quantized tables) at its precision. Embedding tables and the LM head stay as the checkpoint
// stores them unless --quantize-embeddings; routers and norm weights always do. Without --weights
// every weight stays as stored.
#pragma once

#include "runtime/artifact/ArtifactWriter.h"
#include "support/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dlm::pipeline {

struct WeightPrecisionReport {
  struct Counts {
    int64_t weights = 0, converted = 0;
    uint64_t bytes = 0; // what they take in the artifact, row scales included
  };
  std::string precision; // as asked, or "as stored"
  Counts projections, experts;
  bool tables = false; // the embedding tables and the LM head converted too
  Counts embeddings;
};

struct WeightPrecision {
  std::string name;       // "f32", "bf16", "int8", "fp8" or "int4"; empty: as stored
  int64_t groupSize = 32; // int4: the inputs one scale covers
  // dlmc compile --quantize-embeddings: the tables of embedding, soft_embedding and lm_head
  // records too (a tied table once), as llama.cpp's quantized types store them.
  bool tables = false;
};

// Converts the projection weights and expert stacks `program` names in `weights` to `precision`
// (int8 and fp8 with their scale vectors, int4 with its group scales), keeping the converted
// bytes in `owned` (which must outlive the artifact write). Errors name the precision or the
// weight (an int4 group size that does not divide a weight's inputs among them).
StatusOr<WeightPrecisionReport> convertWeightPrecision(const artifact::KernelTarget &program,
                                                       const WeightPrecision &precision,
                                                       std::vector<artifact::WeightSource> &weights,
                                                       std::vector<std::vector<uint8_t>> &owned);

// "weights: bf16 (84 projection matrices, 84 converted, 162.0 MiB; embeddings, LM head and norms
// as stored)", with "; 48 expert stacks, 48 converted, 1.2 MiB" after the projections' when the
// model has experts, and "; 2 embedding and LM head tables, 2 converted, 12.0 MiB" (and those
// no longer "as stored") with --quantize-embeddings.
std::string describe(const WeightPrecisionReport &report);

} // namespace dlm::pipeline
