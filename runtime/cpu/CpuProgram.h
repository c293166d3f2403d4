// The compiled forward as the CPU backend runs it: the artifact's "cpu" kernel records
// (runtime/model/KernelProgram.h) parsed once, every weight resolved to a host tensor, every
// shape, slot and the memory plan checked, so that a forward walks the list without a check.
#pragma once

#include "runtime/artifact/ArtifactFormat.h"
#include "runtime/model/ModelWeights.h"
#include "support/Status.h"

#include <string>
#include <vector>

namespace dlm::cpu {

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

struct CpuKernel {
  KernelKind kind = KernelKind::embedding;
  std::string name;     // profile label ("q_proj")
  std::string normName; // profile label of a fused norm ("attn_norm", "final_norm")
  int64_t layer = -1;
  std::vector<int64_t> operands;
  int64_t result = -1;
  const model::HostTensor *weight = nullptr;
  const model::HostTensor *bias = nullptr;
  const model::HostTensor *norm = nullptr;
  double eps = 0;
  int64_t heads = 0, kvHeads = 0, headDim = 0;
  bool causal = false;
  bool logitShift = false;
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

struct CpuProgram {
  std::vector<CpuKernel> kernels;
  std::vector<SlotPlace> slots;
  int64_t rowElements = 0;     // workspace floats per token
  int64_t normRowElements = 0; // norm_linear scratch floats per token
  double ropeTheta = 0;
  int64_t ropeHeadDim = 0; // 0: no rope record

  // Errors name the record: "cpu kernel record 3 ('k_proj'): missing weight 'layers.0.k'",
  // "not supported yet: cpu kernel kind 'conv' (cpu kernel record 5 'x')".
  static StatusOr<CpuProgram> build(const std::vector<artifact::Kernel> &records,
                                    const model::ModelWeights &weights);
};

} // namespace dlm::cpu
