#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/Kernels.h"

#include <cmath>
#include <cstring>

namespace dlm::cpu {

// Chunks of up to kSoftEmbeddingChunk rows that read input (all of them, or a mask token's):
// their probabilities, then one GEMM, straight into `out` when the chunk's rows are contiguous,
// else into the scratch and copied to their rows. Rows that read none stay zero, and cost no
// softmax and no product (iteration smoothing's decoded positions).
Status softEmbedding(const float *input, int64_t rows, int64_t inputWidth,
                     const model::HostTensor &table, float scale, const int32_t *tokens,
                     int64_t maskToken, float *out, std::vector<float> &scratch, int threads) {
  const int64_t hidden = table.cols;
  if (!input || maskToken >= 0)
    std::memset(out, 0, static_cast<size_t>(rows * hidden) * sizeof(float));
  if (!input)
    return Status::ok();
  const int64_t chunkRows = std::min(rows, kSoftEmbeddingChunk);
  float *product = scratch.data() + chunkRows * inputWidth;
  int64_t picked[kSoftEmbeddingChunk];
  for (int64_t next = 0; next < rows;) {
    int64_t chunk = 0;
    for (; next < rows && chunk < kSoftEmbeddingChunk; ++next)
      if (maskToken < 0 || tokens[next] == maskToken) {
        float *probabilities = scratch.data() + chunk * inputWidth;
        std::memcpy(probabilities, input + next * inputWidth, inputWidth * sizeof(float));
        softmaxInPlace(probabilities, inputWidth);
        picked[chunk++] = next;
      }
    if (chunk == 0)
      break;
    const bool contiguous = picked[chunk - 1] - picked[0] == chunk - 1;
    float *into = contiguous ? out + picked[0] * hidden : product;
    // into[chunk, H] = scale * P[chunk, V'] @ table[V', H]
    DLM_RETURN_IF_ERROR(matmul(/*transposeB=*/false, chunk, hidden, inputWidth, scale,
                               scratch.data(), inputWidth, table.data, hidden, into, hidden,
                               threads));
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
  return timedRecord(run, [&] {
    for (const Part &part : run.parts) {
      // The fed rows before the input's first read none: zero rows.
      const int64_t first = part.input.rows ? part.input.first : 0, row = part.offset + first;
      float *out = result(run);
      std::memset(out + part.offset * width, 0, static_cast<size_t>(first * width) * sizeof(float));
      DLM_RETURN_IF_ERROR(softEmbedding(
          part.input.rows, part.span.count - first, part.input.width, *p.weight.tensor,
          static_cast<float>(p.scale) * part.input.scale, packedTokens_.data() + row,
          p.maskToken.value_or(-1), out + row * width, softEmbeddingScratch_, pool_.threads()));
    }
    return Status::ok();
  });
}

} // namespace dlm::cpu
