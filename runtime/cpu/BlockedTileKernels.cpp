// The register-blocked tile kernels (BlockedTileKernels.h), compiled for AVX-512F whatever the
// build's baseline and called only where the CPU has it.
#include "runtime/cpu/BlockedTileKernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace dlm::cpu {

#if defined(__x86_64__)

namespace {

// 12 rows x 32 columns: 24 accumulators, two decoded weight vectors and a broadcast fit the 32
// registers.
constexpr int kRowsPerBlock = 12;
// How many tile rows ahead the kernel prefetches.
constexpr int64_t kPrefetchRows = 32;

#define DLM_AVX512 __attribute__((target("avx512f")))

// 16 bf16 values (bits) as float32: the bits are a float's upper half.
DLM_AVX512 inline __m512 widenBf16(__m256i bits) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

DLM_AVX512 inline __m512 widenInt8(__m128i codes) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(codes));
}

// The 16 (kWide false) or 32 columns at `column` of tile row i, as float32.
template <bool kWide, typename Code>
DLM_AVX512 inline void loadColumns(const Code *row, __m512 &low, __m512 &high) {
  if constexpr (sizeof(Code) == 2) {
    low = widenBf16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(row)));
    if constexpr (kWide)
      high = widenBf16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(row + 16)));
  } else {
    low = widenInt8(_mm_loadu_si128(reinterpret_cast<const __m128i *>(row)));
    if constexpr (kWide)
      high = widenInt8(_mm_loadu_si128(reinterpret_cast<const __m128i *>(row + 16)));
  }
}

// R rows x (kWide ? 32 : 16) columns starting at `column`.
template <int R, bool kWide, typename Code>
DLM_AVX512 void block(const Code *w, int64_t ldw, int64_t k, int64_t column, const float *x,
                      int64_t ldx, float *sums, int64_t lds, bool accumulate) {
  __m512 low[R], high[R];
  for (int r = 0; r < R; ++r) {
    low[r] = accumulate ? _mm512_loadu_ps(sums + r * lds + column) : _mm512_setzero_ps();
    high[r] = accumulate && kWide ? _mm512_loadu_ps(sums + r * lds + column + 16)
                                  : _mm512_setzero_ps();
  }
  const Code *row = w + column;
  for (int64_t i = 0; i < k; ++i, row += ldw) {
    // The rows of a column block are ldw apart: fetched ahead, as the hardware's prefetchers do
    // not for such strides.
    if (i + kPrefetchRows < k)
      _mm_prefetch(reinterpret_cast<const char *>(row + kPrefetchRows * ldw), _MM_HINT_T0);
    __m512 w0, w1 = _mm512_setzero_ps();
    loadColumns<kWide>(row, w0, w1);
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(x[r * ldx + i]);
      low[r] = _mm512_fmadd_ps(a, w0, low[r]);
      if constexpr (kWide)
        high[r] = _mm512_fmadd_ps(a, w1, high[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_ps(sums + r * lds + column, low[r]);
    if constexpr (kWide)
      _mm512_storeu_ps(sums + r * lds + column + 16, high[r]);
  }
}

template <int R, typename Code>
DLM_AVX512 void rowsBlock(const Code *w, int64_t ldw, int64_t k, int64_t width, const float *x,
                          int64_t ldx, float *sums, int64_t lds, bool accumulate) {
  int64_t column = 0;
  for (; column + 32 <= width; column += 32)
    block<R, true>(w, ldw, k, column, x, ldx, sums, lds, accumulate);
  if (column < width)
    block<R, false>(w, ldw, k, column, x, ldx, sums, lds, accumulate);
}

template <typename Code>
void multiplyRows(const Code *w, int64_t ldw, int64_t k, int64_t width, const float *x,
                  int64_t ldx, int64_t rows, float *sums, int64_t lds, bool accumulate) {
  using Block = void (*)(const Code *, int64_t, int64_t, int64_t, const float *, int64_t, float *,
                         int64_t, bool);
  static constexpr Block kBlocks[kRowsPerBlock] = {
      rowsBlock<1, Code>, rowsBlock<2, Code>,  rowsBlock<3, Code>,  rowsBlock<4, Code>,
      rowsBlock<5, Code>, rowsBlock<6, Code>,  rowsBlock<7, Code>,  rowsBlock<8, Code>,
      rowsBlock<9, Code>, rowsBlock<10, Code>, rowsBlock<11, Code>, rowsBlock<12, Code>};
  for (int64_t first = 0; first < rows; first += kRowsPerBlock) {
    const int64_t count = rows - first < kRowsPerBlock ? rows - first : kRowsPerBlock;
    kBlocks[count - 1](w, ldw, k, width, x + first * ldx, ldx, sums + first * lds, lds,
                       accumulate);
  }
}

// The dot-product form, for a weight read in PyTorch's [out, in] layout: R rows of x by V rows
// of W, 16 lanes of partial sums each (R * V <= 24 registers), reduced at the end.
template <int R, int V>
DLM_AVX512 inline void dotStep(const uint16_t *w, int64_t ldw, const float *x, int64_t ldx,
                               __m512 (&sums)[R][V]) {
  __m512 weights[V];
  for (int v = 0; v < V; ++v)
    weights[v] = widenBf16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(w + v * ldw)));
  for (int r = 0; r < R; ++r) {
    const __m512 a = _mm512_loadu_ps(x + r * ldx);
    for (int v = 0; v < V; ++v)
      sums[r][v] = _mm512_fmadd_ps(a, weights[v], sums[r][v]);
  }
}

