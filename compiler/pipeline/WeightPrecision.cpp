#include "compiler/pipeline/WeightPrecision.h"

#include "runtime/model/KernelProgram.h"
#include "support/FloatFormats.h"

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

float valueAt(const artifact::WeightSource &w, size_t i) {
  switch (w.dtype) {
  case DType::f32:
    return static_cast<const float *>(w.data)[i];
  case DType::bf16:
    return floatFromBf16(static_cast<const uint16_t *>(w.data)[i]);
  default:
    return floatFromF16(static_cast<const uint16_t *>(w.data)[i]);
  }
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
  else if (precision == "int8" || precision == "fp8")
    return Status::error("not supported yet: --weights " + precision +
                         " (f32 and bf16 are; weight-only int8 and FP8 are planned)");
  else if (!precision.empty())
    return Status::error("unknown --weights " + precision + " (expected f32 or bf16)");
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
      std::vector<uint8_t> bytes(count * artifact::dtypeSize(target));
      if (target == DType::f32) {
        float *out = reinterpret_cast<float *>(bytes.data());
        for (size_t i = 0; i < count; ++i)
          out[i] = valueAt(w, i);
      } else {
        uint16_t *out = reinterpret_cast<uint16_t *>(bytes.data());
        for (size_t i = 0; i < count; ++i)
          out[i] = bf16FromFloat(valueAt(w, i));
      }
      w.dtype = target;
      w.data = bytes.data();
      w.size = bytes.size();
      owned.push_back(std::move(bytes));
      ++report.converted;
    }
    report.projectionBytes += w.size;
  }
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
