#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/Vectorize.h"

#include <algorithm>
#include <cmath>

namespace dlm::cpu {

void RopeTable::build(int64_t positions, int64_t rotaryDim, double theta, int64_t rotatedPairs) {
  const int64_t rotated = rotatedPairs < 0 ? rotaryDim / 2 : std::min(rotatedPairs, rotaryDim / 2);
  if (positions <= positions_ && rotaryDim / 2 == half_ && theta == theta_ && rotated == rotated_)
    return;
  positions_ = positions;
  half_ = rotaryDim / 2;
  rotated_ = rotated;
  theta_ = theta;
  cos_.resize(static_cast<size_t>(positions * half_));
  sin_.resize(static_cast<size_t>(positions * half_));
  std::vector<double> inverseFrequency(static_cast<size_t>(half_));
  for (int64_t i = 0; i < half_; ++i)
    inverseFrequency[i] = 1.0 / std::pow(theta, static_cast<double>(2 * i) / rotaryDim);
  for (int64_t p = 0; p < positions; ++p) {
    for (int64_t i = 0; i < half_; ++i) {
      // The frequencies use the whole rotary dim; pairs past `rotated` pass through.
      const double angle = static_cast<double>(p) * inverseFrequency[i];
      cos_[p * half_ + i] = i < rotated ? static_cast<float>(std::cos(angle)) : 1.0f;
      sin_[p * half_ + i] = i < rotated ? static_cast<float>(std::sin(angle)) : 0.0f;
    }
  }
}

DLM_VECTOR_CLONES void applyRope(float *x, int64_t rows, int64_t rowStride, int64_t heads,
                                 int64_t headDim, const RopeTable &table, int64_t firstPosition) {
  const int64_t half = table.half();
  for (int64_t r = 0; r < rows; ++r) {
    const float *cosine = table.cos(firstPosition + r);
    const float *sine = table.sin(firstPosition + r);
    for (int64_t h = 0; h < heads; ++h) {
      float *lo = x + r * rowStride + h * headDim;
      float *hi = lo + half;
      for (int64_t j = 0; j < half; ++j) {
        const float a = lo[j], b = hi[j];
        lo[j] = a * cosine[j] - b * sine[j];
        hi[j] = b * cosine[j] + a * sine[j];
      }
    }
  }
}

Status CpuBackend::runRope(const RecordRun &run) {
  const program::ProgramRecord &k = run.k;
  const int64_t count = run.count, width = run.width;
  const int64_t headDim = k.as<spec::kernels::RopeParams>().headDim;
  timedRecord(run, [&] {
    float *out = result(run);
    const float *x = operand(run, 0);
    if (out != x)
      std::memcpy(out, x, static_cast<size_t>(count * width) * sizeof(float));
    for (const Part &part : run.parts)
      applyRope(out + part.offset * width, part.span.count, width, width / headDim, headDim,
                ropeTable(k), part.span.first);
  });
  return Status::ok();
}

const RopeTable &CpuBackend::ropeTable(const program::ProgramRecord &k) const {
  for (const Rope &rope : ropes_)
    if (sameRope(rope.params, k.as<spec::kernels::RopeParams>()))
      return rope.table;
  return ropes_.front().table; // unreachable: the constructor made one per distinct record
}

} // namespace dlm::cpu
