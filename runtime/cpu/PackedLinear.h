// A projection's weight W [N, K] (PyTorch's [out, in] layout, as artifacts store it) packed once,
// in the precision the artifact stores it, and the GEMMs that run on it:
//
// - f32 (and f16, widened): the layout oneDNN's matmul chooses (format_tag::any: blocked for its
//   brgemm kernels where the CPU has them, plain W^T otherwise), run by matmul primitives. Reading
//   W transposed through dnnl_sgemm on every call instead ran at 30-70% of the packed rate on the
//   forward's shapes (bench/gemm_rate.py measures both in one run). The layout depends on N, K
//   and the CPU, not on the row count M (checked for M = 1 .. 2048 on AVX-512 and plain layouts),
//   so one packed copy serves every forward; a primitive is made per M (about 150 us the first
//   time, then cached).
// - bf16 with bf16 arithmetic asked for (dlmc compile --activations bf16) where oneDNN's bf16
//   matmul is one of its brgemm kernels ("brg:" in its implementation: AVX-512-BF16 or AMX
//   instructions): oneDNN's bf16 layout, run by bf16 x bf16 -> f32 primitives, the activations
//   rounded to bf16 per call. Its GEMMs ran at 726 GFLOP/s on an AMX Xeon against about 200 for
//   the tiles below, and the 86M bench model at 37.7 forwards/s against 21.8 on a Zen 5 with
//   AVX-512-BF16. On AVX-512 without BF16 oneDNN 2.6 emulates bf16 in its gemm:jit at a fifth of
//   its float32 rate (49 against 247 GFLOP/s at 40 x 2048 x 768 on a 2-core Xeon), and AVX2 has
//   only reference code: there the tiles run and the activations stay float32.
// - bf16 otherwise (weight-only: the same results on every CPU), i8 or FP8 E4M3 with a scale
//   per output channel (weight-only int8 / FP8), and i4 with an f16 scale per group of inputs of
//   an output channel (weight-only int4): kept as stored, in column tiles of W^T ([K, T]
//   row-major each; i4 two codes a byte, its scales [K / group, T] a tile). The GEMM widens one
//   tile at a time to float32 in a thread's scratch (i8, FP8: times its columns' scales) and
//   multiplies it there (single-threaded sgemm per tile, the tiles spread over the pool): float32
//   arithmetic on the stored weights at a half (a quarter, about an eighth) of the float32 weights'
//   memory, on any CPU. On AVX-512 CPUs bf16 and int8 tiles multiply up to 128 rows (a batch-1
//   forward's block, a MoE expert's tokens) in registers instead (BlockedTileKernels.h: the weights
//   decoded once per row of x's block, streamed from memory once; int4 times its group's scales as
//   it is decoded). Elsewhere, up to 4 rows a tile is decoded one row of W^T at a time into L1 and
//   multiplied there: a GEMV that reads the weights once (with the tiles spread over every thread,
//   LLaDA2-mini's MoE block ran 2.2x faster than widening each tile for an sgemm on one thread;
//   bench/README.md). oneDNN 2.6 has no GEMM of bf16 or int8 weights with float32 activations.
//
// Packed from the stored tensor, so that an [N, K] float32 copy is never kept;
// ModelWeights::derived caches it, one per model, shared by every session.
#pragma once

#include "runtime/cpu/ThreadPool.h"
#include "runtime/model/ModelWeights.h"
#include "support/Status.h"

#include <dnnl.hpp>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace dlm::cpu {

class PackedLinear {
public:
  // How bf16 weights multiply: weight-only (tiles, float32 activations); in bf16 arithmetic
  // where oneDNN has a brgemm kernel for it (else as weightOnly); or in bf16 arithmetic wherever
  // oneDNN's bf16 matmul is not reference code, emulated or not (so that tests reach that path
  // on more CPUs; far slower than the tiles where it is emulated).
  enum class Bf16Gemm { weightOnly, bf16Arithmetic, bf16ArithmeticAnyKernel };
  // The first `outputs` rows of weight `name` of `weights` (all of them for a projection; the
  // vocabulary's for an LM head over a padded embedding table), packed on first use and shared
  // after that.
  static StatusOr<std::shared_ptr<const PackedLinear>> of(const model::ModelWeights &weights,
                                                          std::string_view name, int64_t outputs,
                                                          Bf16Gemm bf16 = Bf16Gemm::weightOnly);

