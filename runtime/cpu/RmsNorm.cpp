#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/Vectorize.h"

#include <cmath>

namespace dlm::cpu {

DLM_VECTOR_CLONES void rmsNorm(const float *x, int64_t rows, int64_t width, int64_t rowStride,
                               const float *weight, double eps, float *y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *in = x + r * rowStride;
    float *out = y + r * rowStride;
    double sumSquares = 0;
    for (int64_t i = 0; i < width; ++i)
      sumSquares += static_cast<double>(in[i]) * in[i];
    // The references compute in float32: rsqrt(mean + eps) rounded to float, then two products.
    const float scale =
        static_cast<float>(1.0 / std::sqrt(static_cast<float>(sumSquares / width) + eps));
    if (weight)
      for (int64_t i = 0; i < width; ++i)
        out[i] = in[i] * scale * weight[i];
    else
      for (int64_t i = 0; i < width; ++i)
        out[i] = in[i] * scale;
  }
}

} // namespace dlm::cpu
