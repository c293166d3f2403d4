#include "runtime/cpu/CpuBackend.h"
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

Status CpuBackend::runForwardInput(const RecordRun &run) {
  const int64_t width = run.width;
  timedRecord(run, [&] {
    for (const Part &part : run.parts)
      copyInputRows(part.input.rows, part.input.count, part.span.count, width,
                    result(run) + part.offset * width);
  });
  return Status::ok();
}

Status CpuBackend::runSelectInputRows(const RecordRun &run) {
  const int64_t width = run.width;
  timedRecord(run, [&] {
    for (const Part &part : run.parts) {
      const int64_t at = part.offset * width;
      selectRows(operand(run, 0) + at, operand(run, 1) + at,
                 std::min(part.input.count, part.span.count), part.span.count, width,
                 result(run) + at);
    }
  });
  return Status::ok();
}

Status CpuBackend::runCapture(const RecordRun &run) {
  const int64_t count = run.count;
  const std::vector<int64_t> &in = run.k.operands;
  timedRecord(run, [&] {
    const int64_t w = slotWidth(in[0]), total = w * static_cast<int64_t>(in.size());
    for (size_t i = 0; i < in.size(); ++i)
      copyColumns(operand(run, i), count, w, capture_.data() + i * w, total);
  });
  return Status::ok();
}

} // namespace dlm::cpu