  enum class Format { f32Packed, bf16Packed, bf16Tiles, int8Tiles, fp8Tiles, int4Tiles };
  Format format() const { return format_; }
  int64_t outputs() const { return outputs_; }
  int64_t inputs() const { return inputs_; }
  // The path its GEMMs take, in words, for profiles: "bf16 tiles, float32 arithmetic",
  // "f32 oneDNN brg:avx512_core" (oneDNN's implementation for the layout's shape).
  std::string path() const;
  // What the packed weight takes in memory.
  size_t bytes() const { return bytes_; }
  // f32Packed, bf16Packed: oneDNN's layout and a memory object on the data.
  const dnnl::memory::desc &layout() const { return layout_; }
  const dnnl::memory &memory() const { return memory_; }
  // The tile formats: tile t covers columns [t * tileWidth(), ...) of W^T, [K, tileWidth()]
  // row-major (the last one zero-padded). int4Tiles: a row of a tile is tileWidth() / 2 bytes, 8
  // bytes per 16 columns, byte j holding column j (low nibble) and column j + 8 (high nibble) of
  // the 16, as signed 4-bit values; tile t's group scales are [K / groupSize(), tileWidth()] f16.
  int64_t tileWidth() const { return tileWidth_; }
  int64_t tiles() const { return (outputs_ + tileWidth_ - 1) / tileWidth_; }
  // Tile t as float32 into `out` ([K, tileWidth()]).
  void widenTile(int64_t t, float *out) const;
  // Row i of tile t (W^T's row i, columns [t * tileWidth(), ...)) as float32 into `out`
  // ([tileWidth()]).
  void decodeTileRow(int64_t t, int64_t i, float *out) const;
  // Tile t as stored (bf16 bits, int8, FP8 or int4 codes), and its columns' scales (int8, FP8)
  // or its group scales (int4).
  const void *tileData(int64_t t) const;
  const float *tileScales(int64_t t) const {
    return columnScales_.empty() ? nullptr : columnScales_.data() + t * tileWidth_;
  }
  int64_t groupSize() const { return groupSize_; }
  const uint16_t *tileGroupScales(int64_t t) const {
    return groupScales_.data() + t * (inputs_ / groupSize_) * tileWidth_;
  }

  PackedLinear() = default;
  PackedLinear(const PackedLinear &) = delete;
  PackedLinear &operator=(const PackedLinear &) = delete;

private:
  friend class PackedExperts;
  struct Free {
    void operator()(void *p) const { std::free(p); }
  };
  // `stored` (outputs_ x inputs_) packed: f32 and f16 in oneDNN's f32 layout; bf16 in its bf16
  // layout when `bf16` asks for bf16 arithmetic and the CPU has it; else tiles.
  Status pack(const model::ModelWeights &weights, const model::StoredTensor &stored, Bf16Gemm bf16);
  // oneDNN's layout for `type` (f32 or bf16) weights and activations; false for bf16 when
  // oneDNN's matmul for it is reference code, or not a brgemm kernel and `bf16` asks for one.
  StatusOr<bool> packOneDnn(const model::ModelWeights &weights, const model::StoredTensor &stored,
                            dnnl::memory::data_type type, Bf16Gemm bf16);
  Status packTiles(const model::ModelWeights &weights, const model::StoredTensor &stored);
  Status packInt4Tiles(const model::ModelWeights &weights, const model::StoredTensor &stored);
  // Tile widths for an N x K weight: as few tiles as fit in L2 widened, a multiple of the threads.
  void chooseTileWidth();

