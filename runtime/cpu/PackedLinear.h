// A projection's weight W [N, K] (PyTorch's [out, in] layout, as artifacts store it) packed once
// into the layout the GEMM library runs fastest, W^T [K, N] row-major: then y = x W^T is oneDNN's
// sgemm with neither operand transposed. Reading W transposed on every call instead ran at 30-70%
// of that rate on the forward's shapes (bench/gemm_rate.py measures both in one run).
// Packed from the stored tensor (f32, bf16 or f16) straight into float32, so that the [N, K]
// float32 copy is never made; ModelWeights::derived caches it, one per model.
#pragma once

#include "runtime/cpu/ThreadPool.h"
#include "runtime/model/ModelWeights.h"
#include "support/Status.h"

#include <cstdint>
#include <cstdlib>
#include <memory>

namespace dlm::cpu {

class PackedLinear {
public:
  // The packed form of weight `name` of `weights`, made on first use and shared after that.
  static StatusOr<std::shared_ptr<const PackedLinear>> of(const model::ModelWeights &weights,
                                                          std::string_view name);

  // y[rows, outputs] = x[rows, inputs()] W[:outputs]^T (+ bias) (+ y with `accumulate`), on up
  // the pool's threads. `outputs` <= this->outputs() lets the LM head skip padded rows.
  Status run(const float *x, int64_t rows, int64_t outputs, const float *bias, float *y,
             ThreadPool &pool, bool accumulate) const;

  int64_t outputs() const { return outputs_; }
  int64_t inputs() const { return inputs_; }
  size_t bytes() const { return static_cast<size_t>(outputs_ * inputs_) * sizeof(float); }

private:
  struct Free {
    void operator()(float *p) const { std::free(p); }
  };
  int64_t outputs_ = 0, inputs_ = 0;
  std::unique_ptr<float[], Free> transposed_; // [inputs_, outputs_], 64-byte aligned
};

} // namespace dlm::cpu
