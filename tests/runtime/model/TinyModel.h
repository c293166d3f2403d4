// A tiny random transformer in canonical weight names (runtime/model/ModelSpec.h), written as an
// artifact with writeArtifact, plus a straightforward double-precision forward of the same
// model: the independent check the CPU backend's tests compare against.
#pragma once

#include "support/FloatFormats.h"

#include "compiler/programs/DecodePrograms.h"
#include "importer/model/CanonicalWeights.h"
#include "runtime/artifact/ArtifactWriter.h"
#include "runtime/model/ModelSpec.h"
#include "runtime/model/ModelWeights.h"
#include "tests/runtime/model/TinyKernelProgram.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace dlm::testing {

struct TinyModelOptions {
  int64_t vocab = 40;
  int64_t embeddingSize = 48; // padded past vocab, like LLaDA
  int64_t hidden = 16;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t kvHeads = 2;
  int64_t headDim = 6; // != hidden / heads, like Qwen3
  int64_t intermediate = 24;
  bool causal = false;
  bool logitShift = false;
  bool tied = false;
  bool qkvBias = false;
  bool qkNorm = false;
  bool bf16 = false;
  // The projection matrices (q, k, v, o, gate, up, down) stored as weight-only int8 with a scale
  // per row ("<name>.scale", as dlmc compile --weights int8 writes them).
  bool int8 = false;
  // The same matrices as FP8 E4M3 with a scale per row (scale = max |w| / 448), as an FP8
  // compressed-tensors checkpoint imports and dlmc compile --weights fp8 writes them.
  bool fp8 = false;
  // > 0: the same matrices as weight-only int4 with an f16 scale per this many inputs of a row
  // (an f16 matrix "<name>.scale" [rows, cols / group]), as dlmc compile --weights int4 writes
  // them.
  int64_t int4Group = 0;
  // With int4Group: the embedding table and the LM head too (dlmc compile --quantize-embeddings).
  bool int4Tables = false;
  int64_t maskTokenId = 39;
  std::vector<int64_t> eosTokenIds = {1};
  int64_t maxPositions = 128;
  uint32_t seed = 7;
  std::string policy = "low-confidence";
  artifact::Attributes knobs;
  // Kernel records written into the artifact as they are (the cuda backend's tests add generated
  // kernels); their views must outlive write().
  std::vector<artifact::KernelTarget> kernelTargets;
  // The "cpu" kernel records the cpu backend runs (TinyKernelProgram.h); false leaves them out.
  bool cpuRecords = true;
};

// A matrix (or a stack of them) quantized per row, int8 or FP8 E4M3: the codes' bytes in q, a
// scale per row.
struct QuantizedRows {
  artifact::DType dtype = artifact::DType::i8;
  std::vector<int8_t> q;
  std::vector<float> scales;
};

// Rounds `values` (rows of `cols`) per row to int8 (scale = max |w| / 127) or FP8 E4M3 (max |w| /
// 448); the values become decode(q) * scale.
inline QuantizedRows quantizeRows(std::vector<float> &values, int64_t cols, bool fp8) {
  const int64_t rows = static_cast<int64_t>(values.size()) / cols;
  QuantizedRows m;
  m.dtype = fp8 ? artifact::DType::fp8_e4m3 : artifact::DType::i8;
  m.scales.resize(static_cast<size_t>(rows));
  m.q.resize(values.size());
  for (int64_t r = 0; r < rows; ++r) {
    float largest = 0;
    for (int64_t c = 0; c < cols; ++c)
      largest = std::max(largest, std::fabs(values[r * cols + c]));
    const float scale = largest > 0 ? largest / (fp8 ? 448.0f : 127.0f) : 1.0f;
    m.scales[r] = scale;
    for (int64_t c = 0; c < cols; ++c) {
      float &value = values[r * cols + c];
      if (fp8) {
        const uint8_t code = e4m3FromFloat(value / scale);
        m.q[r * cols + c] = static_cast<int8_t>(code);
        value = floatFromE4m3(code) * scale;
      } else {
        const float q = std::nearbyint(value / scale);
        m.q[r * cols + c] = static_cast<int8_t>(q);
        value = q * scale;
      }
    }
  }
  return m;
}

// A matrix quantized to int4 in groups: codes two a byte (element 2i in the low nibble of byte i),
// an f16 scale per group of a row.
struct QuantizedGroups {
  std::vector<uint8_t> codes;
  std::vector<uint16_t> scales; // [rows, cols / group]
  int64_t groups = 0;
};