  Format format_ = Format::f32Packed;
  int64_t outputs_ = 0, inputs_ = 0, tileWidth_ = 0;
  size_t bytes_ = 0;
  dnnl::memory::desc layout_;
  std::unique_ptr<void, Free> data_; // 64-byte aligned
  std::vector<float> columnScales_;  // int8Tiles, fp8Tiles: W's row scales, zero-padded
  std::vector<uint16_t> groupScales_; // int4Tiles: each tile's [K / groupSize_, tileWidth_] f16
  int64_t groupSize_ = 0;             // int4Tiles
  dnnl::memory memory_;              // a view of data_ in layout_
  std::string implementation_;       // f32Packed, bf16Packed: oneDNN's impl_info_str
};

// The experts of a mixture-of-experts stack (a moe record's gate_up or down: [E, N, K] stored as
// E * N rows of K, with E * N row scales when 8-bit, E * N rows of group scales when 4-bit) kept
// as stored, bf16, i8, FP8 E4M3 or i4, each
// expert's [N, K] slice packed as a projection's (PackedLinear: tiles, or oneDNN's bf16 layout
// with bf16 arithmetic), so that the experts run on the projections' GEMM at their stored size
// instead of a float32 copy.
class PackedExperts {
public:
  // Whether a stack stored as `dtype` is packed (f32 and f16 stacks are read widened).
  static bool packs(artifact::DType dtype);
  // Stack `name` of `experts` experts, packed on first use and shared after that.
  static StatusOr<std::shared_ptr<const PackedExperts>>
  of(const model::ModelWeights &weights, std::string_view name, int64_t experts,
     PackedLinear::Bf16Gemm bf16 = PackedLinear::Bf16Gemm::weightOnly);

  const PackedLinear &expert(int64_t e) const { return *experts_[static_cast<size_t>(e)]; }
  size_t bytes() const { return bytes_; }

private:
  std::vector<std::unique_ptr<PackedLinear>> experts_;
  size_t bytes_ = 0;
};

// Runs y[rows, N] (+)= x[rows, K] W^T (+ bias) on packed weights, on the pool's threads: for
// oneDNN's layouts one matmul primitive per (rows, N, K, format, team size, accumulate), made on
// first use; for the tiles a scratch per thread. One per backend (it holds the calls' memory
// objects and the scratch).
class PackedGemm {
public:
  PackedGemm();
  Status run(const PackedLinear &w, const float *x, int64_t rows, const float *bias, float *y,
             ThreadPool &pool, bool accumulate);

private:
  Status runOneDnn(const PackedLinear &w, const float *x, int64_t rows, float *y, int threads,
                   bool accumulate);
  Status runTiles(const PackedLinear &w, const float *x, int64_t rows, float *y, ThreadPool &pool,
                  bool accumulate);
  static void multiplyBlocked(const PackedLinear &w, int64_t t, const float *x, int64_t rows,
                              float *scratch, float *y, int64_t ldy, int64_t columns,
                              bool accumulate);
  static void multiplySmallRows(const PackedLinear &w, int64_t t, const float *x, int64_t rows,
                                float *scratch, float *y, int64_t ldy, int64_t columns,
                                bool accumulate);

  struct Call {
    dnnl::matmul primitive;
    dnnl::memory x, y;
  };
  StatusOr<Call *> call(const PackedLinear &w, int64_t rows, int team, bool accumulate);

  dnnl::stream stream_; // made at the first call (oneDNN reports errors by exceptions)
  // By rows, N, K, format, team size, accumulate.
  std::map<std::tuple<int64_t, int64_t, int64_t, int, int, bool>, Call> calls_;
  std::vector<std::vector<float>> tileScratch_; // one per pool thread
  std::vector<uint16_t> bf16Rows_;              // bf16Packed: the activations rounded
};

// The engine every packed weight and primitive of the process uses.
const dnnl::engine &cpuEngine();

} // namespace dlm::cpu
