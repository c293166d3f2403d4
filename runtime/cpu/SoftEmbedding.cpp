#include "runtime/cpu/BlockedTileKernels.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/Kernels.h"

#include <dnnl.h>

#include <cmath>
#include <cstring>
#include <string>

namespace dlm::cpu {

namespace {

// A panel of the table widened for an sgemm where the blocked kernels do not read it: 256 KiB.
constexpr int64_t kPanelFloats = int64_t{1} << 16;
// Table rows one column block of the blocked kernels takes at a time: its slice (256 rows of 64
// bytes) stays in L1 while every 12 rows of the chunk pass over it, so the table streams from
// memory once per chunk rather than once per 12 rows.
constexpr int64_t kBlockedPanelRows = 256;

int64_t panelRows(int64_t hidden) { return std::max<int64_t>(1, kPanelFloats / hidden); }

// The probabilities' rows a cache line more than their width apart: a vocabulary of a multiple
// of 1024 floats would otherwise put the 12 rows a blocked kernel reads at once in one L1 set.
int64_t probabilityStride(int64_t inputWidth) { return inputWidth + 16; }

// into[chunk, H] = scale * P[chunk, V'] @ bf16 table[V', H], 32 columns a task.
void multiplyBf16Table(const float *p, int64_t ldp, int64_t chunk, int64_t inputWidth,
                       const model::StoredTensor &table, float scale, float *into,
                       ThreadPool &pool) {
  const int64_t hidden = table.cols, blocks = (hidden + 31) / 32;
  const uint16_t *bits = static_cast<const uint16_t *>(table.data);
  pool.parallelFor(blocks, 2, [&](int64_t begin, int64_t end, int) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t column = b * 32, width = std::min<int64_t>(32, hidden - column);
      for (int64_t first = 0; first < inputWidth; first += kBlockedPanelRows)
        multiplyRowsBf16(bits + first * hidden + column, hidden,
                         std::min(kBlockedPanelRows, inputWidth - first), width, p + first, ldp,
                         chunk, into + column, hidden, first > 0);
      for (int64_t r = 0; r < chunk; ++r)
        for (int64_t c = 0; c < width; ++c)
          into[r * hidden + column + c] *= scale;
    }
  });
}

// The same for any stored table: panels of its rows widened into `panel`, each multiplied and
// added by an sgemm.
Status multiplyWidenedPanels(const float *p, int64_t ldp, int64_t chunk, int64_t inputWidth,
                             const model::StoredTensor &table, float scale, float *into,
                             float *panel, int threads) {
  const int64_t hidden = table.cols, step = panelRows(hidden);
  setOneDnnThreads(2.0 * chunk * hidden * inputWidth < kParallelGemmFlops ? 1 : threads);
  for (int64_t first = 0; first < inputWidth; first += step) {
    const int64_t count = std::min(step, inputWidth - first);
    model::widenStored(table, static_cast<size_t>(first * hidden),
                       static_cast<size_t>(count * hidden), panel);
    const dnnl_status_t status = dnnl_sgemm('N', 'N', chunk, hidden, count, scale, p + first, ldp,
                                            panel, hidden, first > 0 ? 1.0f : 0.0f, into, hidden);
    if (status != dnnl_success)
      return Status::error("oneDNN sgemm failed (status " + std::to_string(status) +
                           ") on a soft embedding's table panel");
  }
  return Status::ok();
}

enum class TableProduct { sgemm, blockedBf16, widenedPanels };

TableProduct tableProduct(const model::StoredTensor &table) {
  if (table.dtype == artifact::DType::f32)
    return TableProduct::sgemm;
  if (table.dtype == artifact::DType::bf16 && hasBlockedTileKernels() && table.cols % 16 == 0)
    return TableProduct::blockedBf16;
  return TableProduct::widenedPanels;
}

// into[chunk, H] = scale * P[chunk, V'] @ table[V', H], the table as stored.
Status multiplyByTable(const float *p, int64_t ldp, int64_t chunk, int64_t inputWidth,
                       const model::StoredTensor &table, float scale, float *into, float *panel,
                       ThreadPool &pool) {
  const int64_t hidden = table.cols;
  switch (tableProduct(table)) {
  case TableProduct::sgemm:
    return matmul(/*transposeB=*/false, chunk, hidden, inputWidth, scale, p, ldp,
                  static_cast<const float *>(table.data), hidden, into, hidden, pool.threads());
  case TableProduct::blockedBf16:
    multiplyBf16Table(p, ldp, chunk, inputWidth, table, scale, into, pool);
    return Status::ok();
  case TableProduct::widenedPanels:
    break;
  }
  return multiplyWidenedPanels(p, ldp, chunk, inputWidth, table, scale, into, panel,
                               pool.threads());
}

} // namespace