// Rounds `values` (rows of `cols`) to int4 per group of `group` values, scale = max |w| / 7
// rounded to f16, q = round(w / scale) in [-7, 7]; the values become q * scale.
inline QuantizedGroups quantizeGroups(std::vector<float> &values, int64_t cols, int64_t group) {
  const int64_t rows = static_cast<int64_t>(values.size()) / cols;
  QuantizedGroups m;
  m.groups = cols / group;
  m.codes.assign(values.size() / 2, 0);
  m.scales.resize(static_cast<size_t>(rows * m.groups));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < m.groups; ++g) {
      float largest = 0;
      for (int64_t c = g * group; c < (g + 1) * group; ++c)
        largest = std::max(largest, std::fabs(values[r * cols + c]));
      const uint16_t bits = f16FromFloat(largest > 0 ? largest / 7.0f : 1.0f);
      m.scales[r * m.groups + g] = bits;
      const float scale = floatFromF16(bits);
      for (int64_t c = g * group; c < (g + 1) * group; ++c) {
        float &value = values[r * cols + c];
        const float q = std::clamp(std::nearbyint(value / scale), -7.0f, 7.0f);
        const size_t i = static_cast<size_t>(r * cols + c);
        m.codes[i / 2] |= static_cast<uint8_t>((static_cast<int>(q) & 0xF) << (4 * (i % 2)));
        value = q * scale;
      }
    }
  return m;
}

