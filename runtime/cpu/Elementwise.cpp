#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/Vectorize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace dlm::cpu {

using program::KernelKind;

namespace {

// exp(x) = 2^n * exp(r), n = round(x / ln 2), |r| <= ln 2 / 2, exp(r) by the Cephes expf
// polynomial. Branch-free, so the loops calling it vectorise. NaN (damaged weights, an overflowed
// activation) comes back as NaN; the arithmetic runs on 0 meanwhile, since converting a NaN n to
// an integer is undefined.
inline float expPolynomial(float input) {
  const bool isNan = input != input;
  float x = input < -87.3f ? -87.3f : (input > 88.0f ? 88.0f : input);
  x = isNan ? 0.0f : x;
  // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer without a libcall.
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return isNan ? input : p * scale;
}

// tanh(x) within a few float ulps, branch-free so that the loops calling it vectorise (std::tanh
// is a libcall per element: DiffusionGemma's logit softcap over a 64 x 8192 canvas took 10 ms of
// a 13 ms LM head). |x| < 0.625: the Cephes tanhf odd polynomial; above it (1 - e) / (1 + e)
// with e = exp(-2|x|) <= 0.29, which does not cancel. NaN stays NaN.
inline float tanhPolynomial(float x) {
  const float a = std::fabs(x), z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  const float e = expPolynomial(-2.0f * a);
  const float large = std::copysign((1.0f - e) / (1.0f + e), x);
  return a < 0.625f ? small : large;
}

} // namespace

DLM_VECTOR_CLONES void expInPlace(float *x, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    x[i] = expPolynomial(x[i]);
}

DLM_VECTOR_CLONES void softmaxInPlace(float *x, int64_t count) {
  float maximum = -INFINITY;
  for (int64_t i = 0; i < count; ++i)
    maximum = std::max(maximum, x[i]);
  for (int64_t i = 0; i < count; ++i)
    x[i] -= maximum;
  expInPlace(x, count);
  double sum = 0;
  for (int64_t i = 0; i < count; ++i)
    sum += x[i];
  const float inverse = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < count; ++i)
    x[i] *= inverse;
}

DLM_VECTOR_CLONES void siluMultiply(float *gate, const float *up, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + expPolynomial(-g)) * up[i];
  }
}

DLM_VECTOR_CLONES void geluTanhMultiply(float *gate, const float *up, int64_t count) {
  const float k = 0.7978845608028654f; // sqrt(2 / pi)
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    gate[i] = 0.5f * g * (1.0f + tanhPolynomial(k * (g + 0.044715f * g * g * g))) * up[i];
  }
}

DLM_VECTOR_CLONES void scaleInPlace(float *x, float factor, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    x[i] *= factor;
}

DLM_VECTOR_CLONES void softcapInPlace(float *x, float cap, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    x[i] = cap * tanhPolynomial(x[i] / cap);
}

DLM_VECTOR_CLONES void addInPlace(float *h, const float *delta, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    h[i] += delta[i];
}

// The rows of the fed tokens, decoded from the table as stored (tableAsStored: bf16, f16, i8 or
// fp8 with its row scales, i4 with its group scales, or float32).
Status CpuBackend::runEmbedding(const RecordRun &run) {
  const program::ProgramRecord &k = run.k;
  const int64_t count = run.count, width = run.width;
  const auto &p = k.as<spec::kernels::EmbeddingParams>();
  const model::StoredTensor table = tableAsStored(p.weight.tensor);
  timedRecord(run, [&] {
    float *out = result(run);
    for (int64_t i = 0; i < count; ++i)
      model::widenStored(table, static_cast<size_t>(packedTokens_[i] * width),
                         static_cast<size_t>(width), out + i * width);
    if (p.scale != 1.0)
      scaleInPlace(out, static_cast<float>(p.scale), count * width);
  });
  return Status::ok();
}

Status CpuBackend::runScale(const RecordRun &run) {
  const program::ProgramRecord &k = run.k;
  const int64_t count = run.count, width = run.width;
  timedRecord(run, [&] {
    float *out = result(run);
    const float *x = operand(run, 0);
    if (out != x)
      std::memcpy(out, x, static_cast<size_t>(count * width) * sizeof(float));
    scaleInPlace(out, k.weight()->data[0], count * width);
  });
  return Status::ok();
}

// add, silu_mul and gelu_mul
Status CpuBackend::runElementwise(const RecordRun &run) {
  const program::ProgramRecord &k = run.k;
  const int64_t count = run.count, width = run.width;
  timedRecord(run, [&] {
    float *out = result(run);
    const float *a = operand(run, 0), *b = operand(run, 1);
    const int64_t n = count * width;
    // Planned in place on the first operand (an add also on its second), as the compiler
    // does; otherwise the first operand is copied to the result first.
    if (k.kind() == KernelKind::add && out == b && out != a) {
      addInPlace(out, a, n);
      return;
    }
    if (out != a)
      std::memcpy(out, a, static_cast<size_t>(n) * sizeof(float));
    if (k.kind() == KernelKind::add)
      addInPlace(out, b, n);
    else if (k.kind() == KernelKind::siluMul)
      siluMultiply(out, b, n);
    else
      geluTanhMultiply(out, b, n);
  });
  return Status::ok();
}

} // namespace dlm::cpu