template <int R, int V>
DLM_AVX512 void dotBlock(const uint16_t *w, int64_t ldw, int64_t k, const float *x, int64_t ldx,
                         float *y, int64_t ldy, bool accumulate) {
  __m512 sums[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v)
      sums[r][v] = _mm512_setzero_ps();
  const int64_t whole = k - k % 16;
  for (int64_t i = 0; i < whole; i += 16)
    dotStep<R, V>(w + i, ldw, x + i, ldx, sums);
  if (whole < k) {
    // The last k % 16 inputs, zero-padded to 16 in local copies.
    alignas(64) uint16_t wTail[V][16] = {};
    alignas(64) float xTail[R][16] = {};
    for (int v = 0; v < V; ++v)
      for (int64_t i = whole; i < k; ++i)
        wTail[v][i - whole] = w[v * ldw + i];
    for (int r = 0; r < R; ++r)
      for (int64_t i = whole; i < k; ++i)
        xTail[r][i - whole] = x[r * ldx + i];
    dotStep<R, V>(&wTail[0][0], 16, &xTail[0][0], 16, sums);
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) {
      const float sum = _mm512_reduce_add_ps(sums[r][v]);
      y[r * ldy + v] = accumulate ? y[r * ldy + v] + sum : sum;
    }
}

constexpr int kDotRows = 4, kDotOutputs = 6;

template <int R>
DLM_AVX512 void dotRows(const uint16_t *w, int64_t ldw, int64_t outputs, int64_t k,
                        const float *x, int64_t ldx, float *y, int64_t ldy, bool accumulate) {
  using Block = void (*)(const uint16_t *, int64_t, int64_t, const float *, int64_t, float *,
                         int64_t, bool);
  static constexpr Block kTails[kDotOutputs] = {dotBlock<R, 1>, dotBlock<R, 2>, dotBlock<R, 3>,
                                                dotBlock<R, 4>, dotBlock<R, 5>, dotBlock<R, 6>};
  for (int64_t n = 0; n < outputs; n += kDotOutputs) {
    const int64_t count = outputs - n < kDotOutputs ? outputs - n : kDotOutputs;
    kTails[count - 1](w + n * ldw, ldw, k, x, ldx, y + n, ldy, accumulate);
  }
}

} // namespace

bool hasBlockedTileKernels() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return has;
}

void multiplyTileBf16(const uint16_t *tile, int64_t k, int64_t width, const float *x, int64_t ldx,
                      int64_t rows, float *sums) {
  multiplyRows(tile, width, k, width, x, ldx, rows, sums, width, false);
}

void multiplyTileInt8(const int8_t *tile, int64_t k, int64_t width, const float *x, int64_t ldx,
                      int64_t rows, float *sums) {
  multiplyRows(tile, width, k, width, x, ldx, rows, sums, width, false);
}

void multiplyRowsBf16(const uint16_t *w, int64_t ldw, int64_t k, int64_t width, const float *x,
                      int64_t ldx, int64_t rows, float *sums, int64_t lds, bool accumulate) {
  multiplyRows(w, ldw, k, width, x, ldx, rows, sums, lds, accumulate);
}

void multiplyByRowsBf16(const uint16_t *w, int64_t ldw, int64_t outputs, int64_t k,
                        const float *x, int64_t ldx, int64_t rows, float *y, int64_t ldy,
                        bool accumulate) {
  using Rows = void (*)(const uint16_t *, int64_t, int64_t, int64_t, const float *, int64_t,
                        float *, int64_t, bool);
  static constexpr Rows kRows[kDotRows] = {dotRows<1>, dotRows<2>, dotRows<3>, dotRows<4>};
  for (int64_t first = 0; first < rows; first += kDotRows) {
    const int64_t count = rows - first < kDotRows ? rows - first : kDotRows;
    kRows[count - 1](w, ldw, outputs, k, x + first * ldx, ldx, y + first * ldy, ldy, accumulate);
  }
}

#else

bool hasBlockedTileKernels() { return false; }
void multiplyByRowsBf16(const uint16_t *, int64_t, int64_t, int64_t, const float *, int64_t,
                        int64_t, float *, int64_t, bool) {}
void multiplyTileBf16(const uint16_t *, int64_t, int64_t, const float *, int64_t, int64_t,
                      float *) {}
void multiplyTileInt8(const int8_t *, int64_t, int64_t, const float *, int64_t, int64_t, float *) {}
void multiplyRowsBf16(const uint16_t *, int64_t, int64_t, int64_t, const float *, int64_t, int64_t,
                      float *, int64_t, bool) {}

#endif

} // namespace dlm::cpu