// The weights as float values (already rounded through bf16 when the artifact stores bf16).
class TinyModel {
public:
  explicit TinyModel(TinyModelOptions options) : o_(std::move(options)) {
    std::mt19937 generator(o_.seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    auto add = [&](const std::string &name, std::vector<int64_t> shape, float std, float mean) {
      size_t count = 1;
      for (int64_t d : shape)
        count *= static_cast<size_t>(d);
      std::vector<float> values(count);
      for (float &v : values) {
        v = mean + std * normal(generator);
        if (o_.bf16) // round to nearest even bf16, so both sides see the stored values
        {
          uint32_t bits;
          std::memcpy(&bits, &v, 4);
          bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
          std::memcpy(&v, &bits, 4);
        }
      }
      shapes_[name] = shape;
      values_[name] = std::move(values);
    };
    const int64_t H = o_.hidden, q = o_.heads * o_.headDim, kv = o_.kvHeads * o_.headDim;
    add(std::string(spec::kEmbed), {o_.embeddingSize, H}, 1.0f, 0);
    add(std::string(spec::kFinalNorm), {H}, 0.1f, 1);
    if (!o_.tied)
      add(std::string(spec::kLmHead), {o_.embeddingSize, H}, 0.5f, 0);
    if (o_.int4Group > 0 && o_.int4Tables)
      for (const std::string &table : {std::string(spec::kEmbed), std::string(spec::kLmHead)})
        if (values_.count(table))
          int4_[table] = quantizeGroups(values_.at(table), H, o_.int4Group);
    for (int64_t i = 0; i < o_.layers; ++i) {
      auto n = [i](std::string_view role) { return spec::layerWeightName(i, role); };
      add(n(spec::kAttnNorm), {H}, 0.1f, 1);
      add(n(spec::kQ), {q, H}, 1.0f / std::sqrt(float(H)), 0);
      add(n(spec::kK), {kv, H}, 1.0f / std::sqrt(float(H)), 0);
      add(n(spec::kV), {kv, H}, 1.0f / std::sqrt(float(H)), 0);
      if (o_.qkvBias) {
        add(n(spec::kQBias), {q}, 0.1f, 0);
        add(n(spec::kKBias), {kv}, 0.1f, 0);
        add(n(spec::kVBias), {kv}, 0.1f, 0);
      }
      if (o_.qkNorm) {
        add(n(spec::kQNorm), {o_.headDim}, 0.1f, 1);
        add(n(spec::kKNorm), {o_.headDim}, 0.1f, 1);
      }
      add(n(spec::kO), {H, q}, 1.0f / std::sqrt(float(q)), 0);
      add(n(spec::kMlpNorm), {H}, 0.1f, 1);
      add(n(spec::kGate), {o_.intermediate, H}, 1.0f / std::sqrt(float(H)), 0);
      add(n(spec::kUp), {o_.intermediate, H}, 1.0f / std::sqrt(float(H)), 0);
      add(n(spec::kDown), {H, o_.intermediate}, 1.0f / std::sqrt(float(o_.intermediate)), 0);
      for (std::string_view role :
           {spec::kQ, spec::kK, spec::kV, spec::kO, spec::kGate, spec::kUp, spec::kDown}) {
        if (o_.int8 || o_.fp8)
          quantize(n(role), o_.fp8);
        if (o_.int4Group > 0)
          int4_[n(role)] =
              quantizeGroups(values_.at(n(role)), shapes_.at(n(role)).back(), o_.int4Group);
      }
    }
  }

  // Rounds matrix `name` per row to int8 or FP8 E4M3 (quantizeRows).
  void quantize(const std::string &name, bool fp8) {
    int8_[name] = quantizeRows(values_.at(name), shapes_.at(name).back(), fp8);
  }

  const TinyModelOptions &options() const { return o_; }
  // A weight's values by canonical name (as the artifact stores them: rounded through bf16).
  const std::vector<float> &weight(const std::string &name) const { return values_.at(name); }
  // Every weight's shape by canonical name.
  const std::map<std::string, std::vector<int64_t>> &shapes() const { return shapes_; }

  artifact::ModelConfig config() const {
    artifact::ModelConfig c;
    c.architecture = "TinyTest";
    c.vocabSize = o_.vocab;
    c.embeddingSize = o_.embeddingSize;
    c.hiddenSize = o_.hidden;
    c.numLayers = o_.layers;
    c.numHeads = o_.heads;
    c.numKvHeads = o_.kvHeads;
    c.headDim = o_.headDim;
    c.intermediateSize = o_.intermediate;
    c.ropeTheta = 10000.0;
    c.rmsNormEps = 1e-5;
    c.maskTokenId = o_.maskTokenId;
    c.eosTokenIds = o_.eosTokenIds;
    c.maxPositions = o_.maxPositions;
    c.tiedEmbeddings = o_.tied;
    c.attentionMask = o_.causal ? artifact::AttentionMaskKind::causal
                                : artifact::AttentionMaskKind::bidirectional;
    c.extra[std::string(spec::kExtraLogitShift)] = o_.logitShift;
    c.extra[std::string(spec::kExtraRopeStyle)] = std::string(spec::kRopeStyleNeox);
    return c;
  }

  // The cpu kernel records of this model, as dlmc would compile it.
  artifact::KernelTarget cpuKernelTarget() const {
    TinyProgramShape shape;
    shape.layers = o_.layers;
    shape.hidden = o_.hidden;
    shape.heads = o_.heads;
    shape.kvHeads = o_.kvHeads;
    shape.headDim = o_.headDim;
    shape.intermediate = o_.intermediate;
    shape.vocab = o_.vocab;
    shape.eps = config().rmsNormEps;
    shape.theta = config().ropeTheta;
    shape.causal = o_.causal;
    shape.qkvBias = o_.qkvBias;
    shape.qkNorm = o_.qkNorm;
    shape.tied = o_.tied;
    shape.logitShift = o_.logitShift;
    return tinyCpuKernelTarget(shape);
  }

  // The decode programs dlmc would embed by default: the options' policy first, then the others
  // (an options' policy outside the defaults is embedded too), each with
  // the options' knobs it declares (unroll_steps: its denoise loops' unroll hint).
  std::vector<artifact::DecodingProgram> decodePrograms() const {
    std::vector<std::string> order{o_.policy};
    for (const std::string &name : programs::defaultDecodeProgramPolicies())
      if (name != o_.policy)
        order.push_back(name);
    int64_t unroll = 4;
    auto unrollKnob = o_.knobs.find(std::string(spec::kKnobUnrollSteps));
    if (unrollKnob != o_.knobs.end())
      unroll = std::get<int64_t>(unrollKnob->second);
    std::vector<artifact::DecodingProgram> result;
    for (const std::string &name : order) {
      StatusOr<artifact::DecodingProgram> program =
          programs::buildDecodeProgram(name, o_.knobs, unroll);
      EXPECT_TRUE(program.isOk()) << program.status().message();
      if (program)
        result.push_back(std::move(*program));
    }
    return result;
  }

  // Writes the artifact; `skip` names a weight to leave out (for error tests).
  void write(const std::string &path, const std::string &skip = "") const {
    artifact::ArtifactContents contents;
    contents.producer = "TinyModel test";
    contents.config = config();
    contents.program.policy = o_.policy;
    contents.program.knobs = o_.knobs;
    contents.decodePrograms = decodePrograms();
    contents.kernelTargets = o_.kernelTargets;
    if (o_.cpuRecords)
      contents.kernelTargets.push_back(cpuKernelTarget());
    std::map<std::string, std::vector<uint16_t>> halves;
    for (const auto &[name, values] : values_) {
      if (name == skip)
        continue;
      artifact::WeightSource w;
      w.name = name;
      w.shape = shapes_.at(name);
      auto quantized = int8_.find(name);
      auto grouped = int4_.find(name);
      if (grouped != int4_.end()) {
        w.dtype = artifact::DType::i4;
        w.data = grouped->second.codes.data();
        w.size = grouped->second.codes.size();
        const std::vector<uint16_t> &scales = grouped->second.scales;
        if (skip != name + ".scale")
          contents.weights.push_back({name + ".scale",
                                      artifact::DType::f16,
                                      {w.shape.front(), grouped->second.groups},
                                      scales.data(),
                                      scales.size() * sizeof(uint16_t)});
      } else if (quantized != int8_.end()) {
        w.dtype = quantized->second.dtype;
        w.data = quantized->second.q.data();
        w.size = quantized->second.q.size();
        const std::vector<float> &scales = quantized->second.scales;
        if (skip != name + ".scale")
          contents.weights.push_back({name + ".scale",
                                      artifact::DType::f32,
                                      {static_cast<int64_t>(scales.size())},
                                      scales.data(),
                                      scales.size() * sizeof(float)});
      } else if (o_.bf16) {
        std::vector<uint16_t> &bits = halves[name];
        for (float v : values) {
          uint32_t b;
          std::memcpy(&b, &v, 4);
          bits.push_back(static_cast<uint16_t>(b >> 16));
        }
        w.dtype = artifact::DType::bf16;
        w.data = bits.data();
        w.size = bits.size() * 2;
      } else {
        w.dtype = artifact::DType::f32;
        w.data = values.data();
        w.size = values.size() * 4;
      }
      contents.weights.push_back(std::move(w));
    }
    Status status = artifact::writeArtifact(path, contents);
    ASSERT_TRUE(status.isOk()) << status.message();
  }

  // Logits [ids.size(), vocab] of a full forward at positions 0.., in double, after the shift.
  std::vector<double> referenceLogits(const std::vector<int32_t> &ids) const {
    const int64_t n = static_cast<int64_t>(ids.size()), H = o_.hidden, hd = o_.headDim;
    const int64_t q = o_.heads * hd, kvw = o_.kvHeads * hd;
    std::vector<double> h(n * H);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < H; ++c)
        h[i * H + c] = w(std::string(spec::kEmbed))[ids[i] * H + c];
    for (int64_t l = 0; l < o_.layers; ++l) {
      auto n_ = [l](std::string_view role) { return spec::layerWeightName(l, role); };
      std::vector<double> x = norm(h, n, H, w(n_(spec::kAttnNorm)));
      std::vector<double> Q = linear(x, n, H, n_(spec::kQ), q),
                          K = linear(x, n, H, n_(spec::kK), kvw),
                          V = linear(x, n, H, n_(spec::kV), kvw);
      if (o_.qkvBias) {
        addBias(Q, n, q, w(n_(spec::kQBias)));
        addBias(K, n, kvw, w(n_(spec::kKBias)));
        addBias(V, n, kvw, w(n_(spec::kVBias)));
      }
      if (o_.qkNorm) {
        Q = norm(Q, n * o_.heads, hd, w(n_(spec::kQNorm)));
        K = norm(K, n * o_.kvHeads, hd, w(n_(spec::kKNorm)));
      }
      rope(Q, n, o_.heads);
      rope(K, n, o_.kvHeads);
      std::vector<double> attn(n * q, 0.0);
      const int64_t group = o_.heads / o_.kvHeads;
      for (int64_t head = 0; head < o_.heads; ++head) {
        const int64_t g = head / group;
        for (int64_t i = 0; i < n; ++i) {
          std::vector<double> s(n, -INFINITY);
          double m = -INFINITY;
          for (int64_t j = 0; j < n; ++j) {
            if (o_.causal && j > i)
              continue;
            double dot = 0;
            for (int64_t d = 0; d < hd; ++d)
              dot += Q[i * q + head * hd + d] * K[j * kvw + g * hd + d];
            s[j] = dot / std::sqrt(double(hd));
            m = std::max(m, s[j]);
          }
          double sum = 0;
          for (double &v : s) {
            v = std::exp(v - m);
            sum += v;
          }
          for (int64_t j = 0; j < n; ++j)
            for (int64_t d = 0; d < hd; ++d)
              attn[i * q + head * hd + d] += s[j] / sum * V[j * kvw + g * hd + d];
        }
      }
      std::vector<double> o = linear(attn, n, q, n_(spec::kO), H);
      for (int64_t i = 0; i < n * H; ++i)
        h[i] += o[i];
      x = norm(h, n, H, w(n_(spec::kMlpNorm)));
      std::vector<double> g = linear(x, n, H, n_(spec::kGate), o_.intermediate);
      std::vector<double> u = linear(x, n, H, n_(spec::kUp), o_.intermediate);
      for (size_t i = 0; i < g.size(); ++i)
        g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
      std::vector<double> d = linear(g, n, o_.intermediate, n_(spec::kDown), H);
      for (int64_t i = 0; i < n * H; ++i)
        h[i] += d[i];
    }
    std::vector<double> x = norm(h, n, H, w(std::string(spec::kFinalNorm)));
    std::vector<double> logits =
        linear(x, n, H, std::string(o_.tied ? spec::kEmbed : spec::kLmHead), o_.vocab);
    if (o_.logitShift && n > 1) {
      std::vector<double> shifted(logits);
      for (int64_t i = 1; i < n; ++i)
        std::copy(&logits[(i - 1) * o_.vocab], &logits[i * o_.vocab], &shifted[i * o_.vocab]);
      logits = shifted;
    }
    return logits;
  }

private:
  const std::vector<float> &w(const std::string &name) const { return values_.at(name); }

