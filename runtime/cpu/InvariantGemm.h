// A batch-invariant GEMM for serving (docs/design/serving.md §3): y = x W^T where every output
// element is one sequential float32 sum over k = 0..K-1 of x[m, k] * W[n, k], each product and
// each addition rounded on its own (no fused multiply-add), whatever the row count, the row's
// position in the batch, the thread count or the instruction set. A row's result is then the same
// alone or under load, which oneDNN's sgemm does not promise (its kernels and K blocking change
// with the row count; measured in serving.md §3).
//
// The weights are packed once into panels of kPanelColumns columns, [K, kPanelColumns] each,
// zero-padded past N, so that every column goes through the same vectorised loop.
#pragma once

#include "runtime/cpu/ThreadPool.h"
#include "runtime/model/ModelWeights.h"

#include <cstdint>
#include <vector>

namespace dlm::cpu {

class InvariantGemm {
public:
  static constexpr int64_t kPanelColumns = 16;
  static constexpr int64_t kTileRows = 4;

  // W in PyTorch [out, in] layout; its first `outputs` rows (all when negative).
  explicit InvariantGemm(const model::HostTensor &w, int64_t outputs = -1);

  int64_t outputs() const { return outputs_; }
  int64_t inputs() const { return inputs_; }
  size_t packedBytes() const { return packed_.size() * sizeof(float); }

  // y[rows, outputs] (+)= x[rows, inputs] W^T, the panels split among the pool's threads.
  void run(const float *x, int64_t rows, float *y, bool accumulate, ThreadPool &pool) const;

private:
  void runPanel(const float *x, int64_t rows, int64_t panel, float *y, bool accumulate) const;

  int64_t outputs_ = 0, inputs_ = 0, panels_ = 0;
  std::vector<float> packed_; // panels_ x [inputs_, kPanelColumns]
};

} // namespace dlm::cpu
