// The CPU backend's kernels, one per file: Gemm.cpp (oneDNN), RmsNorm.cpp, Rope.cpp,
// Elementwise.cpp, Attention.cpp, SoftEmbedding.cpp, Moe.cpp, InputRows.cpp. Each file also holds
// the runners (CpuBackend members) of the kinds its kernel serves; Projection.cpp holds the
// projections' runners over Gemm.cpp and InvariantGemm. Row-major float32 throughout; `rows` is
// the token count.
#pragma once

#include "runtime/cpu/HostKvPages.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/model/KernelParams.h"
#include "runtime/model/ModelWeights.h"
#include "support/Status.h"

#include <algorithm>
#include <cstdint>
#include <string>
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

// The OpenMP team size of the calling thread's oneDNN calls (and of the primitives it makes).
void setOneDnnThreads(int threads);

// Below this many flops a GEMM runs on one thread. Measured on the 2-core machines: a tiny
// transformer's GEMMs (~0.1-1 MFLOP) took ~3 ms each with two OpenMP threads when the other core
// was busy (the barrier waits for a descheduled thread) and ~10 us on one. At ~50 GFLOP/s per
// core, 16 MFLOP is ~300 us of work, well above any synchronisation cost.
inline constexpr double kParallelGemmFlops = 16e6;

// y[r, c] += bias[c] over `rows` rows of `outputs`.
void addBias(const float *bias, int64_t rows, int64_t outputs, float *y);

// Row-major C[m, n] = alpha * A[m, k] * op(B) with op(B) = B[k, n] or, with transposeB, B[n, k]^T;
// leading dimensions as in BLAS. oneDNN sgemm; small products on one thread.
Status matmul(bool transposeB, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
              int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc, int threads);

// y = x * rsqrt(mean(x^2) + eps) * weight per row of `width` values, in float32 with a double
// sum of squares; `rowStride` separates rows (>= width). y may alias x. A null weight: no weight.
void rmsNorm(const float *x, int64_t rows, int64_t width, int64_t rowStride, const float *weight,
             double eps, float *y);

// cos and sin of position * theta^(-2i/rotaryDim), i < rotaryDim/2, computed in double and
// rounded to float (as the references do), for positions [0, positions()). Only pairs
// i < rotatedPairs rotate (negative: all of them); the others get cos 1, sin 0 and pass through
// exactly.
class RopeTable {
public:
  void build(int64_t positions, int64_t rotaryDim, double theta, int64_t rotatedPairs = -1);
  int64_t positions() const { return positions_; }
  // The pairs of a head: (j, j + half()), j < half().
  int64_t half() const { return half_; }
  const float *cos(int64_t position) const { return cos_.data() + position * half_; }
  const float *sin(int64_t position) const { return sin_.data() + position * half_; }

private:
  int64_t positions_ = 0;
  int64_t half_ = 0;
  int64_t rotated_ = 0;
  double theta_ = 0;
  std::vector<float> cos_, sin_;
};

// NeoX rotary embedding in place on `heads` heads of `headDim` of each row: pairs
// (j, j + table.half()), j < table.half(); the dims from 2 * table.half() on pass through (partial
// rotary). Row r sits at position firstPosition + r.
void applyRope(float *x, int64_t rows, int64_t rowStride, int64_t heads, int64_t headDim,
               const RopeTable &table, int64_t firstPosition);

// x = exp(x) elementwise, within 2 ulp on [-87, 88] (clamped outside), written so that the loop
// vectorises (libm's expf does not).
void expInPlace(float *x, int64_t count);

// x = softmax(x) over `count` values, in float32 with a double sum (one order of summation, so
// every caller agrees to the bit).
void softmaxInPlace(float *x, int64_t count);

// gate = silu(gate) * up, elementwise.
void siluMultiply(float *gate, const float *up, int64_t count);

// gate = gelu_tanh(gate) * up, elementwise, in float32:
// gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
void geluTanhMultiply(float *gate, const float *up, int64_t count);

// x *= factor, elementwise.
void scaleInPlace(float *x, float factor, int64_t count);

// x = cap * tanh(x / cap), elementwise, in float32.
void softcapInPlace(float *x, float cap, int64_t count);

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
  // Scores are scale * q.k; 0: 1 / sqrt(headDim).
  double scale = 0;
  // 0: none. Causal: the query at position i sees keys j with i - window < j <= i.
  // Bidirectional: every key at or after the forward's first position, and the keys j before it
  // with first - j < window.
  int64_t window = 0;
  // 0: none. Otherwise (not causal, no window) the query at position i sees keys j with
  // j / block <= i / block: block-causal attention over blocks from position 0.
  int64_t block = 0;
};