  std::vector<double> linear(const std::vector<double> &x, int64_t rows, int64_t in,
                             const std::string &name, int64_t out) const {
    const std::vector<float> &W = w(name);
    std::vector<double> y(rows * out, 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < out; ++o) {
        double s = 0;
        for (int64_t i = 0; i < in; ++i)
          s += x[r * in + i] * W[o * in + i];
        y[r * out + o] = s;
      }
    return y;
  }
  static void addBias(std::vector<double> &y, int64_t rows, int64_t width,
                      const std::vector<float> &b) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < width; ++c)
        y[r * width + c] += b[c];
  }
  std::vector<double> norm(const std::vector<double> &x, int64_t rows, int64_t width,
                           const std::vector<float> &weight) const {
    std::vector<double> y(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t c = 0; c < width; ++c)
        ss += x[r * width + c] * x[r * width + c];
      const double scale = 1.0 / std::sqrt(ss / width + 1e-5);
      for (int64_t c = 0; c < width; ++c)
        y[r * width + c] = x[r * width + c] * scale * weight[c];
    }
    return y;
  }
  void rope(std::vector<double> &x, int64_t rows, int64_t heads) const {
    const int64_t hd = o_.headDim, half = hd / 2;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t j = 0; j < half; ++j) {
          const double angle = r * std::pow(10000.0, -2.0 * j / hd);
          double &a = x[(r * heads + h) * hd + j];
          double &b = x[(r * heads + h) * hd + j + half];
          const double a0 = a, b0 = b;
          a = a0 * std::cos(angle) - b0 * std::sin(angle);
          b = b0 * std::cos(angle) + a0 * std::sin(angle);
        }
  }

  TinyModelOptions o_;
  std::map<std::string, std::vector<int64_t>> shapes_;
  std::map<std::string, std::vector<float>> values_;
  std::map<std::string, QuantizedRows> int8_;
  std::map<std::string, QuantizedGroups> int4_;
};

