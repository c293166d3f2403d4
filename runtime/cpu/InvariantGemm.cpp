#include "runtime/cpu/InvariantGemm.h"

#include "runtime/cpu/Vectorize.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace dlm::cpu {
namespace {
// Whether the CPU runs the 512-bit tiles (defined with them below).
bool hasWideTiles();
} // namespace

InvariantGemm::InvariantGemm(const model::HostTensor &w, int64_t outputs, bool allowWideTiles)
    : outputs_(outputs < 0 ? w.rows : outputs), inputs_(w.cols),
      panels_((outputs_ + kPanelColumns - 1) / kPanelColumns),
      packed_(static_cast<size_t>(panels_ * inputs_ * kPanelColumns), 0.0f),
      wideTiles_(allowWideTiles && hasWideTiles()) {
  for (int64_t n = 0; n < outputs_; ++n) {
    float *panel = packed_.data() + (n / kPanelColumns) * inputs_ * kPanelColumns;
    for (int64_t k = 0; k < inputs_; ++k)
      panel[k * kPanelColumns + n % kPanelColumns] = w.data[n * inputs_ + k];
  }
}

namespace {

// The accumulators are the compiler's vector type, two of eight floats per panel row: AVX
// registers in the x86-64-v3/v4 clones, pairs of SSE ones in the baseline one.
typedef float Lanes __attribute__((vector_size(32)));
static_assert(InvariantGemm::kPanelColumns == 16, "two Lanes per panel row");

// kRows rows of x against kPanels consecutive panels: sums[r][j] = sum over k = 0..K-1, in
// order, of x[r, k] * W[j, k], one accumulator lane per output. The tile shape only decides how
// many lanes share a loaded weight or x value; each lane's own steps are the same whatever the
// shape, so every tile gives a row the same bits. Each step is `acc + x * w` contracted to one
// fused multiply-add where the clone's instruction set has FMA (x86-64-v3/v4; this file is
// otherwise built with -ffp-contract=off, and nothing else here is contracted) and a rounded
// multiply then a rounded add in the baseline clone. One clone is chosen per process
// (Vectorize.h's DLM_VECTOR_CLONES), so a machine's results stay fixed within a process; they
// may differ between instruction sets.
template <int kRows, int kPanels>
__attribute__((always_inline)) inline void
tile(const float *x, int64_t inputs, const float *panels, float *out, int64_t outStride,
     int64_t columnsLeft, bool accumulate) {
#pragma clang fp contract(on)
  Lanes acc[kRows][2 * kPanels] = {};
  const int64_t panelStride = inputs * 16;
  for (int64_t k = 0; k < inputs; ++k) {
    Lanes w[2 * kPanels];
    for (int p = 0; p < kPanels; ++p) {
      std::memcpy(&w[2 * p], panels + p * panelStride + k * 16, sizeof(Lanes));
      std::memcpy(&w[2 * p + 1], panels + p * panelStride + k * 16 + 8, sizeof(Lanes));
    }
    for (int r = 0; r < kRows; ++r) {
      const float xk = x[r * inputs + k];
      for (int i = 0; i < 2 * kPanels; ++i)
        acc[r][i] += xk * w[i];
    }
  }
  const int64_t width = std::min<int64_t>(16 * kPanels, columnsLeft);
  for (int r = 0; r < kRows; ++r) {
    float sums[16 * kPanels];
    std::memcpy(sums, acc[r], sizeof sums);
    float *row = out + r * outStride;
    for (int64_t j = 0; j < width; ++j)
      row[j] = accumulate ? row[j] + sums[j] : sums[j];
  }
}

// The tiles, in one function cloned per ISA (clang clones no templates). Full tiles are
// kTileRows x 1 panel: 12 accumulators plus two weight registers and a broadcast x fit AVX2's 16
// registers, and 12 independent sums cover the FMA latency of two pipes. A block's last rows
// (fewer than kTileRows) take several panels at once so that they too have enough independent
// sums (a single row against one panel would wait on the latency of its 2).
constexpr int tailPanels(int rows) { return rows == 1 ? 4 : rows <= 3 ? 2 : 1; }

DLM_VECTOR_CLONES void
runTile(int rows, int panels, const float *x, int64_t inputs, const float *packed, float *out,
        int64_t outStride, int64_t columnsLeft, bool accumulate) {
#define DLM_TILE(R, P)                                                                             \
  if (rows == R && panels == P)                                                                   \
    return tile<R, P>(x, inputs, packed, out, outStride, columnsLeft, accumulate);
  DLM_TILE(6, 1)
  DLM_TILE(5, 1)
  DLM_TILE(4, 1)
  DLM_TILE(3, 2)
  DLM_TILE(3, 1)
  DLM_TILE(2, 2)
  DLM_TILE(2, 1)
  DLM_TILE(1, 4)
  DLM_TILE(1, 1)
#undef DLM_TILE
}

static_assert(InvariantGemm::kTileRows == 6, "runTile's shapes");

#if defined(__x86_64__) && defined(__clang__) && !defined(DLM_NO_TARGET_CLONES)
#define DLM_WIDE_TILES 1
// The same sums in 512-bit registers, one per panel row. The target clones above keep 256-bit
// lanes even in the AVX-512 clone (and clang splits wider vector types there unless told
// otherwise), which gives half of a CPU with full-width AVX-512 units: 240 against oneDNN's 460
// GFLOP/s on 512-row products on a 2-core Zen 5 (dlm-bench-gemm). Each lane is still one fused
// multiply-add per k in order, so a row gets the same bits as from the AVX2 and AVX-512 clones.
// Full tiles are kTileRows x 4 panels: 24 accumulators, 4 weight registers and a broadcast x of
// the 32 registers, 24 fused multiply-adds to every 4 weight loads.
template <int kRows, int kPanels>
__attribute__((target("avx512f"), min_vector_width(512), always_inline)) inline void
wideTile(const float *x, int64_t inputs, const float *panels, float *out, int64_t outStride,
         int64_t columnsLeft, bool accumulate) {
  __m512 acc[kRows][kPanels];
  for (int r = 0; r < kRows; ++r)
    for (int p = 0; p < kPanels; ++p)
      acc[r][p] = _mm512_setzero_ps();
  const int64_t panelStride = inputs * 16;
  for (int64_t k = 0; k < inputs; ++k) {
    __m512 w[kPanels];
    for (int p = 0; p < kPanels; ++p)
      w[p] = _mm512_load_ps(panels + p * panelStride + k * 16);
    for (int r = 0; r < kRows; ++r) {
      const __m512 xk = _mm512_set1_ps(x[r * inputs + k]);
      for (int p = 0; p < kPanels; ++p)
        acc[r][p] = _mm512_fmadd_ps(xk, w[p], acc[r][p]);
    }
  }
  const int64_t width = std::min<int64_t>(16 * kPanels, columnsLeft);
  for (int r = 0; r < kRows; ++r) {
    float *row = out + r * outStride;
    if (width == 16 * kPanels) {
      for (int p = 0; p < kPanels; ++p) {
        __m512 sum = acc[r][p];
        if (accumulate)
          sum = _mm512_add_ps(_mm512_loadu_ps(row + 16 * p), sum);
        _mm512_storeu_ps(row + 16 * p, sum);
      }
      continue;
    }
    alignas(64) float sums[16 * kPanels];
    for (int p = 0; p < kPanels; ++p)
      _mm512_store_ps(sums + 16 * p, acc[r][p]);
    for (int64_t j = 0; j < width; ++j)
      row[j] = accumulate ? row[j] + sums[j] : sums[j];
  }
}

constexpr int kWidePanels = 4;
// Rows of a block's tail take more panels, so that they too have enough independent sums.
constexpr int wideTailPanels(int rows) { return rows <= 2 ? 8 : kWidePanels; }

__attribute__((target("avx512f"), min_vector_width(512))) void
runWideTile(int rows, int panels, const float *x, int64_t inputs, const float *packed, float *out,
            int64_t outStride, int64_t columnsLeft, bool accumulate) {
#define DLM_WIDE_TILE(R, P)                                                                        \
  if (rows == R && panels == P)                                                                   \
    return wideTile<R, P>(x, inputs, packed, out, outStride, columnsLeft, accumulate);
#define DLM_WIDE_ROWS(R)                                                                           \
  DLM_WIDE_TILE(R, 1) DLM_WIDE_TILE(R, 2) DLM_WIDE_TILE(R, 3) DLM_WIDE_TILE(R, 4)
  DLM_WIDE_ROWS(6) DLM_WIDE_ROWS(5) DLM_WIDE_ROWS(4) DLM_WIDE_ROWS(3) DLM_WIDE_ROWS(2)
  DLM_WIDE_ROWS(1) DLM_WIDE_TILE(2, 8) DLM_WIDE_TILE(1, 8)
#undef DLM_WIDE_ROWS
#undef DLM_WIDE_TILE
}

bool hasWideTiles() { return __builtin_cpu_supports("avx512f"); }
#else
bool hasWideTiles() { return false; }
#endif

} // namespace

