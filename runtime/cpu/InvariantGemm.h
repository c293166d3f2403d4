// A batch-invariant GEMM for serving (docs/design/serving.md §3): y = x W^T where every output
// element is one sequential float32 sum over k = 0..K-1 of x[m, k] * W[n, k], with the same
// operations in the same order whatever the row count, the row's position in the batch or the
// thread count. A row's result is then the same alone or under load, which oneDNN's sgemm does
// not promise (its kernels and K blocking change with the row count; measured in serving.md §3).
// Each step is a fused multiply-add in the x86-64-v3/v4 clones and a rounded multiply then add
// in the baseline one (Vectorize.h): one clone serves a whole process, so the bits are fixed per
// process and machine, not across instruction sets.
//
// The weights are packed once into panels of kPanelColumns columns, [K, kPanelColumns] each,
// zero-padded past N, so that every column goes through the same vectorised loop. Rows run in
// blocks small enough to stay in L2 while every panel passes over them, kTileRows rows at a time.
#pragma once

#include "runtime/cpu/ThreadPool.h"
#include "runtime/model/ModelWeights.h"

#include <cstdint>
#include <new>
#include <vector>

namespace dlm::cpu {

// A panel row is 64 bytes: cache-line aligned storage keeps each of its vector loads within one
// line (a load split across two lines costs twice).
template <typename T> struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <typename U> CacheLineAllocator(const CacheLineAllocator<U> &) {}
  T *allocate(size_t n) {
    return static_cast<T *>(::operator new(n * sizeof(T), std::align_val_t(64)));
  }
  void deallocate(T *p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  bool operator==(const CacheLineAllocator &) const { return true; }
};

class InvariantGemm {
public:
  static constexpr int64_t kPanelColumns = 16;
  static constexpr int64_t kTileRows = 6;
  // x rows per block: at most this many bytes of x, so that the block stays in L2 beside the
  // panels and y streaming through (on the 512 KiB L2 of the 2-core machines 96 KiB beat
  // 192 KiB on 2048-row products with K = 128, dlm-bench-gemm).
  static constexpr int64_t kBlockBytes = 96 << 10;
  // Below this many flops a call runs on the calling thread alone. Once the pool's threads poll
  // before they sleep (ThreadPool.h) a parallel call costs a few microseconds, not tens: on the
  // 2-core machines one-at-a-time demo decoding (dlm-bench-engine's baseline, 32-row GEMMs of
  // 0.5-3 MFLOP) ran 675 tokens/s at 6 MFLOP, 734 at 2 and 755 at 0.5.
  static constexpr double kParallelFlops = 0.5e6;

  // W in PyTorch [out, in] layout; its first `outputs` rows (all when negative). With
  // `allowWideTiles`, full tiles use 512-bit registers where the CPU has AVX-512F (same bits).
  explicit InvariantGemm(const model::HostTensor &w, int64_t outputs = -1,
                         bool allowWideTiles = true);

  int64_t outputs() const { return outputs_; }
  int64_t inputs() const { return inputs_; }
  size_t packedBytes() const { return packed_.size() * sizeof(float); }
  bool wideTiles() const { return wideTiles_; }

  // y[rows, outputs] (+)= x[rows, inputs] W^T, row blocks and panels split among the pool's
  // threads.
  void run(const float *x, int64_t rows, float *y, bool accumulate, ThreadPool &pool) const;

private:
  int64_t blockRows(int64_t rows) const;
  // Rows of one block against panels [panelBegin, panelEnd).
  void runBlock(const float *x, int64_t rows, int64_t panelBegin, int64_t panelEnd, float *y,
                bool accumulate) const;

  int64_t outputs_ = 0, inputs_ = 0, panels_ = 0;
  std::vector<float, CacheLineAllocator<float>> packed_; // panels_ x [inputs_, kPanelColumns]
  // Full tiles in 512-bit registers (the CPU has AVX-512F): the same sums, twice the lanes.
  bool wideTiles_ = false;
};

} // namespace dlm::cpu
