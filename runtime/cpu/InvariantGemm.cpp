#include "runtime/cpu/InvariantGemm.h"

#include "runtime/cpu/Vectorize.h"

#include <algorithm>
#include <cstring>

namespace dlm::cpu {

InvariantGemm::InvariantGemm(const model::HostTensor &w, int64_t outputs)
    : outputs_(outputs < 0 ? w.rows : outputs), inputs_(w.cols),
      panels_((outputs_ + kPanelColumns - 1) / kPanelColumns),
      packed_(static_cast<size_t>(panels_ * inputs_ * kPanelColumns), 0.0f) {
  for (int64_t n = 0; n < outputs_; ++n) {
    float *panel = packed_.data() + (n / kPanelColumns) * inputs_ * kPanelColumns;
    for (int64_t k = 0; k < inputs_; ++k)
      panel[k * kPanelColumns + n % kPanelColumns] = w.data[n * inputs_ + k];
  }
}

namespace {

// kRows rows of x against one panel: sums[r][j] = sum over k in order of x[r, k] * panel[k, j].
// Every row's lane does the same multiply and add in the same order whatever kRows is, so tiles
// of any size give the same bits. The accumulators are the compilers' vector type (two of eight
// floats per row: AVX registers in the x86-64-v3/v4 clones, pairs of SSE ones in the baseline
// one; Vectorize.h's DLM_VECTOR_CLONES); one clone is chosen per process, so a machine's results
// stay fixed.
typedef float Lanes __attribute__((vector_size(32)));
static_assert(InvariantGemm::kPanelColumns == 16, "two Lanes per panel row");

template <int kRows>
__attribute__((always_inline)) inline void
panelTile(const float *x, int64_t inputs, const float *panel, float *out, int64_t outStride,
          int64_t width, bool accumulate) {
  Lanes low[kRows] = {}, high[kRows] = {};
  for (int64_t k = 0; k < inputs; ++k) {
    Lanes wLow, wHigh;
    std::memcpy(&wLow, panel + k * 16, sizeof wLow);
    std::memcpy(&wHigh, panel + k * 16 + 8, sizeof wHigh);
    for (int r = 0; r < kRows; ++r) {
      const float xk = x[r * inputs + k];
      low[r] += xk * wLow;
      high[r] += xk * wHigh;
    }
  }
  for (int r = 0; r < kRows; ++r) {
    float sums[16];
    std::memcpy(sums, &low[r], sizeof low[r]);
    std::memcpy(sums + 8, &high[r], sizeof high[r]);
    for (int64_t j = 0; j < width; ++j)
      out[r * outStride + j] = accumulate ? out[r * outStride + j] + sums[j] : sums[j];
  }
}

// The two tile sizes, each cloned per ISA (clang clones no templates).
DLM_VECTOR_CLONES void
fullTile(const float *x, int64_t inputs, const float *panel, float *out, int64_t outStride,
         int64_t width, bool accumulate) {
  panelTile<InvariantGemm::kTileRows>(x, inputs, panel, out, outStride, width, accumulate);
}

DLM_VECTOR_CLONES void
singleRow(const float *x, int64_t inputs, const float *panel, float *out, int64_t outStride,
          int64_t width, bool accumulate) {
  panelTile<1>(x, inputs, panel, out, outStride, width, accumulate);
}

} // namespace

// One panel for every row, kTileRows rows at a time so that each panel row loaded serves several
// rows of x; the last rows in a smaller tile of the same arithmetic.
void InvariantGemm::runPanel(const float *x, int64_t rows, int64_t panel, float *y,
                             bool accumulate) const {
  const float *weights = packed_.data() + panel * inputs_ * kPanelColumns;
  const int64_t column = panel * kPanelColumns;
  const int64_t width = std::min(kPanelColumns, outputs_ - column);
  int64_t m = 0;
  for (; m + kTileRows <= rows; m += kTileRows)
    fullTile(x + m * inputs_, inputs_, weights, y + m * outputs_ + column, outputs_, width,
             accumulate);
  for (; m < rows; ++m)
    singleRow(x + m * inputs_, inputs_, weights, y + m * outputs_ + column, outputs_, width,
              accumulate);
}

void InvariantGemm::run(const float *x, int64_t rows, float *y, bool accumulate,
                        ThreadPool &pool) const {
  if (rows == 0)
    return;
  // Threads split the panels (columns), never k: the split cannot change a sum.
  pool.parallelFor(panels_, 2, [&](int64_t begin, int64_t end, int) {
    for (int64_t panel = begin; panel < end; ++panel)
      runPanel(x, rows, panel, y, accumulate);
  });
}

} // namespace dlm::cpu