int64_t InvariantGemm::blockRows(int64_t rows) const {
  // At most kBlockBytes of x per block, in whole tiles; blocks of equal size.
  const int64_t most = std::max<int64_t>(
      kTileRows, kBlockBytes / (std::max<int64_t>(inputs_, 1) * 4) / kTileRows * kTileRows);
  const int64_t blocks = (rows + most - 1) / most;
  const int64_t even = (rows + blocks - 1) / blocks;
  return (even + kTileRows - 1) / kTileRows * kTileRows;
}

void InvariantGemm::runBlock(const float *x, int64_t rows, int64_t panelBegin, int64_t panelEnd,
                             float *y, bool accumulate) const {
  const int64_t panelFloats = inputs_ * kPanelColumns;
  auto run = [&](int64_t m, int tileRows, int64_t panel, int tilePanels) {
    const int64_t column = panel * kPanelColumns;
    const float *packed = packed_.data() + panel * panelFloats;
    float *out = y + m * outputs_ + column;
#ifdef DLM_WIDE_TILES
    if (wideTiles_)
      return runWideTile(tileRows, tilePanels, x + m * inputs_, inputs_, packed, out, outputs_,
                         outputs_ - column, accumulate);
#endif
    runTile(tileRows, tilePanels, x + m * inputs_, inputs_, packed, out, outputs_,
            outputs_ - column, accumulate);
  };
#ifdef DLM_WIDE_TILES
  const int fullPanels = wideTiles_ ? kWidePanels : 1;
  auto groupOf = [&](int tail) { return wideTiles_ ? wideTailPanels(tail) : tailPanels(tail); };
#else
  const int fullPanels = 1;
  auto groupOf = [](int tail) { return tailPanels(tail); };
#endif
  // Panel group by panel group over the block's full tiles, so that the panels are reused from
  // L1/L2 by every tile while the block of x stays in L2.
  const int64_t full = rows / kTileRows * kTileRows;
  for (int64_t panel = panelBegin; panel < panelEnd; panel += fullPanels) {
    const int group = static_cast<int>(std::min<int64_t>(fullPanels, panelEnd - panel));
    for (int64_t m = 0; m < full; m += kTileRows)
      run(m, kTileRows, panel, group);
  }
  if (const int tail = static_cast<int>(rows - full)) {
    const int group = groupOf(tail);
    int64_t panel = panelBegin;
    for (; panel + group <= panelEnd; panel += group)
      run(full, tail, panel, group);
    for (; panel < panelEnd; ++panel)
      run(full, tail, panel, 1);
  }
}

