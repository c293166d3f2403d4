#include "runtime/cpu/Kernels.h"

#include <cmath>
#include <cstring>

namespace dlm::cpu {

Status softEmbedding(const float *input, int64_t rows, int64_t inputWidth,
                     const model::HostTensor &table, float scale, const int32_t *tokens,
                     int64_t maskToken, float *out, std::vector<float> &scratch, int threads) {
  const int64_t hidden = table.cols;
  if (!input) {
    std::memset(out, 0, static_cast<size_t>(rows * hidden) * sizeof(float));
    return Status::ok();
  }
  for (int64_t first = 0; first < rows; first += kSoftEmbeddingChunk) {
    const int64_t chunk = std::min(kSoftEmbeddingChunk, rows - first);
    for (int64_t r = 0; r < chunk; ++r) {
      const float *in = input + (first + r) * inputWidth;
      float *p = scratch.data() + r * inputWidth;
      // A row of another token than maskToken has zero probabilities: a zero row out.
      if (maskToken >= 0 && tokens[first + r] != maskToken) {
        std::memset(p, 0, static_cast<size_t>(inputWidth) * sizeof(float));
        continue;
      }
      float maximum = -INFINITY;
      for (int64_t j = 0; j < inputWidth; ++j)
        maximum = std::max(maximum, in[j]);
      for (int64_t j = 0; j < inputWidth; ++j)
        p[j] = in[j] - maximum;
      expInPlace(p, inputWidth);
      double sum = 0;
      for (int64_t j = 0; j < inputWidth; ++j)
        sum += p[j];
      const float inverse = static_cast<float>(1.0 / sum);
      for (int64_t j = 0; j < inputWidth; ++j)
        p[j] *= inverse;
    }
    // out[chunk, H] = scale * P[chunk, V'] @ table[V', H]
    DLM_RETURN_IF_ERROR(matmul(/*transposeB=*/false, chunk, hidden, inputWidth, scale,
                               scratch.data(), inputWidth, table.data, hidden, out + first * hidden,
                               hidden, threads));
  }
  return Status::ok();
}

} // namespace dlm::cpu
