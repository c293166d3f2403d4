#include "runtime/cpu/Kernels.h"

#include <cstring>

namespace dlm::cpu {

void copyInputRows(const float *input, int64_t given, int64_t rows, int64_t width, float *out) {
  const int64_t copied = std::min(given, rows);
  if (copied > 0)
    std::memcpy(out, input, static_cast<size_t>(copied * width) * sizeof(float));
  std::memset(out + copied * width, 0,
              static_cast<size_t>((rows - copied) * width) * sizeof(float));
}

void selectRows(const float *a, const float *b, int64_t split, int64_t rows, int64_t width,
                float *out) {
  // Whole rows move: only the part out does not already hold is copied (in place on a or b).
  if (out != a && split > 0)
    std::memmove(out, a, static_cast<size_t>(split * width) * sizeof(float));
  if (out != b && split < rows)
    std::memmove(out + split * width, b + split * width,
                 static_cast<size_t>((rows - split) * width) * sizeof(float));
}

void copyColumns(const float *x, int64_t rows, int64_t width, float *out, int64_t outStride) {
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out + r * outStride, x + r * width, static_cast<size_t>(width) * sizeof(float));
}

} // namespace dlm::cpu
