// x [rows, K] times one tile of a projection's stored weight (PackedLinear's tiles: W^T's rows
// [K, width] row-major, bf16 bits, int8 or int4 codes), register-blocked: up to 12 rows by 32
// columns of sums live in AVX-512 registers while each 64-byte row of the tile is decoded once and
// multiplied by every row of that block of x (more rows: the tile again per 12, from L2). For the
// few rows of a batch-1 forward or an expert's tokens the weights then stream from memory once,
// where widening a tile for an sgemm or accumulating in L1 (PackedGemm's other paths) runs at a
// fraction of the bandwidth (bench/forward_limit.py).
#pragma once

#include <cstdint>

namespace dlm::cpu {

// Whether this CPU runs the kernels below (AVX-512F); PackedGemm takes its other paths elsewhere.
bool hasBlockedTileKernels();

// sums[r * width + c] = sum over i < k of x[r * ldx + i] * W(i, c), for r < rows and c < width
// (a multiple of 16), W(i, c) = tile[i * width + c] as bf16 bits, or as int8 codes (unscaled:
// the caller applies the column scales).
void multiplyTileBf16(const uint16_t *tile, int64_t k, int64_t width, const float *x, int64_t ldx,
                      int64_t rows, float *sums);
void multiplyTileInt8(const int8_t *tile, int64_t k, int64_t width, const float *x, int64_t ldx,
                      int64_t rows, float *sums);
// The same for an int4 tile (PackedLinear.h's int4Tiles layout: 8 bytes per 16 columns, byte j
// holding columns j and j + 8), W(i, c) = code(i, c) * scales[(i / group) * width + c] (f16 bits),
// for k a multiple of `group`.
void multiplyTileInt4(const uint8_t *tile, const uint16_t *scales, int64_t group, int64_t k,
                      int64_t width, const float *x, int64_t ldx, int64_t rows, float *sums);

// The same over any row-major bf16 matrix whose rows are ldw apart, into sums rows lds apart,
// added to what sums holds when `accumulate`: sums[r * lds + c] (+)= sum over i < k of
// x[r * ldx + i] * W(i, c), W(i, c) = w[i * ldw + c] (a column block of an embedding table [V, H]
// for a soft embedding, P [rows, V] times the table).
void multiplyRowsBf16(const uint16_t *w, int64_t ldw, int64_t k, int64_t width, const float *x,
                      int64_t ldx, int64_t rows, float *sums, int64_t lds, bool accumulate);

// The dot-product form for a bf16 weight in PyTorch's [out, in] layout, read where it lies (a
// tied LM head over the embedding table that embedding records read as stored, so that the
// table is held once): y[r * ldy + n] (+)= sum over i < k of x[r * ldx + i] * W(n, i),
// W(n, i) = w[n * ldw + i] as bf16 bits, for r < rows and n < outputs. 6 rows by 4 outputs a
// block, 16 inputs at a time (any k).
void multiplyByRowsBf16(const uint16_t *w, int64_t ldw, int64_t outputs, int64_t k, const float *x,
                        int64_t ldx, int64_t rows, float *y, int64_t ldy, bool accumulate);

// Whether this CPU runs multiplyBf16ByRowsBf16 (AVX-512 with BF16).
bool hasBf16DotKernels();
// The same in bf16 arithmetic, x given as bf16 bits [rows, ldx]: pairs of products summed in
// float32 by VDPBF16PS, 32 inputs at a time (as oneDNN's bf16 kernels multiply).
void multiplyBf16ByRowsBf16(const uint16_t *w, int64_t ldw, int64_t outputs, int64_t k,
                            const uint16_t *x, int64_t ldx, int64_t rows, float *y, int64_t ldy,
                            bool accumulate);

} // namespace dlm::cpu