void InvariantGemm::run(const float *x, int64_t rows, float *y, bool accumulate,
                        ThreadPool &pool) const {
  if (rows == 0 || panels_ == 0)
    return;
  // Work units are row blocks, row block major. With enough blocks a unit is a whole block, so
  // that threads share no block of x and write no common cache line of y; with few (few rows) a
  // unit is a block against kUnitPanels panels (a whole group of a 1-row tail's tile). Threads
  // take the next unit from a shared counter rather than a fixed share, so that a thread the OS
  // runs late (the 2-core machines are shared) leaves its units to the others instead of holding
  // up the call. Threads split rows and columns, never k, so no split changes a sum. Small
  // products stay on the calling thread, where waking the pool would cost more than the work.
  constexpr int64_t kUnitPanels = 4;
  const int64_t block = blockRows(rows);
  const int64_t blocks = (rows + block - 1) / block;
  const int64_t unitPanels = blocks >= 4 * pool.threads() ? panels_ : kUnitPanels;
  const int64_t chunks = (panels_ + unitPanels - 1) / unitPanels;
  const int64_t units = blocks * chunks;
  std::atomic<int64_t> next{0};
  auto work = [&](int64_t, int64_t, int) {
    for (int64_t unit; (unit = next.fetch_add(1, std::memory_order_relaxed)) < units;) {
      const int64_t m = unit / chunks * block, panel = unit % chunks * unitPanels;
      runBlock(x + m * inputs_, std::min(block, rows - m), panel,
               std::min(panel + unitPanels, panels_), y + m * outputs_, accumulate);
    }
  };
  if (units < 2 || 2.0 * rows * outputs_ * inputs_ < kParallelFlops)
    work(0, 0, 0);
  else
    pool.parallelFor(pool.threads(), 2, work);
}

} // namespace dlm::cpu
