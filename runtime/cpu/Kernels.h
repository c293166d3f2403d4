// The CPU backend's kernels, one per file: Gemm.cpp (oneDNN), RmsNorm.cpp, Rope.cpp,
// Elementwise.cpp, Attention.cpp. Row-major float32 throughout; `rows` is the token count.
#pragma once

#include "runtime/cpu/HostKvPages.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/model/ModelWeights.h"
#include "support/Status.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace dlm::cpu {

// y[rows, outputs] = x[rows, w.cols] * W[:outputs]^T (+ bias), W in PyTorch [out, in] layout;
// with `accumulate` the product is added to what y holds (the GEMM's beta = 1). `outputs` <=
// w.rows lets the LM head skip padded embedding rows. Through oneDNN's sgemm, on up to `threads`
// threads (small GEMMs run on one: see Gemm.cpp).
Status linear(const float *x, int64_t rows, const model::HostTensor &w, int64_t outputs,
              const float *bias, float *y, int threads, bool accumulate = false);
inline Status linear(const float *x, int64_t rows, const model::HostTensor &w, const float *bias,
                     float *y, int threads, bool accumulate = false) {
  return linear(x, rows, w, w.rows, bias, y, threads, accumulate);
}

// Row-major C[m, n] = alpha * A[m, k] * op(B) with op(B) = B[k, n] or, with transposeB, B[n, k]^T;
// leading dimensions as in BLAS. oneDNN sgemm; small products on one thread.
Status matmul(bool transposeB, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
              int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc, int threads);

// y = x * rsqrt(mean(x^2) + eps) * weight per row of `width` values, in float32 with a double
// sum of squares; `rowStride` separates rows (>= width). y may alias x.
void rmsNorm(const float *x, int64_t rows, int64_t width, int64_t rowStride, const float *weight,
             double eps, float *y);

// cos and sin of position * theta^(-2i/headDim), i < headDim/2, computed in double and rounded
// to float (as the references do), for positions [0, positions()).
class RopeTable {
public:
  void build(int64_t positions, int64_t headDim, double theta);
  int64_t positions() const { return positions_; }
  const float *cos(int64_t position) const { return cos_.data() + position * half_; }
  const float *sin(int64_t position) const { return sin_.data() + position * half_; }

private:
  int64_t positions_ = 0;
  int64_t half_ = 0;
  double theta_ = 0;
  std::vector<float> cos_, sin_;
};

// NeoX rotary embedding in place on `heads` heads of each row: pairs (j, j + headDim/2). Row r
// sits at position firstPosition + r.
void applyRope(float *x, int64_t rows, int64_t rowStride, int64_t heads, int64_t headDim,
               const RopeTable &table, int64_t firstPosition);

// x = exp(x) elementwise, within 2 ulp on [-87, 88] (clamped outside), written so that the loop
// vectorises (libm's expf does not).
void expInPlace(float *x, int64_t count);

// gate = silu(gate) * up, elementwise.
void siluMultiply(float *gate, const float *up, int64_t count);

// h += delta, elementwise.
void addInPlace(float *h, const float *delta, int64_t count);

// Writes rows [0, count) of k and v ([count, kvWidth]) into token slots firstSlot.. of the pages.
void storeKv(HostKvPages &pages, const kv::PageIndex *blockTable, int64_t layer, int64_t firstSlot,
             int64_t count, const float *k, const float *v);

struct AttentionShape {
  int64_t heads = 0;
  int64_t kvHeads = 0;
  int64_t headDim = 0;
  bool causal = false;
};

// Query rows are processed this many at a time, bounding the score buffer.
inline constexpr int64_t kAttentionQueryChunk = 128;

// Scratch of pagedAttention for up to `tokens` keys and queries on `threads` threads: the keys and
// values of every KV head gathered out of the pages, and one score block per thread.
struct AttentionScratch {
  std::vector<float> keys, values, scores;

  void reserve(int64_t tokens, int64_t kvWidth, int threads) {
    keys.resize(static_cast<size_t>(tokens * kvWidth));
    values.resize(static_cast<size_t>(tokens * kvWidth));
    scores.resize(static_cast<size_t>(threads * std::min(tokens, kAttentionQueryChunk) * tokens));
  }
};

// out[q, heads*headDim] = softmax(Q K^T / sqrt(headDim)) V for `queries` query rows at positions
// firstPosition.., over the keys of slots [0, keyCount) read through `blockTable`; a causal mask
// hides keys after the query's position. Query head h reads KV head h / (heads / kvHeads).
// Scores and weighted sums are GEMMs over K and V gathered per KV head.
Status pagedAttention(const float *q, int64_t queries, int64_t firstPosition, int64_t keyCount,
                      const AttentionShape &shape, const HostKvPages &pages,
                      const kv::PageIndex *blockTable, int64_t layer, float *out,
                      AttentionScratch &scratch, ThreadPool &pool);

} // namespace dlm::cpu