std::string softEmbeddingPath(const model::StoredTensor &table) {
  const std::string stored = std::string(artifact::dtypeName(table.dtype)) + " as stored, ";
  switch (tableProduct(table)) {
  case TableProduct::sgemm:
    return stored + "oneDNN sgemm";
  case TableProduct::blockedBf16:
    return stored + "register-blocked AVX-512 kernels";
  case TableProduct::widenedPanels:
    break;
  }
  return stored + "widened a panel of rows at a time for oneDNN sgemm";
}

size_t softEmbeddingScratchFloats(int64_t rows, int64_t inputWidth, int64_t hidden) {
  return static_cast<size_t>(std::min(rows, kSoftEmbeddingChunk) *
                                 (probabilityStride(inputWidth) + hidden) +
                             panelRows(hidden) * hidden);
}

// Chunks of up to kSoftEmbeddingChunk rows that read input (all of them, or a mask token's):
// their probabilities, then one product, straight into `out` when the chunk's rows are
// contiguous, else into the scratch and copied to their rows. Rows that read none stay zero, and
// cost no softmax and no product (iteration smoothing's decoded positions).
Status softEmbedding(const float *input, int64_t rows, int64_t inputWidth,
                     const model::StoredTensor &table, float scale, const int32_t *tokens,
                     int64_t maskToken, float *out, std::vector<float> &scratch, ThreadPool &pool) {
  const int64_t hidden = table.cols;
  if (!input || maskToken >= 0)
    std::memset(out, 0, static_cast<size_t>(rows * hidden) * sizeof(float));
  if (!input)
    return Status::ok();
  const int64_t chunkRows = std::min(rows, kSoftEmbeddingChunk);
  if (scratch.size() < softEmbeddingScratchFloats(rows, inputWidth, hidden))
    scratch.resize(softEmbeddingScratchFloats(rows, inputWidth, hidden));
  const int64_t ldp = probabilityStride(inputWidth);
  float *product = scratch.data() + chunkRows * ldp;
  float *panel = product + chunkRows * hidden;
  int64_t picked[kSoftEmbeddingChunk];
  for (int64_t next = 0; next < rows;) {
    int64_t chunk = 0;
    for (; next < rows && chunk < kSoftEmbeddingChunk; ++next)
      if (maskToken < 0 || tokens[next] == maskToken) {
        float *probabilities = scratch.data() + chunk * ldp;
        std::memcpy(probabilities, input + next * inputWidth, inputWidth * sizeof(float));
        softmaxInPlace(probabilities, inputWidth);
        picked[chunk++] = next;
      }
    if (chunk == 0)
      break;
    const bool contiguous = picked[chunk - 1] - picked[0] == chunk - 1;
    float *into = contiguous ? out + picked[0] * hidden : product;
    DLM_RETURN_IF_ERROR(
        multiplyByTable(scratch.data(), ldp, chunk, inputWidth, table, scale, into, panel, pool));
    if (!contiguous)
      for (int64_t i = 0; i < chunk; ++i)
        std::memcpy(out + picked[i] * hidden, product + i * hidden,
                    static_cast<size_t>(hidden) * sizeof(float));
  }
  return Status::ok();
}

Status CpuBackend::runSoftEmbedding(const RecordRun &run) {
  const program::ProgramRecord &k = run.k;
  const int64_t width = run.width;
  const auto &p = k.as<spec::kernels::SoftEmbeddingParams>();
  const model::StoredTensor table = tableAsStored(p.weight.tensor);
  return timedRecord(run, [&] {
    for (const Part &part : run.parts) {
      // The fed rows before the input's first read none: zero rows.
      const int64_t first = part.input.rows ? part.input.first : 0, row = part.offset + first;
      float *out = result(run);
      std::memset(out + part.offset * width, 0, static_cast<size_t>(first * width) * sizeof(float));
      DLM_RETURN_IF_ERROR(softEmbedding(part.input.rows, part.span.count - first, part.input.width,
                                        table, static_cast<float>(p.scale) * part.input.scale,
                                        packedTokens_.data() + row, p.maskToken.value_or(-1),
                                        out + row * width, softEmbeddingScratch_, pool_));
    }
    return Status::ok();
  });
}

} // namespace dlm::cpu
