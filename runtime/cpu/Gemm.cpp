#include "runtime/cpu/Kernels.h"

#include <algorithm>
#include <dlfcn.h>
#include <dnnl.h>

#include <string>

namespace dlm::cpu {

namespace {

Status sgemmError(dnnl_status_t status, int64_t m, int64_t n, int64_t k) {
  return Status::error("oneDNN sgemm failed (status " + std::to_string(status) + ") on [" +
                       std::to_string(m) + " x " + std::to_string(k) + "] x [" + std::to_string(k) +
                       " x " + std::to_string(n) + "]");
}

} // namespace

void addBias(const float *bias, int64_t rows, int64_t outputs, float *y) {
  for (int64_t r = 0; r < rows; ++r) {
    float *row = y + r * outputs;
    for (int64_t c = 0; c < outputs; ++c)
      row[c] += bias[c];
  }
}

// oneDNN sizes its OpenMP team by omp_get_max_threads(), a per-thread setting. Debian's oneDNN
// uses libgomp; the symbol is looked up rather than linked so that a oneDNN built on another
// threading runtime simply keeps its own choice. Set on every call, not cached: inside the pool's
// parallel regions (libgomp's team) a setting lasts only until the region ends, so a cached value
// would go stale.
void setOneDnnThreads(int threads) {
  using SetNumThreads = void (*)(int);
  static const SetNumThreads setNumThreads =
      reinterpret_cast<SetNumThreads>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  if (setNumThreads)
    setNumThreads(threads);
}

Status linear(const float *x, int64_t rows, const model::HostTensor &w, int64_t outputs,
              const float *bias, float *y, int threads, bool accumulate) {
  if (rows == 0 || outputs == 0)
    return Status::ok();
  const double flops = 2.0 * static_cast<double>(rows) * outputs * w.cols;
  setOneDnnThreads(flops < kParallelGemmFlops ? 1 : std::max(threads, 1));
  // Row-major y = x W^T: W is [out, in], so it is read transposed with its own row stride.
  dnnl_status_t status = dnnl_sgemm('N', 'T', rows, outputs, w.cols, 1.0f, x, w.cols, w.data,
                                    w.cols, accumulate ? 1.0f : 0.0f, y, outputs);
  if (status != dnnl_success)
    return sgemmError(status, rows, outputs, w.cols);
  if (bias)
    addBias(bias, rows, outputs, y);
  return Status::ok();
}

Status matmul(bool transposeB, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
              int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc, int threads) {
  if (m == 0 || n == 0)
    return Status::ok();
  const double flops = 2.0 * static_cast<double>(m) * n * k;
  setOneDnnThreads(flops < kParallelGemmFlops ? 1 : std::max(threads, 1));
  dnnl_status_t status =
      dnnl_sgemm('N', transposeB ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, 0.0f, c, ldc);
  if (status != dnnl_success)
    return sgemmError(status, m, n, k);
  return Status::ok();
}

} // namespace dlm::cpu
