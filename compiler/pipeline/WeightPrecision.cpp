#include "compiler/pipeline/WeightPrecision.h"

#include "runtime/model/KernelProgram.h"
#include "runtime/model/ModelWeights.h"
#include "support/FloatFormats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <thread>
#include <variant>

namespace dlm::pipeline {

namespace {

namespace kp = spec::kernels;
using artifact::DType;

// The names of the weights linear and norm_linear records multiply by, of the expert stacks of moe
// records (gate_up, down), and of the tables embedding, soft_embedding and lm_head records read.
struct ConvertedWeights {
  std::set<std::string> projections, experts, tables;
};

ConvertedWeights convertedWeights(const artifact::KernelTarget &program, bool tables) {
  ConvertedWeights names;
  auto add = [](const artifact::Kernel &record, std::string_view parameter,
                std::set<std::string> &to) {
    auto it = record.parameters.find(std::string(parameter));
    if (it != record.parameters.end() && std::holds_alternative<std::string>(it->second))
      to.insert(std::get<std::string>(it->second));
  };
  for (const artifact::Kernel &record : program.kernels) {
    if (record.kind == kp::kLinear || record.kind == kp::kNormLinear)
      add(record, kp::kWeight, names.projections);
    if (record.kind == kp::kMoe) {
      add(record, kp::kGateUp, names.experts);
      add(record, kp::kDownWeight, names.experts);
    }
    if (tables && (record.kind == kp::kEmbedding || record.kind == kp::kSoftEmbedding ||
                   record.kind == kp::kLmHead))
      add(record, kp::kWeight, names.tables);
  }
  return names;
}

// The elements of a weight source.
int64_t elementCount(const artifact::WeightSource &w) {
  int64_t count = 1;
  for (int64_t dim : w.shape)
    count *= dim;
  return count;
}

// The stored view of a weight source, to read its values as the runtime does: an 8-bit one (i8,
// fp8_e4m3) with the row scales of its "<name>.scale" source, which must be f32 [rows]; an i4
// one with the f16 group scales of that source.
StatusOr<model::StoredTensor> storedView(const artifact::WeightSource &w,
                                         const artifact::WeightSource *scales) {
  const int64_t cols = w.shape.empty() ? 1 : w.shape.back();
  const int64_t count = elementCount(w);
  model::StoredTensor view{w.dtype, w.data, cols ? count / cols : 0, cols};
  if (w.dtype == DType::i4) {
    const int64_t groups = scales && !scales->shape.empty() ? scales->shape.back() : 0;
    if (!scales || scales->dtype != DType::f16 || groups <= 0 || cols % groups != 0 ||
        scales->size != static_cast<size_t>(view.rows * groups) * sizeof(uint16_t))
      return Status::error("weight '" + w.name + "' (i4) has no f16 group scales '" + w.name +
                           std::string(model::kRowScaleSuffix) + "' to convert it with");
    view.groupScales = static_cast<const uint16_t *>(scales->data);
    view.groupSize = cols / groups;
    return view;
  }
  if (w.dtype == DType::i8 || w.dtype == DType::fp8_e4m3) {
    if (!scales || scales->dtype != DType::f32 ||
        scales->size != static_cast<size_t>(view.rows) * sizeof(float))
      return Status::error("weight '" + w.name + "' (" + artifact::dtypeName(w.dtype) +
                           ") has no f32 row scales '" + w.name +
                           std::string(model::kRowScaleSuffix) + "' to convert it with");
    view.rowScales = static_cast<const float *>(scales->data);
  }
  return view;
}

// Weight-only 8 bits per output channel (row of a matrix, or of every matrix of a stack): int8 with
// scale = max |w| / 127 and q = round(w / scale) in [-127, 127], or FP8 E4M3 with scale = max |w| /
// 448 and q = E4M3(w / scale) (to nearest even); a scale of 1 for an all-zero row. Writes q into
// `out` and returns the scales' weight source "<name>.scale" (f32 [rows], the rows of a stack [E,
// N, K] E * N), its bytes kept in `owned`. Reads w before the caller retypes it.
artifact::WeightSource quantizeRows(const artifact::WeightSource &w,
                                    const model::StoredTensor &view, DType target, uint8_t *out,
                                    std::vector<std::vector<uint8_t>> &owned) {
  const int64_t rows = view.rows, cols = view.cols;
  const bool fp8 = target == DType::fp8_e4m3;
  std::vector<uint8_t> scaleBytes(static_cast<size_t>(rows) * sizeof(float));
  float *scales = reinterpret_cast<float *>(scaleBytes.data());
  for (int64_t r = 0; r < rows; ++r) {
    const size_t first = static_cast<size_t>(r * cols);
    float largest = 0.0f;
    for (int64_t c = 0; c < cols; ++c)
      largest = std::max(largest, std::fabs(model::storedValue(view, first + c)));
    // At least the smallest normal float: a tiny row's scale must not underflow to 0.
    const float scale = largest > 0.0f ? std::max(largest / (fp8 ? 448.0f : 127.0f),
                                                  std::numeric_limits<float>::min())
                                       : 1.0f;
    scales[r] = scale;
    for (int64_t c = 0; c < cols; ++c) {
      const float value = model::storedValue(view, first + c) / scale;
      out[first + c] = fp8 ? e4m3FromFloat(value)
                           : static_cast<uint8_t>(static_cast<int8_t>(
                                 std::clamp(std::nearbyint(value), -127.0f, 127.0f)));
    }
  }
  artifact::WeightSource source{w.name + std::string(model::kRowScaleSuffix),
                                DType::f32,
                                {rows},
                                scaleBytes.data(),
                                scaleBytes.size()};
  owned.push_back(std::move(scaleBytes));
  return source;
}

// The int4 code of a value at `scale`: round(w / scale) clamped to [-8, 7].
int int4Code(float value, float scale) {
  return static_cast<int>(std::clamp(std::nearbyint(value / scale), -8.0f, 7.0f));
}

// The scale of one int4 group (f16 bits) that makes the squared error of its values smallest
// among candidates (as llama.cpp's quantizers search): for each trial scale m / t (m the value of
// largest magnitude, t from -8 to 8 by quarters, |t| >= 6), the codes it gives, then the scale
// that fits those codes best by least squares; the trial whose fit errs least wins (Q4_0's
// m / -8 is one of the trials).
uint16_t int4GroupScale(const float *values, int64_t count) {
  float extreme = 0.0f;
  for (int64_t c = 0; c < count; ++c)
    if (std::fabs(values[c]) > std::fabs(extreme))
      extreme = values[c];
  if (extreme == 0.0f)
    return f16FromFloat(1.0f);
  auto error = [&](float scale) {
    double sum = 0;
    for (int64_t c = 0; c < count; ++c) {
      const double d = values[c] - double(scale) * int4Code(values[c], scale);
      sum += d * d;
    }
    return sum;
  };
  // Scales past f16's range: its largest finite value, or its smallest subnormal (sign kept).
  auto representable = [](float scale) {
    uint16_t bits = f16FromFloat(std::clamp(scale, -65504.0f, 65504.0f));
    if (floatFromF16(bits) == 0.0f)
      bits = static_cast<uint16_t>((bits & 0x8000u) | 1u);
    return bits;
  };
  uint16_t best = representable(extreme / -8.0f);
  double bestError = error(floatFromF16(best));
  for (int quarter = -32; quarter <= 32; ++quarter) {
    if (std::abs(quarter) < 24)
      continue;
    const float trial = extreme / (quarter / 4.0f);
    if (trial == 0.0f) // a group of values too small for a float32 scale: the fallback stays
      continue;
    double qw = 0, qq = 0;
    for (int64_t c = 0; c < count; ++c) {
      const int q = int4Code(values[c], trial);
      qw += double(q) * values[c];
      qq += double(q) * q;
    }
    if (qq == 0)
      continue;
    const uint16_t fitted = representable(static_cast<float>(qw / qq));
    const float scale = floatFromF16(fitted);
    const double e = error(scale);
    if (e < bestError) {
      bestError = e;
      best = fitted;
    }
  }
  return best;
}

// Weight-only 4 bits per value, symmetric, one f16 scale per `group` values of a row
// (int4GroupScale) and q = round(w / scale) in [-8, 7], two a byte (element 2i in the low
// nibble). Writes q into `out` and returns the scales' weight source "<name>.scale" (f16, w's
// shape with `group` times fewer columns), its bytes kept in `owned`.
artifact::WeightSource quantizeGroups(const artifact::WeightSource &w,
                                      const model::StoredTensor &view, int64_t group, uint8_t *out,
                                      std::vector<std::vector<uint8_t>> &owned) {
  const int64_t rows = view.rows, cols = view.cols, groups = cols / group;
  std::vector<uint8_t> scaleBytes(static_cast<size_t>(rows * groups) * sizeof(uint16_t));
  uint16_t *scales = reinterpret_cast<uint16_t *>(scaleBytes.data());
  // Rows are independent (an even number of codes each: whole bytes): split over the CPUs, the
  // search for each group's scale being most of a compile's time at 4 bits.
  auto quantizeRowsIn = [&](int64_t begin, int64_t end) {
    std::vector<float> values(static_cast<size_t>(group));
    for (int64_t r = begin; r < end; ++r)
      for (int64_t g = 0; g < groups; ++g) {
        const size_t first = static_cast<size_t>(r * cols + g * group);
        model::widenStored(view, first, values.size(), values.data());
        const uint16_t bits = int4GroupScale(values.data(), group);
        scales[r * groups + g] = bits;
        const float scale = floatFromF16(bits);
        for (int64_t c = 0; c < group; ++c) {
          const size_t i = first + c;
          const uint8_t nibble = static_cast<uint8_t>(int4Code(values[c], scale) & 0xF);
          out[i / 2] = i % 2 ? static_cast<uint8_t>(out[i / 2] | (nibble << 4)) : nibble;
        }
      }
  };
  const int64_t threads =
      std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, std::max<int64_t>(rows, 1));
  std::vector<std::thread> workers;
  for (int64_t t = 1; t < threads; ++t)
    workers.emplace_back(quantizeRowsIn, rows * t / threads, rows * (t + 1) / threads);
  quantizeRowsIn(0, rows / threads);
  for (std::thread &worker : workers)
    worker.join();
  std::vector<int64_t> shape = w.shape;
  shape.back() = groups;
  artifact::WeightSource source{w.name + std::string(model::kRowScaleSuffix), DType::f16, shape,
                                scaleBytes.data(), scaleBytes.size()};
  owned.push_back(std::move(scaleBytes));
  return source;
}

// "layers.0.q" for its row scales "layers.0.q.scale"; "" for a name without the suffix.
std::string scaledWeight(const std::string &name) {
  const std::string_view suffix = model::kRowScaleSuffix;
  if (name.size() <= suffix.size() ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return "";
  return name.substr(0, name.size() - suffix.size());
}

} // namespace

StatusOr<WeightPrecisionReport> convertWeightPrecision(const artifact::KernelTarget &program,
                                                       const WeightPrecision &asked,
                                                       std::vector<artifact::WeightSource> &weights,
                                                       std::vector<std::vector<uint8_t>> &owned) {
  const std::string &precision = asked.name;
  WeightPrecisionReport report;
  report.precision = precision.empty() ? "as stored" : precision;
  if (precision == "int4")
    report.precision += " (groups of " + std::to_string(asked.groupSize) + ")";
  DType target = DType::invalid;
  if (precision == "f32")
    target = DType::f32;
  else if (precision == "bf16")
    target = DType::bf16;
  else if (precision == "int8")
    target = DType::i8;
  else if (precision == "fp8")
    target = DType::fp8_e4m3;
  else if (precision == "int4")
    target = DType::i4;
  else if (!precision.empty())
    return Status::error("unknown --weights " + precision +
                         " (expected f32, bf16, int8, fp8 or int4)");
  std::vector<artifact::WeightSource> scales;
  // The row scales of 8-bit weights converted to another type: replaced or dropped.
  std::set<std::string> staleScales;
  std::map<std::string, const artifact::WeightSource *> byName;
  for (const artifact::WeightSource &w : weights)
    byName[w.name] = &w;
  const ConvertedWeights names = convertedWeights(program, asked.tables);
  report.tables = asked.tables;
  auto countsOf = [&](const std::string &name) -> WeightPrecisionReport::Counts * {
    return names.projections.count(name) ? &report.projections
           : names.experts.count(name)   ? &report.experts
           : names.tables.count(name)    ? &report.embeddings
                                         : nullptr;
  };
  for (artifact::WeightSource &w : weights) {
    WeightPrecisionReport::Counts *counts = countsOf(w.name);
    if (!counts)
      continue;
    ++counts->weights;
    if (target != DType::invalid && w.dtype != target) {
      if (w.dtype != DType::f32 && w.dtype != DType::bf16 && w.dtype != DType::f16 &&
          w.dtype != DType::i8 && w.dtype != DType::fp8_e4m3 && w.dtype != DType::i4)
        return Status::error("--weights " + precision + ": weight '" + w.name + "' has dtype " +
                             artifact::dtypeName(w.dtype) + ", which cannot be converted");
      const std::string scaleName = w.name + std::string(model::kRowScaleSuffix);
      auto scale = byName.find(scaleName);
      StatusOr<model::StoredTensor> view =
          storedView(w, scale == byName.end() ? nullptr : scale->second);
      if (!view)
        return view.status().withContext("--weights " + precision);
      if (view->rowScales || view->groupScales)
        staleScales.insert(scaleName);
      const size_t count = static_cast<size_t>(elementCount(w));
      std::vector<uint8_t> bytes(artifact::storageBytes(target, count));
      const bool scaled = target == DType::i8 || target == DType::fp8_e4m3 || target == DType::i4;
      if (scaled && w.shape.size() != 2 && w.shape.size() != 3)
        return Status::error("--weights " + precision + ": weight '" + w.name +
                             "' is not a matrix or a stack of them");
      if (target == DType::i4) {
        if (view->cols % asked.groupSize != 0)
          return Status::error("--weights int4: --weight-group-size " +
                               std::to_string(asked.groupSize) + " does not divide the " +
                               std::to_string(view->cols) + " inputs of weight '" + w.name + "'");
        scales.push_back(quantizeGroups(w, *view, asked.groupSize, bytes.data(), owned));
      } else if (scaled) {
        scales.push_back(quantizeRows(w, *view, target, bytes.data(), owned));
      } else if (target == DType::f32) {
        model::widenStored(*view, 0, count, reinterpret_cast<float *>(bytes.data()));
      } else {
        uint16_t *out = reinterpret_cast<uint16_t *>(bytes.data());
        for (size_t i = 0; i < count; ++i)
          out[i] = bf16FromFloat(model::storedValue(*view, i));
      }
      w.dtype = target;
      w.data = bytes.data();
      w.size = bytes.size();
      owned.push_back(std::move(bytes));
      ++counts->converted;
    }
    counts->bytes += w.size;
  }
  weights.erase(std::remove_if(weights.begin(), weights.end(),
                               [&](const artifact::WeightSource &w) {
                                 return staleScales.count(w.name) != 0;
                               }),
                weights.end());
  // The row scales of 8-bit weights, kept as stored or new.
  for (const artifact::WeightSource &w : weights)
    if (WeightPrecisionReport::Counts *counts = countsOf(scaledWeight(w.name)))
      counts->bytes += w.size;
  for (const artifact::WeightSource &scale : scales)
    countsOf(scaledWeight(scale.name))->bytes += scale.size;
  weights.insert(weights.end(), scales.begin(), scales.end());
  return report;
}

std::string describe(const WeightPrecisionReport &report) {
  auto clause = [](const WeightPrecisionReport::Counts &counts, const char *what) {
    char mib[32];
    std::snprintf(mib, sizeof mib, "%.1f", static_cast<double>(counts.bytes) / (1 << 20));
    return std::to_string(counts.weights) + " " + what + ", " + std::to_string(counts.converted) +
           " converted, " + mib + " MiB";
  };
  std::string text =
      "weights: " + report.precision + " (" + clause(report.projections, "projection matrices");
  if (report.experts.weights > 0)
    text += "; " + clause(report.experts, "expert stacks");
  if (report.tables)
    text += "; " + clause(report.embeddings, "embedding and LM head tables");
  std::vector<std::string> asStored;
  if (!report.tables)
    asStored = {"embeddings", "LM head"};
  if (report.experts.weights > 0)
    asStored.push_back("routers");
  asStored.push_back("norms");
  std::string list = asStored.front();
  for (size_t i = 1; i < asStored.size(); ++i)
    list += (i + 1 == asStored.size() ? " and " : ", ") + asStored[i];
  return text + "; " + list + " as stored)";
}

} // namespace dlm::pipeline
