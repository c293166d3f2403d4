// The projection records (linear, norm_linear, lm_head) are cuBLASLt GEMMs; what CUDA codegen
// generates for them is around the GEMM: the fused norm, the widening of an 8-bit weight (and for
// an FP8 one the quantizing of the input rows), and the LM head's soft-cap.
#include "compiler/codegen/RecordKernels.h"

namespace dlm::codegen {

Status RecordKernels::normLinear() {
  const auto &p = as<kp::NormLinearParams>();
  launched.push_back(normOf(p.normWeight));
  return widenIfNarrow(p.weight);
}

Status RecordKernels::linear() { return widenIfNarrow(as<kp::LinearParams>().weight); }

Status RecordKernels::lmHead() {
  const auto &p = as<kp::LmHeadParams>();
  if (p.normWeight)
    launched.push_back(normOf(p.normWeight));
  if (p.softcap && *p.softcap > 0)
    launched.push_back(generateSoftcap({*p.softcap}));
  return Status::ok();
}

} // namespace dlm::codegen