// Query rows are processed this many at a time, bounding the score buffer.
inline constexpr int64_t kAttentionQueryChunk = 128;

// Scratch of pagedAttention for up to `tokens` keys and queries on `threads` threads, one slice
// per thread: the keys and values of every KV head gathered out of the pages, and a score block.
// A single part's attention gathers into slice 0 and spreads its heads over every slice's scores;
// several parts run one per thread, each in its own slice.
struct AttentionScratch {
  std::vector<float> keys, values, scores;
  int64_t keysPerThread = 0, scoresPerThread = 0;

  void reserve(int64_t tokens, int64_t kvWidth, int threads) {
    const int64_t keySlice = tokens * kvWidth;
    const int64_t scoreSlice = std::min(tokens, kAttentionQueryChunk) * tokens;
    if (keySlice <= keysPerThread && scoreSlice <= scoresPerThread &&
        static_cast<size_t>(threads * keySlice) <= keys.size())
      return;
    keysPerThread = keySlice;
    scoresPerThread = scoreSlice;
    keys.resize(static_cast<size_t>(threads * keySlice));
    values.resize(static_cast<size_t>(threads * keySlice));
    scores.resize(static_cast<size_t>(threads * scoreSlice));
  }
};

// One part of a packed attention: `queries` rows of q at positions firstPosition.. over the slots
// [0, keyCount) of its block table, into `out` (rows of heads * headDim, like q).
struct AttentionPart {
  const float *q = nullptr;
  int64_t queries = 0, firstPosition = 0, keyCount = 0;
  const kv::PageIndex *blockTable = nullptr;
  float *out = nullptr;
};

Status pagedAttention(const float *q, int64_t queries, int64_t firstPosition, int64_t keyCount,
                      const AttentionShape &shape, const HostKvPages &pages,
                      const kv::PageIndex *blockTable, int64_t layer, float *out,
                      AttentionScratch &scratch, ThreadPool &pool);

// pagedAttention of every part. Several parts run one per thread, balanced by their score sizes,
// each part computed exactly as alone (the same units in the same order), so that a row's result
// does not depend on the other parts.
Status pagedAttentionParts(const std::vector<AttentionPart> &parts, const AttentionShape &shape,
                           const HostKvPages &pages, int64_t layer, AttentionScratch &scratch,
                           ThreadPool &pool);

// The forward's float input rows as a soft_embedding reads them: out[t, H] =
// (softmax(input[t, :inputWidth]) @ table[:inputWidth]) * scale for `rows` rows (softmax in
// float32 with a double sum); zeros when input is null, and on the rows whose token (`tokens`,
// one per row) is not `maskToken` when that is >= 0. The table as the backend holds it (as
// stored, or widened when batch-invariant): float32 by oneDNN's sgemm; bf16 whose width is a
// multiple of 16, on AVX-512 CPUs, by the register-blocked kernels (BlockedTileKernels.h), each
// 32 columns of it over every row of the chunk; otherwise (f16, 8-bit, other bf16) widened a
// panel of rows at a time into the scratch for an sgemm.
// `scratch` holds softEmbeddingScratchFloats(...) floats (grown when it is smaller).
inline constexpr int64_t kSoftEmbeddingChunk = 32;
size_t softEmbeddingScratchFloats(int64_t rows, int64_t inputWidth, int64_t hidden);
Status softEmbedding(const float *input, int64_t rows, int64_t inputWidth,
                     const model::StoredTensor &table, float scale, const int32_t *tokens,
                     int64_t maskToken, float *out, std::vector<float> &scratch, ThreadPool &pool);
// How softEmbedding multiplies `table` on this CPU, in words: "bf16 as stored, register-blocked
// AVX-512 kernels".
std::string softEmbeddingPath(const model::StoredTensor &table);

// Speculative decoding's row moves (InputRows.cpp), rows of `width` floats:
// out[rows] = input[0, given) then zero rows (forward_input; input may be null when given is 0).
void copyInputRows(const float *input, int64_t given, int64_t rows, int64_t width, float *out);
// out row r = a's row r for r < split, else b's; out may alias a or b (select_input_rows).
void selectRows(const float *a, const float *b, int64_t split, int64_t rows, int64_t width,
                float *out);
// Rows of x[rows, width] into columns [0, width) of out rows `outStride` apart (capture).
void copyColumns(const float *x, int64_t rows, int64_t width, float *out, int64_t outStride);

