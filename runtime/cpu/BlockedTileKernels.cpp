// The register-blocked tile kernels and the dot-product kernels (BlockedTileKernels.h), compiled
// for AVX-512F (the bf16-arithmetic ones for AVX-512-BF16) whatever the build's baseline and
// called only where the CPU has it.
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

// The 16 (kWide false) or 32 columns at `row` of a tile row, as float32.
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

// 16 columns of an int4 tile row (8 bytes, byte j holding columns j and j + 8) as float32: the
// high nibbles shifted down beside the low ones, both masked, sign-extended from 4 bits.
DLM_AVX512 inline __m512 widenInt4(const uint8_t *codes) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i *>(codes));
  const __m128i nibbles =
      _mm_and_si128(_mm_unpacklo_epi64(bytes, _mm_srli_epi16(bytes, 4)), _mm_set1_epi8(0x0F));
  const __m128i eight = _mm_set1_epi8(8);
  return widenInt8(_mm_sub_epi8(_mm_xor_si128(nibbles, eight), eight));
}

// The rows of a column block of bf16 bits or int8 codes, ldw elements apart.
template <typename Code> struct PlainColumns {
  const Code *w;
  int64_t ldw;

  PlainColumns at(int64_t column) const { return {w + column, ldw}; }
  DLM_AVX512 void prefetch(int64_t i) const {
    _mm_prefetch(reinterpret_cast<const char *>(w + i * ldw), _MM_HINT_T0);
  }
  template <bool kWide> DLM_AVX512 void load(int64_t i, __m512 &low, __m512 &high) {
    loadColumns<kWide>(w + i * ldw, low, high);
  }
};

// The rows of a column block of an int4 tile (ldw bytes apart), each times the scales of its
// group (f16, [k / group, lds]), which are widened once a group.
struct Int4Columns {
  const uint8_t *w;
  int64_t ldw;
  const uint16_t *scales;
  int64_t lds, group;
  int64_t groupEnd = 0;
  __m512 scaleLow{}, scaleHigh{};

  Int4Columns at(int64_t column) const {
    return {w + column / 2, ldw, scales + column, lds, group};
  }
  DLM_AVX512 void prefetch(int64_t i) const {
    _mm_prefetch(reinterpret_cast<const char *>(w + i * ldw), _MM_HINT_T0);
  }
  template <bool kWide> DLM_AVX512 void load(int64_t i, __m512 &low, __m512 &high) {
    if (i == groupEnd) {
      const uint16_t *s = scales + i / group * lds;
      scaleLow = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(s)));
      if constexpr (kWide)
        scaleHigh = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(s + 16)));
      groupEnd += group;
    }
    low = _mm512_mul_ps(widenInt4(w + i * ldw), scaleLow);
    if constexpr (kWide)
      high = _mm512_mul_ps(widenInt4(w + i * ldw + 8), scaleHigh);
  }
};