// A scratch directory removed at the end of the test.
class TempDir {
public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "dlm-runtime-XXXXXX";
    if (!::mkdtemp(pattern.data()))
      ADD_FAILURE() << "mkdtemp failed";
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string file(const std::string &name) const { return (path_ / name).string(); }

private:
  std::filesystem::path path_;
};

// A TinyModel written to an artifact, opened, and its weights loaded (the reader outlives them:
// stored tensors are views of its mapping). Null weights when a step failed (the test has
// failed then too).
struct LoadedTinyModel {
  std::unique_ptr<artifact::ArtifactReader> reader;
  std::shared_ptr<const model::ModelWeights> weights;
};

inline LoadedTinyModel writeAndLoad(const TinyModel &tiny, const std::string &path) {
  LoadedTinyModel loaded;
  tiny.write(path);
  StatusOr<artifact::ArtifactReader> opened = artifact::ArtifactReader::open(path);
  if (!opened) {
    ADD_FAILURE() << opened.status().message();
    return loaded;
  }
  loaded.reader = std::make_unique<artifact::ArtifactReader>(std::move(*opened));
  StatusOr<std::shared_ptr<const model::ModelWeights>> weights =
      model::ModelWeights::load(*loaded.reader);
  if (!weights) {
    ADD_FAILURE() << weights.status().message();
    return loaded;
  }
  loaded.weights = *weights;
  return loaded;
}

} // namespace dlm::testing
