// The projection kinds' runners (linear, norm_linear, lm_head) and the GEMM they share
// (CpuBackend::project: InvariantGemm when batch-invariant, else oneDNN on packed weights).
#include "runtime/cpu/CpuBackend.h"

#include <algorithm>
#include <cstring>

namespace dlm::cpu {

using program::KernelKind;

// linear and norm_linear
Status CpuBackend::runLinear(const RecordRun &run) {
  const program::ProgramRecord &k = run.k;
  const int64_t count = run.count, width = run.width;
  const std::vector<int64_t> &in = run.k.operands;
  const float *x = operand(run, 0);
  if (k.kind() == KernelKind::normLinear) {
    // oneDNN's GEMM has no prologue to normalise in, so the normalised rows go to a scratch,
    // once for the q, k and v projections that share them.
    const int64_t n = slotWidth(in[0]);
    const double eps = k.as<spec::kernels::NormLinearParams>().eps;
    if (!k.reusesNorm)
      timed(profile::Category::rmsnorm, k.normName.c_str(), run.layer, count,
            [&] { rmsNorm(x, count, n, n, k.norm()->data, eps, normed_.data()); });
    x = normed_.data();
  }
  float *y = result(run);
  const bool accumulate = k.accumulates();
  if (accumulate) {
    // The residual add folded into the GEMM: y = residual + x W^T, in place on the residual
    // as the compiler plans it (else the residual is copied to the result first).
    const float *residual = operand(run, 1);
    if (y != residual)
      std::memcpy(y, residual, static_cast<size_t>(count * width) * sizeof(float));
  }
  return timedGemm(run.category, k.name.c_str(), run.layer, count, run.event.outputs,
                   run.event.inputs, [&] {
                     return project(x, count, *k.weight(), k.weight()->rows,
                                    k.bias() ? k.bias()->data : nullptr, y, accumulate);
                   });
}

Status CpuBackend::runLmHead(const RecordRun &run) {
  const program::ProgramRecord &k = run.k;
  const int64_t width = run.width;
  const std::vector<int64_t> &in = run.k.operands;
  const auto &p = k.as<spec::kernels::LmHeadParams>();
  // Only the rows a policy decodes go through the final norm and the LM head: for a real
  // vocabulary the head is the largest GEMM of the forward.
  const int64_t hidden = slotWidth(in[0]);
  const float *x = operand(run, 0);
  int64_t headRows = 0;
  for (const Part &part : run.parts)
    for (int64_t r = part.rows.begin; r < part.rows.end; ++r) {
      const int64_t source = p.logitShift ? std::max<int64_t>(r - 1, 0) : r;
      std::memcpy(&headInput_[headRows++ * hidden], x + (part.offset + source) * hidden,
                  hidden * sizeof(float));
    }
  if (headRows == 0)
    return Status::ok();
  if (p.normWeight)
    timed(profile::Category::rmsnorm, k.normName.c_str(), run.layer, headRows, [&] {
      rmsNorm(headInput_.data(), headRows, hidden, hidden, p.normWeight.tensor->data, *p.eps,
              headInput_.data());
    });
  return timedGemm(
      run.category, k.name.c_str(), run.layer, headRows, run.event.outputs, run.event.inputs, [&] {
        DLM_RETURN_IF_ERROR(project(headInput_.data(), headRows, *p.weight.tensor, width, nullptr,
                                    logits_.data(), false));
        if (p.softcap)
          softcapInPlace(logits_.data(), static_cast<float>(*p.softcap), headRows * width);
        return Status::ok();
      });
}

Status CpuBackend::project(const float *x, int64_t rows, const model::HostTensor &w,
                           int64_t outputs, const float *bias, float *y, bool accumulate) {
  auto packed = packed_.find(&w);
  if (packed != packed_.end() && packed->second->outputs() == outputs)
    return packedGemm_.run(*packed->second, x, rows, bias, y, pool_, accumulate);
  auto invariant = invariantGemms_.find(w.data);
  if (invariant == invariantGemms_.end()) {
    if (!w.data) // packed for another width (the same weight as projection and LM head)
      return Status::error("cpu backend: not supported yet: one weight projected to " +
                           std::to_string(outputs) + " outputs and to another width");
    return linear(x, rows, w, outputs, bias, y, pool_.threads(), accumulate);
  }
  const InvariantGemm &gemm = invariant->second;
  if (outputs == gemm.outputs()) {
    gemm.run(x, rows, y, accumulate, pool_);
  } else {
    // The LM head over a padded embedding: the packed GEMM's columns past `outputs` are dropped.
    headScratch_.resize(static_cast<size_t>(rows * gemm.outputs()));
    gemm.run(x, rows, headScratch_.data(), false, pool_);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < outputs; ++c)
        y[r * outputs + c] = (accumulate ? y[r * outputs + c] : 0.0f) +
                             headScratch_[static_cast<size_t>(r * gemm.outputs() + c)];
  }
  if (bias)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < outputs; ++c)
        y[r * outputs + c] += bias[c];
  return Status::ok();
}

} // namespace dlm::cpu