// Scratch of moeForward for up to `tokens` tokens.
struct MoeScratch {
  std::vector<float> routed;     // [T, H] the router's normalised input
  std::vector<float> logits;     // [T, E] router logits, then probabilities
  std::vector<int32_t> choice;   // [T, topK] chosen experts
  std::vector<float> weight;     // [T, topK] their weights
  std::vector<int32_t> order;    // [E] the experts of one token, by weight
  std::vector<float> choosing;   // [E] one token's scores plus the expert bias (what chooses)
  std::vector<int32_t> groups;   // [E] one token's groups, by group score
  std::vector<float> groupScore; // [E] their scores
  // What one thread needs to run an expert: its (token, choice) pairs as token * topK + choice,
  // its input rows [T, H], gate_up [T, 2I], activation [T, I] and output [T, H].
  struct Expert {
    std::vector<int32_t> slots;
    std::vector<float> gathered, gateUp, activation, output;
  };
  std::vector<Expert> experts; // one per thread
  // [S, H]: each (token, choice) pair's expert output, when the experts run one per thread (S
  // up to parallelSlots).
  std::vector<float> slotOutput;
  int64_t parallelSlots = 0;

  // For forwards of up to `tokens` tokens on `threads` threads (rowByRow: batch-invariant, the
  // experts never one per thread).
  void reserve(int64_t tokens, int64_t hidden, int64_t experts, int64_t topK, int64_t expertWidth,
               int threads, bool rowByRow);
  size_t bytes() const;
};

// A mixture of experts (runtime/model/KernelProgram.h, kind "moe") over `rows` tokens: router
// input r and expert input x, both [rows, H], into y [rows, H] (not aliasing them). Routing in
// float32 (with routerNorm, r rms-normed and scaled by routerScale (null: ones) and
// routerInputScale first; softmax over the experts, or sigmoid scores; the topK largest of score
// plus expertBias (when given) among the topGroups best of `groups` groups (a group scores its
// two largest), ties to the lower id, their scores renormalised with normalizeTopK, times
// expertScale[e] when given and routedScale);
// each expert's tokens gathered and run through its slice of gateUp ([2I, H]: gate rows first)
// and down ([H, I]) as two GEMMs by `expertGemm` with act(gate) * up between; y = sum of weight *
// expert output over a token's experts in ascending order, in float32. moeForward reads the
// router's weights, not the experts'. rowByRow: the router's product a row at a time (batch
// invariance; the caller's expertGemm does the same). The experts run one per thread of `pool`
// (their products on that thread alone) when the forward's (token, choice) pairs fit
// scratch.parallelSlots (not with rowByRow), else one after the other, each product on every
// thread; the outputs are added in the same order either way, so y is the same wherever a
// product's result does not depend on its thread count (the tiles'; an expert product large
// enough for oneDNN to split over threads may differ in its last bits).
// The parameters are the record's own, its weights resolved; expertWidth is I.
using MoeParams = spec::kernels::MoeParams;
// out[rows, N] = in[rows, K] W^T for W expert e's slice of gateUp (N = 2I, K = H) or of down (N =
// H, K = I), on every thread of the pool (thread < 0) or on pool thread `thread` alone. A
// non-owning callable, as ThreadPool::parallelFor's body: a forward must not allocate per step.
enum class ExpertMatrix { gateUp, down };
class ExpertGemm {
public:
  template <typename F>
  explicit ExpertGemm(F &gemm)
      : context_(&gemm), call_([](void *context, ExpertMatrix matrix, int64_t expert,
                                  const float *in, int64_t rows, float *out, int thread) {
          return (*static_cast<F *>(context))(matrix, expert, in, rows, out, thread);
        }) {}
  Status operator()(ExpertMatrix matrix, int64_t expert, const float *in, int64_t rows, float *out,
                    int thread) const {
    return call_(context_, matrix, expert, in, rows, out, thread);
  }

private:
  void *context_;
  Status (*call_)(void *, ExpertMatrix, int64_t, const float *, int64_t, float *, int);
};
// The GEMM of float32 (widened) experts: out = in W^T, W the slice of moe.gateUp or moe.down.
Status widenedExpertGemm(const MoeParams &moe, int64_t expertWidth, int64_t hidden,
                         ExpertMatrix matrix, int64_t expert, const float *in, int64_t rows,
                         float *out, int threads);
Status moeForward(const float *r, const float *x, int64_t rows, int64_t hidden,
                  const MoeParams &moe, int64_t expertWidth, float *y, MoeScratch &scratch,
                  ThreadPool &pool, const ExpertGemm &expertGemm, bool rowByRow = false);

} // namespace dlm::cpu
