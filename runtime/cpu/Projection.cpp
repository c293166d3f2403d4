// The projection kinds' runners (linear, norm_linear, lm_head) and the GEMM they share
// (CpuBackend::project: InvariantGemm when batch-invariant, else oneDNN or the tiles on packed
// weights, or a tied table read where it lies).
#include "runtime/cpu/BlockedTileKernels.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/Kernels.h"
#include "support/FloatFormats.h"

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

namespace {

// Outputs (rows of W) a task of multiplyStoredRows takes: 96 rows of a 4096-wide bf16 table are
// 768 KiB, within a core's L2 while every 6 rows of x pass over them.
constexpr int64_t kStoredRowsPerTask = 96;

// y[rows, outputs] (+)= x[rows, K] W[:outputs]^T for a bf16 W [N, K] as stored, the outputs
// spread over the pool; in bf16 arithmetic when xBf16 (x rounded to bf16) is given.
void multiplyStoredRows(const model::StoredTensor &w, int64_t outputs, const float *x,
                        const uint16_t *xBf16, int64_t rows, float *y, bool accumulate,
                        ThreadPool &pool) {
  const int64_t k = w.cols, tasks = (outputs + kStoredRowsPerTask - 1) / kStoredRowsPerTask;
  const uint16_t *bits = static_cast<const uint16_t *>(w.data);
  pool.parallelFor(tasks, 2, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t first = t * kStoredRowsPerTask;
      const int64_t count = std::min(kStoredRowsPerTask, outputs - first);
      if (xBf16)
        multiplyBf16ByRowsBf16(bits + first * k, k, count, k, xBf16, k, rows, y + first, outputs,
                               accumulate);
      else
        multiplyByRowsBf16(bits + first * k, k, count, k, x, k, rows, y + first, outputs,
                           accumulate);
    }
  });
}

} // namespace

bool CpuBackend::readsInPlace(const model::StoredTensor &stored) {
  return stored.dtype == artifact::DType::f32 ||
         (stored.dtype == artifact::DType::bf16 && hasBlockedTileKernels());
}

// y (+)= x W^T for a table read where it lies (readsInPlace): float32 by oneDNN's sgemm, bf16 by
// the dot kernels, in bf16 arithmetic where asked and the reserved rounding scratch holds x.
Status CpuBackend::projectInPlace(const float *x, int64_t rows, const model::StoredTensor &w,
                                  int64_t outputs, float *y, bool accumulate) {
  if (w.dtype == artifact::DType::f32)
    return linear(x, rows, model::HostTensor{static_cast<const float *>(w.data), w.rows, w.cols},
                  outputs, nullptr, y, pool_.threads(), accumulate);
  const uint16_t *xBf16 = nullptr;
  const size_t count = static_cast<size_t>(rows * w.cols);
  if (bf16Arithmetic_ && hasBf16DotKernels() && roundedInput_.size() >= count) {
    for (size_t i = 0; i < count; ++i)
      roundedInput_[i] = bf16FromFloat(x[i]);
    xBf16 = roundedInput_.data();
  }
  multiplyStoredRows(w, outputs, x, xBf16, rows, y, accumulate, pool_);
  return Status::ok();
}

Status CpuBackend::project(const float *x, int64_t rows, const model::HostTensor &w,
                           int64_t outputs, const float *bias, float *y, bool accumulate) {
  auto packed = packed_.find(&w);
  if (packed != packed_.end() && packed->second->outputs() == outputs)
    return packedGemm_.run(*packed->second, x, rows, bias, y, pool_, accumulate);
  if (auto table = storedTables_.find(&w); packed == packed_.end() &&
                                           table != storedTables_.end() &&
                                           readsInPlace(table->second->view)) {
    DLM_RETURN_IF_ERROR(projectInPlace(x, rows, table->second->view, outputs, y, accumulate));
    if (bias)
      addBias(bias, rows, outputs, y);
    return Status::ok();
  }
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
    addBias(bias, rows, outputs, y);
  return Status::ok();
}

} // namespace dlm::cpu
