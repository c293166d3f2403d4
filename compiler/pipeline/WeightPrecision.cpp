#include "compiler/pipeline/WeightPrecision.h"

#include "runtime/model/KernelProgram.h"
#include "runtime/model/ModelWeights.h"
#include "support/FloatFormats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <variant>

namespace dlm::pipeline {

namespace {

namespace kp = spec::kernels;
using artifact::DType;

// The names of the weights linear and norm_linear records multiply by.
std::set<std::string> projectionWeights(const artifact::KernelTarget &program) {
  std::set<std::string> names;
  for (const artifact::Kernel &record : program.kernels) {
    if (record.kind != kp::kLinear && record.kind != kp::kNormLinear)
      continue;
    auto it = record.parameters.find(kp::kWeight);
    if (it != record.parameters.end() && std::holds_alternative<std::string>(it->second))
      names.insert(std::get<std::string>(it->second));
  }
  return names;
}

// The stored view of a weight source (f32, bf16 or f16: no row scales), to read its values as
// the runtime does.
model::StoredTensor storedView(const artifact::WeightSource &w) {
  const int64_t cols = w.shape.empty() ? 1 : w.shape.back();
  const int64_t count = static_cast<int64_t>(w.size / artifact::dtypeSize(w.dtype));
  return {w.dtype, w.data, cols ? count / cols : 0, cols};
}

// Weight-only int8 per output channel (row): scale = max |w| / 127 (1 for an all-zero row), q =
// round(w / scale) in [-127, 127]. Writes q into `out` and returns the scales' weight source
// "<name>.scale" (f32 [rows]), its bytes kept in `owned`. Reads w before the caller retypes it.
artifact::WeightSource quantizeRows(const artifact::WeightSource &w, int8_t *out,
                                    std::vector<std::vector<uint8_t>> &owned) {
  const int64_t rows = w.shape[0], cols = w.shape[1];
  const model::StoredTensor view = storedView(w);
  std::vector<uint8_t> scaleBytes(static_cast<size_t>(rows) * sizeof(float));
  float *scales = reinterpret_cast<float *>(scaleBytes.data());
  for (int64_t r = 0; r < rows; ++r) {
    const size_t first = static_cast<size_t>(r * cols);
    float largest = 0.0f;
    for (int64_t c = 0; c < cols; ++c)
      largest = std::max(largest, std::fabs(model::storedValue(view, first + c)));
    const float scale = largest > 0.0f ? largest / 127.0f : 1.0f;
    scales[r] = scale;
    for (int64_t c = 0; c < cols; ++c)
      out[first + c] = static_cast<int8_t>(
          std::clamp(std::nearbyint(model::storedValue(view, first + c) / scale), -127.0f, 127.0f));
  }
  artifact::WeightSource source{w.name + std::string(model::kRowScaleSuffix),
                                DType::f32,
                                {rows},
                                scaleBytes.data(),
                                scaleBytes.size()};
  owned.push_back(std::move(scaleBytes));
  return source;
}

} // namespace

StatusOr<WeightPrecisionReport>
convertProjectionWeights(const artifact::KernelTarget &program, const std::string &precision,
                         std::vector<artifact::WeightSource> &weights,
                         std::vector<std::vector<uint8_t>> &owned) {
  WeightPrecisionReport report;
  report.precision = precision.empty() ? "as stored" : precision;
  DType target = DType::invalid;
  if (precision == "f32")
    target = DType::f32;
  else if (precision == "bf16")
    target = DType::bf16;
  else if (precision == "int8")
    target = DType::i8;
  else if (precision == "fp8")
    return Status::error("not supported yet: --weights fp8 (f32, bf16 and int8 are)");
  else if (!precision.empty())
    return Status::error("unknown --weights " + precision + " (expected f32, bf16 or int8)");
  std::vector<artifact::WeightSource> scales;
  const std::set<std::string> names = projectionWeights(program);
  for (artifact::WeightSource &w : weights) {
    if (!names.count(w.name))
      continue;
    ++report.projections;
    if (target != DType::invalid && w.dtype != target) {
      if (w.dtype != DType::f32 && w.dtype != DType::bf16 && w.dtype != DType::f16)
        return Status::error("--weights " + precision + ": weight '" + w.name + "' has dtype " +
                             artifact::dtypeName(w.dtype) + ", which cannot be converted");
      const size_t count = w.size / artifact::dtypeSize(w.dtype);
      const model::StoredTensor view = storedView(w);
      std::vector<uint8_t> bytes(count * artifact::dtypeSize(target));
      if (target == DType::i8) {
        if (w.shape.size() != 2)
          return Status::error("--weights int8: weight '" + w.name + "' is not a matrix");
        scales.push_back(quantizeRows(w, reinterpret_cast<int8_t *>(bytes.data()), owned));
      } else if (target == DType::f32) {
        model::widenStored(view, 0, count, reinterpret_cast<float *>(bytes.data()));
      } else {
        uint16_t *out = reinterpret_cast<uint16_t *>(bytes.data());
        for (size_t i = 0; i < count; ++i)
          out[i] = bf16FromFloat(model::storedValue(view, i));
      }
      w.dtype = target;
      w.data = bytes.data();
      w.size = bytes.size();
      owned.push_back(std::move(bytes));
      ++report.converted;
    }
    report.projectionBytes += w.size;
  }
  for (const artifact::WeightSource &scale : scales)
    report.projectionBytes += scale.size;
  weights.insert(weights.end(), scales.begin(), scales.end());
  return report;
}

std::string describe(const WeightPrecisionReport &report) {
  char mib[32];
  std::snprintf(mib, sizeof mib, "%.1f", static_cast<double>(report.projectionBytes) / (1 << 20));
  return "weights: " + report.precision + " (" + std::to_string(report.projections) +
         " projection matrices, " + std::to_string(report.converted) + " converted, " + mib +
         " MiB; embeddings, LM head and norms as stored)";
}

} // namespace dlm::pipeline
