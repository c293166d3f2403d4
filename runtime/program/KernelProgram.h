// The compiled forward as every backend runs it: the artifact's kernel records
// (runtime/model/KernelProgram.h) parsed once, every weight resolved to a host tensor (a backend
// keeps its own copy by the tensor's name), every shape, slot and the memory plan checked, so
// that a forward walks the list without a check. Nothing here knows what a layer is: records
// are kernels with operands, results and weights.
#pragma once

#include "runtime/artifact/ArtifactFormat.h"
#include "runtime/model/ModelWeights.h"
#include "support/Status.h"

#include <string>
#include <vector>

namespace dlm::program {

enum class KernelKind {
  embedding,
  rmsNorm,
  normLinear,
  linear,
  rope,
  kvStore,
  attention,
  add,
  siluMul,
  lmHead,
};

struct ProgramRecord {
  KernelKind kind = KernelKind::embedding;
  std::string name;     // profile label ("q_proj")
  std::string fullName; // the record's name ("layers.0.q_proj")
  std::string normName; // profile label of a fused norm ("attn_norm", "final_norm")
  int64_t layer = -1;
  std::vector<int64_t> operands;
  int64_t result = -1;
  // Canonical weight names as the records give them, and the host tensors they name.
  std::string weightName, biasName, normWeightName;
  const model::HostTensor *weight = nullptr;
  const model::HostTensor *bias = nullptr;
  const model::HostTensor *norm = nullptr;
  double eps = 0;
  double theta = 0;
  int64_t heads = 0, kvHeads = 0, headDim = 0;
  bool causal = false;
  bool logitShift = false;
  // linear / norm_linear: result = operands[1] + x W^T (+ bias), the residual add the compiler
  // folded into the GEMM's epilogue (planned in place on operands[1] when it can be).
  bool accumulate = false;
  // The generated CUDA kernel this record launches (its entry point name; the GEMM of a
  // linear record is cuBLASLt's); empty when the artifact has no CUDA kernels.
  std::string cudaKernel;
  // norm_linear: the previous record normalised the same input with the same norm (q, k, v), so
  // its normalised rows are still in the scratch.
  bool reusesNorm = false;
};

// Where a value slot lives: elements [offset * T, (offset + width) * T) of the workspace for T
// tokens. The two inputs (token ids, positions) have offset -1.
struct SlotPlace {
  int64_t offset = -1;
  int64_t width = 0;
};

struct KernelProgram {
  std::vector<ProgramRecord> kernels;
  std::vector<SlotPlace> slots;
  int64_t rowElements = 0;     // workspace floats per token
  int64_t normRowElements = 0; // norm_linear scratch floats per token

  // Errors name the record: "kernel record 3 ('k_proj'): missing weight 'layers.0.k'",
  // "not supported yet: kernel kind 'conv' (kernel record 5 'x')".
  static StatusOr<KernelProgram> build(const std::vector<artifact::Kernel> &records,
                                       const model::ModelWeights &weights);
};

} // namespace dlm::program