// R rows x (kWide ? 32 : 16) columns, `columns` and `sums` at the block's first column.
template <int R, bool kWide, typename Columns>
DLM_AVX512 void block(Columns columns, int64_t k, const float *x, int64_t ldx, float *sums,
                      int64_t lds, bool accumulate) {
  __m512 low[R], high[R];
  for (int r = 0; r < R; ++r) {
    low[r] = accumulate ? _mm512_loadu_ps(sums + r * lds) : _mm512_setzero_ps();
    high[r] = accumulate && kWide ? _mm512_loadu_ps(sums + r * lds + 16) : _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < k; ++i) {
    // The rows of a column block are ldw apart: fetched ahead, as the hardware's prefetchers do
    // not for such strides.
    if (i + kPrefetchRows < k)
      columns.prefetch(i + kPrefetchRows);
    __m512 w0, w1 = _mm512_setzero_ps();
    columns.template load<kWide>(i, w0, w1);
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(x[r * ldx + i]);
      low[r] = _mm512_fmadd_ps(a, w0, low[r]);
      if constexpr (kWide)
        high[r] = _mm512_fmadd_ps(a, w1, high[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_ps(sums + r * lds, low[r]);
    if constexpr (kWide)
      _mm512_storeu_ps(sums + r * lds + 16, high[r]);
  }
}

template <int R, typename Columns>
DLM_AVX512 void rowsBlock(const Columns &columns, int64_t k, int64_t width, const float *x,
                          int64_t ldx, float *sums, int64_t lds, bool accumulate) {
  int64_t column = 0;
  for (; column + 32 <= width; column += 32)
    block<R, true>(columns.at(column), k, x, ldx, sums + column, lds, accumulate);
  if (column < width)
    block<R, false>(columns.at(column), k, x, ldx, sums + column, lds, accumulate);
}

template <typename Columns>
void multiplyRows(const Columns &columns, int64_t k, int64_t width, const float *x, int64_t ldx,
                  int64_t rows, float *sums, int64_t lds, bool accumulate) {
  using Block =
      void (*)(const Columns &, int64_t, int64_t, const float *, int64_t, float *, int64_t, bool);
  static constexpr Block kBlocks[kRowsPerBlock] = {
      rowsBlock<1, Columns>,  rowsBlock<2, Columns>,  rowsBlock<3, Columns>,
      rowsBlock<4, Columns>,  rowsBlock<5, Columns>,  rowsBlock<6, Columns>,
      rowsBlock<7, Columns>,  rowsBlock<8, Columns>,  rowsBlock<9, Columns>,
      rowsBlock<10, Columns>, rowsBlock<11, Columns>, rowsBlock<12, Columns>};
  for (int64_t first = 0; first < rows; first += kRowsPerBlock) {
    const int64_t count = rows - first < kRowsPerBlock ? rows - first : kRowsPerBlock;
    kBlocks[count - 1](columns, k, width, x + first * ldx, ldx, sums + first * lds, lds,
                       accumulate);
  }
}

// The dot-product form, for a weight read in PyTorch's [out, in] layout: R rows of x by V rows
// of W, 16 lanes of partial sums each (R * V <= 24 registers), reduced at the end 4 outputs at
// once (a reduction per output cost as much as the products at K = 512).
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

// The sums of 4 vectors' lanes: [sum a, sum b, sum c, sum d].
DLM_AVX512 inline __m128 sum4(__m512 a, __m512 b, __m512 c, __m512 d) {
  // Per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3], then [a, b, c, d] of the lane.
  const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  const __m512 lanes = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 half =
      _mm256_add_ps(_mm512_castps512_ps256(lanes),
                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(lanes), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(half), _mm256_extractf128_ps(half, 1));
}

// y[r * ldy + v] (+)= the sum of sums[r][v]'s lanes, 4 outputs reduced at once.
template <int R, int V>
DLM_AVX512 inline void storeDotSums(__m512 (&sums)[R][V], float *y, int64_t ldy, bool accumulate) {
  static_assert(V <= 4, "sum4 reduces 4 outputs");
  const __m512 zero = _mm512_setzero_ps();
  for (int r = 0; r < R; ++r) {
    alignas(16) float reduced[4];
    _mm_store_ps(reduced, sum4(sums[r][0], V > 1 ? sums[r][V > 1 ? 1 : 0] : zero,
                               V > 2 ? sums[r][V > 2 ? 2 : 0] : zero,
                               V > 3 ? sums[r][V > 3 ? 3 : 0] : zero));
    for (int v = 0; v < V; ++v)
      y[r * ldy + v] = accumulate ? y[r * ldy + v] + reduced[v] : reduced[v];
  }
}

// The inputs [whole, k) of V rows of w and R rows of x, zero-padded to N in local copies: the
// dot kernels' last step.
template <int R, int V, int N, typename X> struct DotTail {
  alignas(64) uint16_t w[V][N] = {};
  alignas(64) X x[R][N] = {};

  DotTail(const uint16_t *from, int64_t ldw, const X *rows, int64_t ldx, int64_t whole, int64_t k) {
    for (int v = 0; v < V; ++v)
      for (int64_t i = whole; i < k; ++i)
        w[v][i - whole] = from[v * ldw + i];
    for (int r = 0; r < R; ++r)
      for (int64_t i = whole; i < k; ++i)
        x[r][i - whole] = rows[r * ldx + i];
  }
};

template <int R, int V>
DLM_AVX512 void dotBlock(const uint16_t *w, int64_t ldw, int64_t k, const float *x, int64_t ldx,
                         float *y, int64_t ldy, bool accumulate) {
  __m512 sums[R][V] = {};
  const int64_t whole = k - k % 16;
  for (int64_t i = 0; i < whole; i += 16)
    dotStep<R, V>(w + i, ldw, x + i, ldx, sums);
  if (whole < k) {
    const DotTail<R, V, 16, float> tail(w, ldw, x, ldx, whole, k);
    dotStep<R, V>(&tail.w[0][0], 16, &tail.x[0][0], 16, sums);
  }
  storeDotSums<R, V>(sums, y, ldy, accumulate);
}

#define DLM_AVX512_BF16 __attribute__((target("avx512f,avx512bf16")))

// The dot-product form in bf16 arithmetic: 32 inputs of R rows of x (bf16) by V rows of W a step,
// each pair of products added into 16 float32 lanes by one VDPBF16PS.
template <int R, int V>
DLM_AVX512_BF16 inline void dotStepBf16(const uint16_t *w, int64_t ldw, const uint16_t *x,
                                        int64_t ldx, __m512 (&sums)[R][V]) {
  __m512bh weights[V];
  for (int v = 0; v < V; ++v)
    weights[v] = (__m512bh)_mm512_loadu_si512(w + v * ldw);
  for (int r = 0; r < R; ++r) {
    const __m512bh a = (__m512bh)_mm512_loadu_si512(x + r * ldx);
    for (int v = 0; v < V; ++v)
      sums[r][v] = _mm512_dpbf16_ps(sums[r][v], a, weights[v]);
  }
}

template <int R, int V>
DLM_AVX512_BF16 void dotBlockBf16(const uint16_t *w, int64_t ldw, int64_t k, const uint16_t *x,
                                  int64_t ldx, float *y, int64_t ldy, bool accumulate) {
  __m512 sums[R][V] = {};
  const int64_t whole = k - k % 32;
  for (int64_t i = 0; i < whole; i += 32)
    dotStepBf16<R, V>(w + i, ldw, x + i, ldx, sums);
  if (whole < k) {
    const DotTail<R, V, 32, uint16_t> tail(w, ldw, x, ldx, whole, k);
    dotStepBf16<R, V>(&tail.w[0][0], 32, &tail.x[0][0], 32, sums);
  }
  storeDotSums<R, V>(sums, y, ldy, accumulate);
}

constexpr int kDotRows = 6, kDotOutputs = 4;

// Every output of R rows, by blocks of kDotOutputs: Blocks[V - 1] multiplies V outputs.
template <typename X, typename Block, const Block *Blocks>
void dotRows(const uint16_t *w, int64_t ldw, int64_t outputs, int64_t k, const X *x, int64_t ldx,
             float *y, int64_t ldy, bool accumulate) {
  for (int64_t n = 0; n < outputs; n += kDotOutputs) {
    const int64_t count = outputs - n < kDotOutputs ? outputs - n : kDotOutputs;
    Blocks[count - 1](w + n * ldw, ldw, k, x, ldx, y + n, ldy, accumulate);
  }
}

template <typename X>
using DotBlock = void (*)(const uint16_t *, int64_t, int64_t, const X *, int64_t, float *, int64_t,
                          bool);
template <int R>
constexpr DotBlock<float> kFloatDots[kDotOutputs] = {dotBlock<R, 1>, dotBlock<R, 2>, dotBlock<R, 3>,
                                                     dotBlock<R, 4>};
template <int R>
constexpr DotBlock<uint16_t> kBf16Dots[kDotOutputs] = {dotBlockBf16<R, 1>, dotBlockBf16<R, 2>,
                                                       dotBlockBf16<R, 3>, dotBlockBf16<R, 4>};

// Rows by blocks of kDotRows: Rows[R - 1] multiplies R rows.
template <typename X, typename RowsFn>
void dotProducts(const RowsFn (&rowsFns)[kDotRows], const uint16_t *w, int64_t ldw, int64_t outputs,
                 int64_t k, const X *x, int64_t ldx, int64_t rows, float *y, int64_t ldy,
                 bool accumulate) {
  for (int64_t first = 0; first < rows; first += kDotRows) {
    const int64_t count = rows - first < kDotRows ? rows - first : kDotRows;
    rowsFns[count - 1](w, ldw, outputs, k, x + first * ldx, ldx, y + first * ldy, ldy, accumulate);
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
  multiplyRows(PlainColumns<uint16_t>{tile, width}, k, width, x, ldx, rows, sums, width, false);
}

void multiplyTileInt8(const int8_t *tile, int64_t k, int64_t width, const float *x, int64_t ldx,
                      int64_t rows, float *sums) {
  multiplyRows(PlainColumns<int8_t>{tile, width}, k, width, x, ldx, rows, sums, width, false);
}

void multiplyTileInt4(const uint8_t *tile, const uint16_t *scales, int64_t group, int64_t k,
                      int64_t width, const float *x, int64_t ldx, int64_t rows, float *sums) {
  multiplyRows(Int4Columns{tile, width / 2, scales, width, group}, k, width, x, ldx, rows, sums,
               width, false);
}

void multiplyRowsBf16(const uint16_t *w, int64_t ldw, int64_t k, int64_t width, const float *x,
                      int64_t ldx, int64_t rows, float *sums, int64_t lds, bool accumulate) {
  multiplyRows(PlainColumns<uint16_t>{w, ldw}, k, width, x, ldx, rows, sums, lds, accumulate);
}

void multiplyByRowsBf16(const uint16_t *w, int64_t ldw, int64_t outputs, int64_t k, const float *x,
                        int64_t ldx, int64_t rows, float *y, int64_t ldy, bool accumulate) {
  using Rows = void (*)(const uint16_t *, int64_t, int64_t, int64_t, const float *, int64_t,
                        float *, int64_t, bool);
  static constexpr Rows kRows[kDotRows] = {dotRows<float, DotBlock<float>, kFloatDots<1>>,
                                           dotRows<float, DotBlock<float>, kFloatDots<2>>,
                                           dotRows<float, DotBlock<float>, kFloatDots<3>>,
                                           dotRows<float, DotBlock<float>, kFloatDots<4>>,
                                           dotRows<float, DotBlock<float>, kFloatDots<5>>,
                                           dotRows<float, DotBlock<float>, kFloatDots<6>>};
  dotProducts(kRows, w, ldw, outputs, k, x, ldx, rows, y, ldy, accumulate);
}

bool hasBf16DotKernels() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
  }();
  return has;
}

void multiplyBf16ByRowsBf16(const uint16_t *w, int64_t ldw, int64_t outputs, int64_t k,
                            const uint16_t *x, int64_t ldx, int64_t rows, float *y, int64_t ldy,
                            bool accumulate) {
  using Rows = void (*)(const uint16_t *, int64_t, int64_t, int64_t, const uint16_t *, int64_t,
                        float *, int64_t, bool);
  static constexpr Rows kRows[kDotRows] = {dotRows<uint16_t, DotBlock<uint16_t>, kBf16Dots<1>>,
                                           dotRows<uint16_t, DotBlock<uint16_t>, kBf16Dots<2>>,
                                           dotRows<uint16_t, DotBlock<uint16_t>, kBf16Dots<3>>,
                                           dotRows<uint16_t, DotBlock<uint16_t>, kBf16Dots<4>>,
                                           dotRows<uint16_t, DotBlock<uint16_t>, kBf16Dots<5>>,
                                           dotRows<uint16_t, DotBlock<uint16_t>, kBf16Dots<6>>};
  dotProducts(kRows, w, ldw, outputs, k, x, ldx, rows, y, ldy, accumulate);
}

#else

bool hasBlockedTileKernels() { return false; }
void multiplyByRowsBf16(const uint16_t *, int64_t, int64_t, int64_t, const float *, int64_t,
                        int64_t, float *, int64_t, bool) {}
bool hasBf16DotKernels() { return false; }
void multiplyBf16ByRowsBf16(const uint16_t *, int64_t, int64_t, int64_t, const uint16_t *, int64_t,
                            int64_t, float *, int64_t, bool) {}
void multiplyTileBf16(const uint16_t *, int64_t, int64_t, const float *, int64_t, int64_t,
                      float *) {}
void multiplyTileInt8(const int8_t *, int64_t, int64_t, const float *, int64_t, int64_t, float *) {}
void multiplyTileInt4(const uint8_t *, const uint16_t *, int64_t, int64_t, int64_t, const float *,
                      int64_t, int64_t, float *) {}
void multiplyRowsBf16(const uint16_t *, int64_t, int64_t, int64_t, const float *, int64_t, int64_t,
                      float *, int64_t, bool) {}

#endif

} // namespace dlm::cpu
