// The CPU backend on the kinds and optional parameters DiffusionGemma brought into the kernel
// records (runtime/model/KernelProgram.h): embedding scale, weightless per-head norm, scale,
// gelu_mul, lm_head softcap, rope of some pairs (several tables), attention scale and window,
// soft_embedding, moe, per-layer KV widths and several forward functions with the append mode;
// speculative decoding's forward_input, select_input_rows, capture and extend mode.
// Each against a double-precision loop written here, on small artifacts built in the test whose
// lm_head is an identity on the hidden state (so the logits are the values under test).
#include "runtime/cpu/BlockedTileKernels.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/PackedLinear.h"

#include "runtime/model/KernelProgram.h"
#include "support/FloatFormats.h"
#include "tests/runtime/model/TinyModel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>

namespace dlm::cpu {
namespace {

namespace kp = spec::kernels;
using dlm::testing::TempDir;
using dlm::testing::TinyModel;
using dlm::testing::TinyModelOptions;
using Parameters = std::map<std::string, artifact::AttributeValue, std::less<>>;

constexpr int64_t kVocab = 24, kHidden = 8;

// A small artifact: config, named weights and records, loaded back as ModelWeights.
class Mini {
public:
  Mini() {
    std::vector<float> head(kVocab * kHidden, 0.0f); // logits[:, :H] = the hidden state
    for (int64_t i = 0; i < kHidden; ++i)
      head[i * kHidden + i] = 1.0f;
    set("head", {kVocab, kHidden}, head);
    random("embed", {kVocab, kHidden}, 1.0f);
  }

  void set(const std::string &name, std::vector<int64_t> shape, std::vector<float> values) {
    shapes_[name] = std::move(shape);
    values_[name] = std::move(values);
  }
  const std::vector<float> &random(const std::string &name, std::vector<int64_t> shape,
                                   float scale) {
    size_t count = 1;
    for (int64_t d : shape)
      count *= static_cast<size_t>(d);
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<float> values(count);
    for (float &v : values)
      v = normal(generator_);
    set(name, std::move(shape), std::move(values));
    return values_[name];
  }
  const std::vector<float> &w(const std::string &name) const { return values_.at(name); }
  // Weight `name` stored as `dtype` (bf16, i8 or fp8_e4m3, per row with scales) instead of f32;
  // its values become what the artifact holds.
  void storeAs(const std::string &name, artifact::DType dtype) {
    std::vector<float> &values = values_.at(name);
    if (dtype == artifact::DType::bf16) {
      std::vector<uint16_t> &bits = halves_[name];
      bits.clear();
      for (float &v : values) {
        bits.push_back(bf16FromFloat(v));
        v = floatFromBf16(bits.back());
      }
    } else {
      quantized_[name] = testing::quantizeRows(values, shapes_.at(name).back(),
                                               dtype == artifact::DType::fp8_e4m3);
    }
  }

  // A record of `function` (empty: no function parameter) with its result in a slot and a
  // region of its own; returns the result slot.
  int64_t add(std::string_view kind, const std::string &name, std::vector<int64_t> operands,
              int64_t width, Parameters parameters = {}, const std::string &function = "",
              int64_t layer = -1) {
    artifact::Kernel k;
    k.kind = std::string(kind);
    k.name = name;
    std::string list;
    for (int64_t slot : operands)
      list += (list.empty() ? "" : ",") + std::to_string(slot);
    k.parameters = std::move(parameters);
    k.parameters[std::string(kp::kLayer)] = layer;
    k.parameters[std::string(kp::kOperands)] = list;
    if (!function.empty())
      k.parameters[std::string(kp::kFunction)] = function;
    int64_t result = -1;
    if (width > 0) {
      int64_t &next = nextSlot_.try_emplace(function, kp::kFirstResultSlot).first->second;
      result = next++;
      k.parameters[std::string(kp::kResult)] = result;
      k.parameters[std::string(kp::kWidth)] = width;
      if (kind != kp::kLmHead) {
        k.parameters[std::string(kp::kOffset)] = nextOffset_;
        nextOffset_ += (width + 15) / 16 * 16;
      }
    }
    records.push_back(std::move(k));
    return result;
  }
  int64_t embedding(const std::string &function = "", double scale = 1.0) {
    Parameters p{{"weight", std::string("embed")}};
    if (scale != 1.0)
      p["scale"] = scale;
    return add(kp::kEmbedding, "embed", {kp::kTokensSlot}, kHidden, p, function);
  }
  void head(int64_t x, const std::string &function = "", Parameters extra = {}) {
    extra["weight"] = std::string("head");
    extra["logit_shift"] = false;
    add(kp::kLmHead, "lm_head", {x}, kVocab, extra, function);
  }

  // Writes and loads the artifact, then creates a backend over `records`.
  std::unique_ptr<CpuBackend> backend(int64_t layers = 2) {
    StatusOr<std::unique_ptr<CpuBackend>> created = create(layers);
    EXPECT_TRUE(created.isOk()) << created.status().message();
    return created ? std::move(*created) : nullptr;
  }
  StatusOr<std::unique_ptr<CpuBackend>> create(int64_t layers = 2) {
    TinyModelOptions options;
    options.cpuRecords = false;
    TinyModel tiny(options);
    artifact::ArtifactContents contents;
    contents.producer = "CpuKernelKindsTest";
    contents.config = tiny.config();
    contents.config.vocabSize = kVocab;
    contents.config.embeddingSize = kVocab;
    contents.config.hiddenSize = kHidden;
    contents.config.numLayers = layers;
    contents.config.numHeads = 2;
    contents.config.numKvHeads = 1;
    contents.config.headDim = 4;
    contents.config.intermediateSize = 8;
    contents.program.policy = tiny.options().policy;
    contents.decodePrograms = tiny.decodePrograms();
    for (const auto &[name, values] : values_) {
      artifact::WeightSource source;
      source.name = name;
      source.shape = shapes_.at(name);
      source.dtype = artifact::DType::f32;
      source.data = values.data();
      source.size = values.size() * sizeof(float);
      if (auto half = halves_.find(name); half != halves_.end()) {
        source.dtype = artifact::DType::bf16;
        source.data = half->second.data();
        source.size = half->second.size() * sizeof(uint16_t);
      } else if (auto q = quantized_.find(name); q != quantized_.end()) {
        source.dtype = q->second.dtype;
        source.data = q->second.q.data();
        source.size = q->second.q.size();
        contents.weights.push_back({name + ".scale",
                                    artifact::DType::f32,
                                    {static_cast<int64_t>(q->second.scales.size())},
                                    q->second.scales.data(),
                                    q->second.scales.size() * sizeof(float)});
      }
      contents.weights.push_back(std::move(source));
    }
    const std::string path = dir_.file("mini.dlm");
    Status written = artifact::writeArtifact(path, contents);
    EXPECT_TRUE(written.isOk()) << written.message();
    StatusOr<artifact::ArtifactReader> opened = artifact::ArtifactReader::open(path);
    if (!opened)
      return opened.status();
    reader_ = std::make_unique<artifact::ArtifactReader>(std::move(*opened));
    StatusOr<std::shared_ptr<const model::ModelWeights>> loaded =
        model::ModelWeights::load(*reader_);
    if (!loaded)
      return loaded.status();
    weights = *loaded;
    BackendOptions backendOptions;
    backendOptions.threads = threads;
    backendOptions.kvPageTokens = 4;
    backendOptions.batchInvariant = batchInvariant;
    return CpuBackend::create(weights, records, 64, backendOptions);
  }

  std::vector<artifact::Kernel> records;
  bool batchInvariant = false;
  int threads = 2;
  std::shared_ptr<const model::ModelWeights> weights;

private:
  std::mt19937 generator_{11};
  std::map<std::string, std::vector<int64_t>> shapes_;
  std::map<std::string, std::vector<float>> values_;
  std::map<std::string, std::vector<uint16_t>> halves_;
  std::map<std::string, testing::QuantizedRows> quantized_;
  std::map<std::string, int64_t> nextSlot_;
  int64_t nextOffset_ = 0;
  TempDir dir_;
  std::unique_ptr<artifact::ArtifactReader> reader_;
};

std::vector<int32_t> ids(int64_t n, int64_t salt = 0) {
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < n; ++i)
    tokens.push_back(static_cast<int32_t>((i * 7 + 3 + salt * 5) % kVocab));
  return tokens;
}

// The embedding rows of `tokens` in double.
std::vector<double> embedded(const Mini &m, const std::vector<int32_t> &tokens, double scale = 1) {
  std::vector<double> x;
  for (int32_t t : tokens)
    for (int64_t c = 0; c < kHidden; ++c)
      x.push_back(m.w("embed")[t * kHidden + c] * scale);
  return x;
}

// y[rows, out] = x[rows, in] W^T, W [out, in] read from `data`.
std::vector<double> linear(const std::vector<double> &x, int64_t rows, int64_t in,
                           const float *data, int64_t out) {
  std::vector<double> y(rows * out, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = 0;
      for (int64_t i = 0; i < in; ++i)
        s += x[r * in + i] * data[o * in + i];
      y[r * out + o] = s;
    }
  return y;
}

double gelu(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

// Checks logits[:, :H] of every row against `expected` [rows, H].
void expectHidden(const sampling::LogitsView &logits, const std::vector<double> &expected,
                  double tolerance, const std::string &what) {
  ASSERT_EQ(static_cast<size_t>(logits.rows * kHidden), expected.size()) << what;
  for (int64_t r = 0; r < logits.rows; ++r)
    for (int64_t c = 0; c < kHidden; ++c)
      ASSERT_NEAR(logits.row(r)[c], expected[r * kHidden + c], tolerance)
          << what << ": row " << r << " column " << c;
}

// embedding * 2.5 -> weightless norm per group of 4 -> x * 0.7 (a scale record) ->
// gelu_tanh(that) * embedding -> lm_head with a softcap of 3.
TEST(CpuKernelKinds, ScaledEmbeddingWeightlessNormScaleGeluAndSoftcap) {
  Mini m;
  m.set("factor", {1}, {0.7f});
  const int64_t e = m.embedding("", 2.5);
  const int64_t n =
      m.add(kp::kRmsNorm, "norm", {e}, kHidden, {{"eps", 1e-6}, {"norm_width", int64_t{4}}});
  const int64_t s = m.add(kp::kScale, "scale", {n}, kHidden, {{"weight", std::string("factor")}});
  const int64_t g = m.add(kp::kGeluMul, "gelu", {s, e}, kHidden);
  m.head(g, "", {{"softcap", 3.0}});
  std::unique_ptr<CpuBackend> cpu = m.backend();
  ASSERT_TRUE(cpu);
  const int64_t count = 6;
  ASSERT_TRUE(cpu->reserve(count, count).isOk());
  const std::vector<int32_t> tokens = ids(count);
  StatusOr<sampling::LogitsView> logits = cpu->forwardFull(tokens.data(), count, 0, {0, count});
  ASSERT_TRUE(logits.isOk()) << logits.status().message();

  const std::vector<double> x = embedded(m, tokens, 2.5);
  std::vector<double> expected(x.size());
  for (int64_t r = 0; r < count; ++r)
    for (int64_t group = 0; group < 2; ++group) {
      double squares = 0;
      for (int64_t i = 0; i < 4; ++i)
        squares += x[r * kHidden + group * 4 + i] * x[r * kHidden + group * 4 + i];
      const double inverse = 1 / std::sqrt(squares / 4 + 1e-6);
      for (int64_t i = 0; i < 4; ++i) {
        const int64_t c = r * kHidden + group * 4 + i;
        const double v = gelu(x[c] * inverse * 0.7) * x[c];
        expected[c] = 3 * std::tanh(v / 3);
      }
    }
  expectHidden(*logits, expected, 2e-5, "chain");
  // The softcap bounds every logit, the zero columns too.
  for (int64_t r = 0; r < count; ++r)
    for (int64_t v = kHidden; v < kVocab; ++v)
      ASSERT_EQ(logits->row(r)[v], 0.0f);
}

// A bf16, int8 or FP8 embedding table stays as stored: each forward decodes its tokens' rows
// (int8 and FP8 with their row scales), and the backend holds the stored bytes, none converted.
TEST(CpuKernelKinds, EmbeddingTableReadAsStored) {
  for (artifact::DType dtype :
       {artifact::DType::bf16, artifact::DType::i8, artifact::DType::fp8_e4m3}) {
    SCOPED_TRACE(artifact::dtypeName(dtype));
    Mini m;
    m.storeAs("embed", dtype);
    m.head(m.embedding("", 2.5));
    std::unique_ptr<CpuBackend> cpu = m.backend();
    ASSERT_TRUE(cpu);
    const int64_t count = 6;
    ASSERT_TRUE(cpu->reserve(count, count).isOk());
    const std::vector<int32_t> tokens = ids(count);
    StatusOr<sampling::LogitsView> logits = cpu->forwardFull(tokens.data(), count, 0, {0, count});
    ASSERT_TRUE(logits.isOk()) << logits.status().message();
    expectHidden(*logits, embedded(m, tokens, 2.5), 2e-6, "embedding");

    StatusOr<std::shared_ptr<const PackedLinear>> head =
        PackedLinear::of(*m.weights, "head", kVocab);
    ASSERT_TRUE(head.isOk()) << head.status().message();
    const MemoryUsage usage = cpu->memoryUsage();
    EXPECT_EQ(usage.weightBytes, kVocab * kHidden * artifact::dtypeSize(dtype) + (*head)->bytes());
    EXPECT_EQ(m.weights->find("embed")->data, nullptr) << "the table was widened";
  }
}

// A table that is also the LM head (tied): on CPUs with the AVX-512 kernels the head multiplies
// the embedding's stored copy where it lies (held and counted once); elsewhere it is held twice,
// as that copy and as the head's packed tiles, and counted twice.
TEST(CpuKernelKinds, TiedBf16TableIsHeldOnceWhereTheHeadReadsItInPlace) {
  Mini m;
  m.storeAs("embed", artifact::DType::bf16);
  m.add(kp::kLmHead, "lm_head", {m.embedding()}, kVocab,
        {{"weight", std::string("embed")}, {"logit_shift", false}});
  std::unique_ptr<CpuBackend> cpu = m.backend();
  ASSERT_TRUE(cpu);
  const int64_t count = 5;
  ASSERT_TRUE(cpu->reserve(count, count).isOk());
  const std::vector<int32_t> tokens = ids(count);
  StatusOr<sampling::LogitsView> logits = cpu->forwardFull(tokens.data(), count, 0, {0, count});
  ASSERT_TRUE(logits.isOk()) << logits.status().message();
  const std::vector<double> x = embedded(m, tokens);
  const std::vector<double> expected = linear(x, count, kHidden, m.w("embed").data(), kVocab);
  for (int64_t r = 0; r < count; ++r)
    for (int64_t v = 0; v < kVocab; ++v)
      ASSERT_NEAR(logits->row(r)[v], expected[r * kVocab + v], 1e-4) << r << ", " << v;

  EXPECT_EQ(m.weights->find("embed")->data, nullptr) << "the table was widened";
  // dlm-prof's path lines: the head's, and the level of the vectorised loops.
  const std::vector<std::string> paths = cpu->kernelPaths();
  ASSERT_EQ(paths.size(), 2u);
  EXPECT_EQ(paths[1].rfind("vectorised loops: ", 0), 0u) << paths[1];
  const size_t table = kVocab * kHidden * sizeof(uint16_t);
  if (hasBlockedTileKernels()) {
    EXPECT_EQ(cpu->memoryUsage().weightBytes, table);
    EXPECT_EQ(paths[0], "1 LM head: bf16 as stored (the embedding table's copy, held once), "
                        "AVX-512 dot products, float32 arithmetic");
    return;
  }
  StatusOr<std::shared_ptr<const PackedLinear>> head =
      PackedLinear::of(*m.weights, "embed", kVocab);
  ASSERT_TRUE(head.isOk()) << head.status().message();
  EXPECT_EQ(cpu->memoryUsage().weightBytes, table + (*head)->bytes());
  EXPECT_EQ(paths[0], "1 LM head: " + (*head)->path());
}

// rope over 8-wide heads with theta 1e6 and 2 of 4 pairs rotated, plus rope over 4-wide heads
// with theta 1e4 (a second table), added; checked at positions 0.. and at a cached offset.
TEST(CpuKernelKinds, RopeOfSomePairsAndSeveralTables) {
  Mini m;
  const int64_t e = m.embedding();
  const int64_t a = m.add(kp::kRope, "rope_full", {e, kp::kPositionsSlot}, kHidden,
                          {{"theta", 1e6},
                           {"head_dim", int64_t{8}},
                           {"rotated_pairs", int64_t{2}}});
  const int64_t b = m.add(kp::kRope, "rope_sliding", {e, kp::kPositionsSlot}, kHidden,
                          {{"theta", 1e4}, {"head_dim", int64_t{4}}});
  // A kv_store gives the forward a KV layer (a cached forward needs the layer's cache).
  m.add(kp::kKvStore, "kv", {b, b}, 0, {}, "", 0);
  const int64_t sum = m.add(kp::kAdd, "sum", {a, b}, kHidden);
  m.head(sum);
  std::unique_ptr<CpuBackend> cpu = m.backend();
  ASSERT_TRUE(cpu);
  const int64_t count = 9, keep = 5;
  ASSERT_TRUE(cpu->reserve(count, count).isOk());
  const std::vector<int32_t> tokens = ids(count);
  const std::vector<double> x = embedded(m, tokens);
  auto rope = [&](int64_t row, int64_t headDim, double theta, int64_t rotated) {
    std::vector<double> y(x.begin() + row * kHidden, x.begin() + (row + 1) * kHidden);
    const int64_t half = headDim / 2;
    for (int64_t h = 0; h < kHidden / headDim; ++h)
      for (int64_t j = 0; j < rotated; ++j) {
        const double angle = row * std::pow(theta, -2.0 * j / headDim);
        const double lo = y[h * headDim + j], hi = y[h * headDim + j + half];
        y[h * headDim + j] = lo * std::cos(angle) - hi * std::sin(angle);
        y[h * headDim + j + half] = hi * std::cos(angle) + lo * std::sin(angle);
      }
    return y;
  };
  std::vector<double> expected;
  for (int64_t r = 0; r < count; ++r) {
    const std::vector<double> full = rope(r, 8, 1e6, 2), sliding = rope(r, 4, 1e4, 2);
    for (int64_t c = 0; c < kHidden; ++c)
      expected.push_back(full[c] + sliding[c]);
  }
  StatusOr<sampling::LogitsView> logits = cpu->forwardFull(tokens.data(), count, keep, {0, count});
  ASSERT_TRUE(logits.isOk()) << logits.status().message();
  expectHidden(*logits, expected, 1e-5, "full");
  // The pairs past rotated_pairs pass through exactly.
  for (int64_t r = 0; r < count; ++r)
    for (int64_t c : {2, 3, 6, 7}) {
      const float rotatedOnlyBySliding = static_cast<float>(rope(r, 4, 1e4, 2)[c]);
      EXPECT_NEAR(logits->row(r)[c] - rotatedOnlyBySliding,
                  static_cast<float>(x[r * kHidden + c]), 1e-5);
    }
  StatusOr<sampling::LogitsView> cached =
      cpu->forwardCached(tokens.data(), count, keep, {0, count - keep});
  ASSERT_TRUE(cached.isOk()) << cached.status().message();
  expectHidden(*cached, std::vector<double>(expected.begin() + keep * kHidden, expected.end()),
               1e-5, "cached");
}

// One attention layer: q = x Wq^T (2 heads of 4), k, v = x Wk^T, x Wv^T (1 KV head of 4),
// scale 0.5, under `mask` and `window`; positions [first, count) fed over the cached [0, first).
struct AttentionCase {
  bool causal;
  int64_t window;
};

std::vector<double> attentionReference(const Mini &m, const std::vector<int32_t> &tokens,
                                       int64_t first, const AttentionCase &c) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const std::vector<double> x = embedded(m, tokens);
  const std::vector<double> q = linear(x, n, kHidden, m.w("wq").data(), 8),
                            k = linear(x, n, kHidden, m.w("wk").data(), 4),
                            v = linear(x, n, kHidden, m.w("wv").data(), 4);
  std::vector<double> out;
  for (int64_t i = first; i < n; ++i) {
    std::vector<double> row(8, 0.0);
    for (int64_t h = 0; h < 2; ++h) {
      std::vector<double> s(n, -INFINITY);
      double maximum = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        bool visible = c.causal ? j <= i : true;
        if (c.window > 0)
          visible = visible && (c.causal ? i - c.window < j : (j >= first || first - j < c.window));
        if (!visible)
          continue;
        double dot = 0;
        for (int64_t d = 0; d < 4; ++d)
          dot += q[i * 8 + h * 4 + d] * k[j * 4 + d];
        s[j] = 0.5 * dot;
        maximum = std::max(maximum, s[j]);
      }
      double sum = 0;
      for (double &value : s) {
        value = std::exp(value - maximum);
        sum += value;
      }
      for (int64_t j = 0; j < n; ++j)
        for (int64_t d = 0; d < 4; ++d)
          row[h * 4 + d] += s[j] / sum * v[j * 4 + d];
    }
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

void PrintTo(const AttentionCase &c, std::ostream *out) {
  *out << (c.causal ? "causal" : "bidirectional") << " window " << c.window;
}

class CpuAttentionWindow : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(CpuAttentionWindow, MatchesTheMaskedReferenceFullAndOverACachedPrefix) {
  const AttentionCase c = GetParam();
  Mini m;
  m.random("wq", {8, kHidden}, 0.5f);
  m.random("wk", {4, kHidden}, 0.5f);
  m.random("wv", {4, kHidden}, 0.5f);
  const int64_t e = m.embedding();
  const int64_t q = m.add(kp::kLinear, "q", {e}, 8, {{"weight", std::string("wq")}});
  const int64_t k = m.add(kp::kLinear, "k", {e}, 4, {{"weight", std::string("wk")}});
  const int64_t v = m.add(kp::kLinear, "v", {e}, 4, {{"weight", std::string("wv")}});
  m.add(kp::kKvStore, "kv", {k, v}, 0, {}, "", 0);
  Parameters attention{{"mask", std::string(c.causal ? "causal" : "bidirectional")},
                       {"heads", int64_t{2}},
                       {"kv_heads", int64_t{1}},
                       {"head_dim", int64_t{4}},
                       {"scale", 0.5}};
  if (c.window > 0)
    attention["window"] = c.window;
  const int64_t o = m.add(kp::kAttention, "attention", {q, k, v}, 8, attention, "", 0);
  m.head(o);
  std::unique_ptr<CpuBackend> cpu = m.backend();
  ASSERT_TRUE(cpu);
  const int64_t count = 13, keep = 7;
  ASSERT_TRUE(cpu->reserve(count, count).isOk());
  const std::vector<int32_t> tokens = ids(count);
  StatusOr<sampling::LogitsView> full = cpu->forwardFull(tokens.data(), count, keep, {0, count});
  ASSERT_TRUE(full.isOk()) << full.status().message();
  expectHidden(*full, attentionReference(m, tokens, 0, c), 1e-5, "full");
  StatusOr<sampling::LogitsView> cached =
      cpu->forwardCached(tokens.data(), count, keep, {0, count - keep});
  ASSERT_TRUE(cached.isOk()) << cached.status().message();
  expectHidden(*cached, attentionReference(m, tokens, keep, c), 1e-5, "cached");
}

INSTANTIATE_TEST_SUITE_P(Masks, CpuAttentionWindow,
                         ::testing::Values(AttentionCase{true, 0}, AttentionCase{true, 3},
                                           AttentionCase{false, 0}, AttentionCase{false, 3},
                                           AttentionCase{false, 1}),
                         [](const ::testing::TestParamInfo<AttentionCase> &info) {
                           return std::string(info.param.causal ? "causal" : "bidirectional") +
                                  "_window" + std::to_string(info.param.window);
                         });

// Who routes: DiffusionGemma (the normed, scaled router input, softmax, expert scales), Qwen3-MoE
// without norm_topk_prob (the router reads its input as it is, no scales, the chosen weights not
// renormalised), LLaDA2 (on the plain router: sigmoid scores, an expert bias that only chooses,
// the best of two groups of two, renormalised, times a routed scale of 2.5).
enum class Routing { gemma, qwen3, llada2 };

struct MoeCase {
  bool tied = false; // three identical router rows: ties go to the lower expert id
  bool silu = false; // SiLU experts (else GELU-tanh)
  Routing routing = Routing::gemma;
  artifact::DType experts = artifact::DType::f32; // how gate_up and down are stored
  bool batchInvariant = false; // then each row alone must give its bits among the others
  // Then the logits on one thread (the experts one after the other) must be the same bits as on
  // two (the experts one per thread, their outputs added in the same order).
  bool againOnOneThread = false;
  int64_t topK = 2;
};

// moe over E = 4 experts of I = 6, top_k 2 (or MoeCase::topK), against a double reference.
void runMoe(const MoeCase &moe) {
  const bool tied = moe.tied, silu = moe.silu;
  const bool plainRouter = moe.routing == Routing::qwen3, llada2 = moe.routing == Routing::llada2;
  Mini m;
  const int64_t experts = 4, inner = 6, topK = moe.topK;
  std::vector<float> router = m.random("router", {experts, kHidden}, 1.0f);
  if (tied) {
    for (int64_t e = 2; e < experts; ++e)
      std::copy(router.begin() + kHidden, router.begin() + 2 * kHidden,
                router.begin() + e * kHidden);
    m.set("router", {experts, kHidden}, router);
  }
  m.random("router_scale", {kHidden}, 1.0f);
  m.set("expert_scale", {experts}, {1.5f, 0.5f, 2.0f, 0.75f});
  m.random("gate_up", {experts, 2 * inner, kHidden}, 0.5f);
  m.random("down", {experts, kHidden, inner}, 0.5f);
  if (moe.experts != artifact::DType::f32) {
    m.storeAs("gate_up", moe.experts);
    m.storeAs("down", moe.experts);
  }
  const int64_t e = m.embedding();
  const int64_t r = m.add(kp::kScale, "residual", {e}, kHidden, {{"weight", std::string("two")}});
  m.set("two", {1}, {2.0f});
  artifact::Attributes parameters{{"router", std::string("router")},
                                  {"gate_up", std::string("gate_up")},
                                  {"down", std::string("down")},
                                  {"experts", experts},
                                  {"top_k", topK},
                                  {"activation", std::string(silu ? "silu" : "gelu_tanh")}};
  if (llada2) {
    m.set("expert_bias", {experts}, {0.05f, -0.1f, 0.2f, 0.0f});
    parameters["router_norm"] = false;
    parameters["sigmoid_scores"] = true;
    parameters["expert_bias"] = std::string("expert_bias");
    parameters["groups"] = int64_t{2};
    parameters["top_groups"] = int64_t{1};
    parameters["routed_scale"] = 2.5;
  } else if (plainRouter) {
    parameters["router_norm"] = false;
    parameters["normalize_top_k"] = false;
  } else {
    parameters["router_scale"] = std::string("router_scale");
    parameters["expert_scale"] = std::string("expert_scale");
    parameters["eps"] = 1e-6;
    parameters["router_input_scale"] = 0.35;
  }
  const int64_t y = m.add(kp::kMoe, "moe", {r, e}, kHidden, parameters);
  m.head(y);
  m.batchInvariant = moe.batchInvariant;
  std::unique_ptr<CpuBackend> cpu = m.backend();
  ASSERT_TRUE(cpu);
  const int64_t count = 11;
  ASSERT_TRUE(cpu->reserve(count, count).isOk());
  const std::vector<int32_t> tokens = ids(count);
  StatusOr<sampling::LogitsView> logits = cpu->forwardFull(tokens.data(), count, 0, {0, count});
  ASSERT_TRUE(logits.isOk()) << logits.status().message();
  if (moe.againOnOneThread) {
    m.threads = 1;
    std::unique_ptr<CpuBackend> one = m.backend();
    ASSERT_TRUE(one);
    ASSERT_TRUE(one->reserve(count, count).isOk());
    StatusOr<sampling::LogitsView> alone = one->forwardFull(tokens.data(), count, 0, {0, count});
    ASSERT_TRUE(alone.isOk()) << alone.status().message();
    for (int64_t t = 0; t < count; ++t)
      for (int64_t v = 0; v < kVocab; ++v)
        ASSERT_EQ(alone->row(t)[v], logits->row(t)[v]) << "token " << t << ", logit " << v;
  }

  const std::vector<double> x = embedded(m, tokens);
  std::vector<double> expected(x.size(), 0.0);
  std::vector<int> chosenCount(experts, 0);
  for (int64_t t = 0; t < count; ++t) {
    const double *xr = &x[t * kHidden];
    double squares = 0;
    for (int64_t h = 0; h < kHidden; ++h)
      squares += 4 * xr[h] * xr[h];
    const double inverse = 1 / std::sqrt(squares / kHidden + 1e-6);
    std::vector<double> z(kHidden), p(experts);
    for (int64_t h = 0; h < kHidden; ++h)
      z[h] =
          plainRouter || llada2 ? 2 * xr[h] : 2 * xr[h] * inverse * m.w("router_scale")[h] * 0.35;
    double maximum = -INFINITY, sum = 0;
    for (int64_t ex = 0; ex < experts; ++ex) {
      p[ex] = 0;
      for (int64_t h = 0; h < kHidden; ++h)
        p[ex] += z[h] * m.w("router")[ex * kHidden + h];
      maximum = std::max(maximum, p[ex]);
    }
    for (double &value : p)
      sum += (value = llada2 ? 1 / (1 + std::exp(-value)) : std::exp(value - maximum));
    for (double &value : p)
      value = llada2 ? value : value / sum;
    // LLaDA2 chooses by score + bias among the experts of the better group of two.
    std::vector<double> c(p);
    if (llada2) {
      for (int64_t ex = 0; ex < experts; ++ex)
        c[ex] += m.w("expert_bias")[ex];
      const int64_t worse = c[0] + c[1] >= c[2] + c[3] ? 1 : 0;
      c[2 * worse] = c[2 * worse + 1] = -INFINITY;
    }
    std::vector<int64_t> order(experts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return c[a] > c[b]; });
    const double chosen = p[order[0]] + p[order[1]];
    for (int64_t j = 0; j < topK; ++j) {
      const int64_t ex = order[j];
      ++chosenCount[ex];
      const double weight = plainRouter ? p[ex]
                            : llada2    ? p[ex] / chosen * 2.5
                                        : p[ex] / chosen * m.w("expert_scale")[ex];
      const float *gu = m.w("gate_up").data() + ex * 2 * inner * kHidden;
      const float *dn = m.w("down").data() + ex * kHidden * inner;
      const std::vector<double> h = linear(std::vector<double>(xr, xr + kHidden), 1, kHidden, gu,
                                           2 * inner);
      std::vector<double> a(inner);
      for (int64_t i = 0; i < inner; ++i)
        a[i] = (silu ? h[i] / (1 + std::exp(-h[i])) : gelu(h[i])) * h[inner + i];
      const std::vector<double> out = linear(a, 1, inner, dn, kHidden);
      for (int64_t c = 0; c < kHidden; ++c)
        expected[t * kHidden + c] += weight * out[c];
    }
  }
  if (moe.experts != artifact::DType::f32 && !moe.batchInvariant) {
    // Packed as stored, never widened; an expert of at most 4 tokens (a decoded row at a time)
    // and one of more (widened tiles and an sgemm).
    EXPECT_EQ(m.weights->find("gate_up")->data, nullptr);
    EXPECT_EQ(m.weights->find("down")->data, nullptr);
    if (topK == 2) { // with 3 of the 4 experts a token, every expert gets more
      EXPECT_LE(*std::min_element(chosenCount.begin(), chosenCount.end()), 4);
      EXPECT_GT(*std::max_element(chosenCount.begin(), chosenCount.end()), 4);
    }
  }
  if (tied) { // experts 1, 2 and 3 tie: 3 never wins a place, 2 only beside 1
    EXPECT_EQ(chosenCount[3], 0);
    EXPECT_GT(chosenCount[1], 0);
    EXPECT_LE(chosenCount[2], chosenCount[1]);
  }
  expectHidden(*logits, expected, 2e-5, tied ? "tied" : "random");
  if (!moe.batchInvariant)
    return;
  const std::vector<float> together(logits->row(0), logits->row(0) + count * kVocab);
  for (int64_t t = 0; t < count; ++t) {
    StatusOr<sampling::LogitsView> alone = cpu->forwardFull(&tokens[t], 1, 0, {0, 1});
    ASSERT_TRUE(alone.isOk()) << alone.status().message();
    for (int64_t v = 0; v < kVocab; ++v)
      ASSERT_EQ(alone->row(0)[v], together[t * kVocab + v]) << "row " << t << ", logit " << v;
  }
}

TEST(CpuKernelKinds, MoeMatchesTheReference) { runMoe({}); }
TEST(CpuKernelKinds, MoeTiesGoToTheLowerExpert) { runMoe({/*tied=*/true}); }
TEST(CpuKernelKinds, MoeWithSiluExperts) { runMoe({false, /*silu=*/true}); }
TEST(CpuKernelKinds, MoeWithQwen3Routing) { runMoe({false, true, Routing::qwen3}); }
TEST(CpuKernelKinds, MoeWithLLaDA2Routing) { runMoe({false, true, Routing::llada2}); }
// Experts kept as stored (PackedExperts) run on the projections' tiles: the reference's results
// on the stored values.
TEST(CpuKernelKinds, MoeWithExpertsStoredInBf16Int8AndFp8) {
  for (artifact::DType dtype :
       {artifact::DType::bf16, artifact::DType::i8, artifact::DType::fp8_e4m3}) {
    SCOPED_TRACE(artifact::dtypeName(dtype));
    runMoe({false, true, Routing::qwen3, dtype});
  }
}

// Batch-invariant forwards (the engine's): a row's logits are the same bits alone as among the
// others that share its experts (every weight read widened, bf16 experts too).
TEST(CpuKernelKinds, BatchInvariantMoeGivesEachRowItsBitsAlone) {
  for (artifact::DType dtype : {artifact::DType::f32, artifact::DType::bf16}) {
    SCOPED_TRACE(artifact::dtypeName(dtype));
    runMoe({false, true, Routing::llada2, dtype, /*batchInvariant=*/true});
  }
}

// Two threads run the experts one per thread (a forward's few tokens over small experts): the
// same bits as one thread running them one after the other, float32 and bf16 experts; three
// experts a token, so that adding a token's outputs in another order would change its bits.
TEST(CpuKernelKinds, MoeExpertsOnePerThreadGiveTheSerialBits) {
  for (artifact::DType dtype : {artifact::DType::f32, artifact::DType::bf16}) {
    SCOPED_TRACE(artifact::dtypeName(dtype));
    runMoe({false, true, Routing::qwen3, dtype, false, /*againOnOneThread=*/true, /*topK=*/3});
  }
}

// A router scale applies to the normed router input: without the norm it is refused by name.
TEST(CpuKernelKinds, MoeRouterScaleNeedsTheRouterNorm) {
  Mini m;
  m.random("router", {4, kHidden}, 1.0f);
  m.random("router_scale", {kHidden}, 1.0f);
  m.random("gate_up", {4, 12, kHidden}, 0.5f);
  m.random("down", {4, kHidden, 6}, 0.5f);
  const int64_t e = m.embedding();
  m.head(m.add(kp::kMoe, "moe", {e, e}, kHidden,
               {{"router", std::string("router")},
                {"router_scale", std::string("router_scale")},
                {"gate_up", std::string("gate_up")},
                {"down", std::string("down")},
                {"experts", int64_t{4}},
                {"top_k", int64_t{2}},
                {"router_norm", false},
                {"activation", std::string("silu")}}));
  StatusOr<std::unique_ptr<CpuBackend>> cpu = m.create();
  ASSERT_FALSE(cpu.isOk());
  EXPECT_NE(cpu.status().message().find("router_scale and router_input_scale scale the normed "
                                        "router input: they need router_norm"),
            std::string::npos)
      << cpu.status().message();
}

// Two functions over one K/V cache with layers of different KV widths: "encode" (causal, writes
// K/V) and "decode" (soft_embedding of the input added to the embedding, bidirectional). Layer 0
// keeps 1 KV head of 4, layer 1 1 KV head of 8; both read the same embedding-derived keys.
class TwoFunctions : public ::testing::Test {
protected:
  void SetUp() override {
    m.random("wq0", {8, kHidden}, 0.5f);
    m.random("wk0", {4, kHidden}, 0.5f);
    m.random("wv0", {4, kHidden}, 0.5f);
    m.random("wq1", {8, kHidden}, 0.5f);
    m.random("wk1", {8, kHidden}, 0.5f);
    m.random("wv1", {8, kHidden}, 0.5f);
    for (const char *function : {"encode", "decode"}) {
      const std::string f = function;
      const bool decode = f == "decode";
      int64_t x = m.embedding(f);
      if (decode) {
        const int64_t soft = m.add(kp::kSoftEmbedding, "soft", {}, kHidden,
                                   {{"weight", std::string("embed")}, {"scale", 1.5}}, f);
        x = m.add(kp::kAdd, "input", {x, soft}, kHidden, {}, f);
      }
      const std::string mask = decode ? "bidirectional" : "causal";
      int64_t total = -1;
      for (int64_t layer = 0; layer < 2; ++layer) {
        const std::string l = std::to_string(layer);
        const int64_t kv = layer == 0 ? 4 : 8, hd = layer == 0 ? 4 : 8, heads = layer == 0 ? 2 : 1;
        const int64_t q = m.add(kp::kLinear, "q" + l, {x}, 8, {{"weight", "wq" + l}}, f);
        const int64_t k = m.add(kp::kLinear, "k" + l, {x}, kv, {{"weight", "wk" + l}}, f);
        const int64_t v = m.add(kp::kLinear, "v" + l, {x}, kv, {{"weight", "wv" + l}}, f);
        m.add(kp::kKvStore, "kv" + l, {k, v}, 0, {}, f, layer);
        const int64_t o = m.add(kp::kAttention, "attention" + l, {q, k, v}, 8,
                                {{"mask", mask},
                                 {"heads", heads},
                                 {"kv_heads", int64_t{1}},
                                 {"head_dim", hd}},
                                f, layer);
        total = total < 0 ? o : m.add(kp::kAdd, "sum", {total, o}, kHidden, {}, f);
      }
      m.head(total, f);
    }
    cpu = m.backend();
    ASSERT_TRUE(cpu);
    ASSERT_TRUE(cpu->reserve(16, 16).isOk());
  }

  // The two layers' outputs summed for fed positions [first, n): keys and values of positions
  // before `first` come from `cachedX` (the encoder's inputs), the fed ones from `fedX`.
  std::vector<double> reference(const std::vector<double> &cachedX,
                                const std::vector<double> &fedX, int64_t first,
                                bool causal) const {
    const int64_t fed = static_cast<int64_t>(fedX.size()) / kHidden, n = first + fed;
    std::vector<double> keysX(cachedX.begin(), cachedX.begin() + first * kHidden);
    keysX.insert(keysX.end(), fedX.begin(), fedX.end());
    std::vector<double> out(fed * kHidden, 0.0);
    for (int64_t layer = 0; layer < 2; ++layer) {
      const std::string l = std::to_string(layer);
      const int64_t kv = layer == 0 ? 4 : 8, hd = kv, heads = layer == 0 ? 2 : 1;
      const std::vector<double> q = linear(fedX, fed, kHidden, m.w("wq" + l).data(), 8),
                                k = linear(keysX, n, kHidden, m.w("wk" + l).data(), kv),
                                v = linear(keysX, n, kHidden, m.w("wv" + l).data(), kv);
      for (int64_t i = 0; i < fed; ++i)
        for (int64_t h = 0; h < heads; ++h) {
          std::vector<double> s;
          double maximum = -INFINITY, sum = 0;
          const int64_t visible = causal ? first + i + 1 : n;
          for (int64_t j = 0; j < visible; ++j) {
            double dot = 0;
            for (int64_t d = 0; d < hd; ++d)
              dot += q[i * 8 + h * hd + d] * k[j * kv + d];
            s.push_back(dot / std::sqrt(double(hd)));
            maximum = std::max(maximum, s.back());
          }
          for (double &value : s)
            sum += (value = std::exp(value - maximum));
          for (int64_t j = 0; j < visible; ++j)
            for (int64_t d = 0; d < hd; ++d)
              out[i * kHidden + h * hd + d] += s[j] / sum * v[j * kv + d];
        }
    }
    return out;
  }

  // Adds to rows [first, first + input rows) of `fed` factor * softmax(input row) @ embed, the
  // decoder's soft embedding in double.
  void addSoftEmbedding(std::vector<double> &fed, const std::vector<float> &input, int64_t width,
                        int64_t first, double factor) const {
    const int64_t rows = static_cast<int64_t>(input.size()) / width;
    for (int64_t t = 0; t < rows; ++t) {
      double maximum = -INFINITY, sum = 0;
      for (int64_t j = 0; j < width; ++j)
        maximum = std::max<double>(maximum, input[t * width + j]);
      std::vector<double> p(width);
      for (int64_t j = 0; j < width; ++j)
        sum += (p[j] = std::exp(input[t * width + j] - maximum));
      for (int64_t c = 0; c < kHidden; ++c)
        for (int64_t j = 0; j < width; ++j)
          fed[(first + t) * kHidden + c] += factor * p[j] / sum * m.w("embed")[j * kHidden + c];
    }
  }

  StatusOr<sampling::LogitsView> forward(sampling::ForwardSpec::Mode mode, std::string_view f,
                                         const std::vector<int32_t> &tokens, int64_t keep,
                                         const std::vector<float> *input = nullptr,
                                         int64_t inputWidth = 0) {
    sampling::ForwardSpec spec;
    spec.mode = mode;
    spec.function = f;
    spec.tokens = tokens.data();
    spec.count = static_cast<int64_t>(tokens.size());
    spec.keep = keep;
    spec.rows = {0, spec.count - keep};
    spec.input = input ? input->data() : nullptr;
    spec.inputWidth = inputWidth;
    return cpu->forward(spec);
  }

  Mini m;
  std::unique_ptr<CpuBackend> cpu;
};

TEST_F(TwoFunctions, AppendKeepsAndCommitsTheKvAndLaterCachedForwardsSeeIt) {
  using Mode = sampling::ForwardSpec::Mode;
  const std::vector<int32_t> prompt = ids(5), all = ids(9); // all[0, 5) == prompt
  // The encoder appends the prompt to the empty cache.
  StatusOr<sampling::LogitsView> encoded = forward(Mode::append, "encode", prompt, 0);
  ASSERT_TRUE(encoded.isOk()) << encoded.status().message();
  expectHidden(*encoded, reference({}, embedded(m, prompt), 0, true), 1e-5, "encode");
  EXPECT_EQ(cpu->kvCache().length(0), 5);
  EXPECT_EQ(cpu->kvCache().committedLength(0), 5);

  // The decoder over the cached prompt, without input: its soft embedding is zero.
  StatusOr<sampling::LogitsView> decoded = forward(Mode::cached, "decode", all, 5);
  ASSERT_TRUE(decoded.isOk()) << decoded.status().message();
  const std::vector<int32_t> canvas(all.begin() + 5, all.end());
  expectHidden(*decoded, reference(embedded(m, prompt), embedded(m, canvas), 5, false), 1e-5,
               "decode without input");
  EXPECT_EQ(cpu->kvCache().length(0), 5);

  // With input rows of 20 of the table's 24 rows.
  const int64_t width = 20;
  std::vector<float> input(4 * width);
  for (size_t i = 0; i < input.size(); ++i)
    input[i] = static_cast<float>(std::sin(0.37 * i) * 3);
  std::vector<double> fed = embedded(m, canvas);
  addSoftEmbedding(fed, input, width, 0, 1.5);
  decoded = forward(Mode::cached, "decode", all, 5, &input, width);
  ASSERT_TRUE(decoded.isOk()) << decoded.status().message();
  expectHidden(*decoded, reference(embedded(m, prompt), fed, 5, false), 1e-5, "decode with input");

  // The encoder commits the canvas; a later decoder forward sees all 9 cached positions.
  encoded = forward(Mode::append, "encode", all, 5);
  ASSERT_TRUE(encoded.isOk()) << encoded.status().message();
  expectHidden(*encoded, reference(embedded(m, prompt), embedded(m, canvas), 5, true), 1e-5,
               "encode appended");
  EXPECT_EQ(cpu->kvCache().committedLength(0), 9);
  std::vector<int32_t> longer = all;
  for (int32_t t : ids(3, 1))
    longer.push_back(t);
  decoded = forward(Mode::cached, "decode", longer, 9);
  ASSERT_TRUE(decoded.isOk()) << decoded.status().message();
  expectHidden(*decoded,
               reference(embedded(m, all), embedded(m, std::vector<int32_t>(longer.begin() + 9,
                                                                            longer.end())),
                         9, false),
               1e-5, "decode after the commit");
  EXPECT_EQ(cpu->kvCache().length(0), 9);
}

// Input rows from a later fed row (ForwardSpec::inputFirst, iteration smoothing with the prefix
// cache): the fed rows before it read no input (their soft embedding is zero, not the softmax of
// zeros), the others read the input's rows in order, times the run-time input scale.
TEST_F(TwoFunctions, InputRowsFromALaterFedRowLeaveTheEarlierOnesWithout) {
  using Mode = sampling::ForwardSpec::Mode;
  const std::vector<int32_t> prompt = ids(5), all = ids(9);
  ASSERT_TRUE(forward(Mode::append, "encode", prompt, 0).isOk());
  const std::vector<int32_t> canvas(all.begin() + 5, all.end());
  const int64_t width = 20, first = 2, rows = 2;
  std::vector<float> input(rows * width);
  for (size_t i = 0; i < input.size(); ++i)
    input[i] = static_cast<float>(std::cos(0.29 * i) * 2);
  std::vector<double> fed = embedded(m, canvas);
  addSoftEmbedding(fed, input, width, first, 0.5 * 1.5);
  sampling::ForwardSpec spec;
  spec.mode = Mode::cached;
  spec.function = "decode";
  spec.tokens = all.data();
  spec.count = 9;
  spec.keep = 5;
  spec.rows = {0, 4};
  spec.input = input.data();
  spec.inputWidth = width;
  spec.inputFirst = first;
  spec.inputScale = 0.5f;
  StatusOr<sampling::LogitsView> decoded = cpu->forward(spec);
  ASSERT_TRUE(decoded.isOk()) << decoded.status().message();
  expectHidden(*decoded, reference(embedded(m, prompt), fed, 5, false), 1e-5, "input from row 2");

  // Fewer rows than a soft embedding reads, more than the fed ones from `first`, or a first row
  // past the fed ones fail by name.
  spec.inputRows = 1;
  EXPECT_EQ(
      cpu->forward(spec).status().message(),
      "forward: record 'soft' reads an input row for each of 2 fed tokens, the input holds 1");
  spec.inputRows = 2;
  spec.inputFirst = 3;
  EXPECT_EQ(cpu->forward(spec).status().message(),
            "forward: 2 input rows from fed row 3 for 4 fed tokens");
  spec.inputRows = -1;
  spec.inputFirst = 5;
  EXPECT_EQ(cpu->forward(spec).status().message(),
            "forward: -1 input rows from fed row 5 for 4 fed tokens");
  EXPECT_EQ(cpu->kvCache().length(0), 5);
}

TEST_F(TwoFunctions, ErrorsNameTheFunctionAndTheInput) {
  using Mode = sampling::ForwardSpec::Mode;
  const std::vector<int32_t> tokens = ids(6);
  EXPECT_EQ(forward(Mode::full, "generate", tokens, 0).status().message(),
            "forward: the kernel program has no function 'generate' (it has 'decode', 'encode')");
  // The default function is absent here.
  EXPECT_EQ(cpu->forwardFull(tokens.data(), 6, 0, {0, 6}).status().message(),
            "forward: the kernel program has no function 'forward' (it has 'decode', 'encode')");
  std::vector<float> input(6 * 30, 0.0f);
  EXPECT_EQ(forward(Mode::full, "decode", tokens, 0, &input, 30).status().message(),
            "forward: input rows of 30 values do not fit record 'soft', whose table has 24 rows");
  EXPECT_EQ(forward(Mode::full, "decode", tokens, 0, &input, 0).status().message(),
            "forward: input rows of 0 values do not fit record 'soft', whose table has 24 rows");
  EXPECT_EQ(forward(Mode::full, "encode", tokens, 0, &input, 4).status().message(),
            "forward: function 'encode' reads no input rows (it has no soft_embedding or "
            "forward_input record)");
  EXPECT_EQ(forward(Mode::append, "encode", tokens, 2).status().message(),
            "append forward: the KV cache holds 0 tokens, the caller expected 2 of 6");
  // A failed append leaves the cache as it was.
  const std::vector<int32_t> three(tokens.begin(), tokens.begin() + 3);
  ASSERT_TRUE(forward(Mode::append, "encode", three, 0).isOk());
  std::vector<int32_t> bad = tokens;
  bad[4] = 99;
  EXPECT_EQ(forward(Mode::append, "encode", bad, 3).status().message(),
            "forward: token id 99 is outside [0, 24)");
  EXPECT_EQ(cpu->kvCache().length(0), 3);
  EXPECT_TRUE(forward(Mode::append, "encode", tokens, 3).isOk());
  EXPECT_EQ(cpu->kvCache().length(0), 6);
}

TEST_F(TwoFunctions, MemoryUsageCountsEveryFunctionsWeightsOnce) {
  // embed (24*8 floats, widened) and, packed in oneDNN's layout (padded to its blocks), the head
  // and the six projections, each once though both functions read them.
  size_t packed = 0;
  for (const char *name : {"head", "wq0", "wk0", "wv0", "wq1", "wk1", "wv1"}) {
    const int64_t rows = m.weights->find(name)->rows;
    StatusOr<std::shared_ptr<const PackedLinear>> w = PackedLinear::of(*m.weights, name, rows);
    ASSERT_TRUE(w.isOk()) << w.status().message();
    packed += (*w)->bytes();
  }
  EXPECT_EQ(cpu->memoryUsage().weightBytes, 24 * 8 * sizeof(float) + packed);
}

// ---- Speculative decoding (DFlash): forward_input, select_input_rows, capture, extend ----------

// embedding -> forward_input -> select_input_rows(input, embedding) -> capture(embedding,
// selected) -> lm_head(selected): the logits are the input's rows, then the embedding's.
class InputRowsAndCapture : public ::testing::Test {
protected:
  void SetUp() override {
    const int64_t x = m.embedding();
    const int64_t input = m.add(kp::kForwardInput, "context", {}, kHidden);
    const int64_t selected = m.add(kp::kSelectInputRows, "select", {input, x}, kHidden);
    m.add(kp::kCapture, "capture", {x, selected}, 0);
    m.head(selected);
    cpu = m.backend();
    ASSERT_TRUE(cpu);
    ASSERT_TRUE(cpu->reserve(16, 16).isOk());
  }

  StatusOr<sampling::LogitsView> forward(const std::vector<int32_t> &tokens, const float *input,
                                         int64_t inputRows, int64_t inputWidth = kHidden) {
    sampling::ForwardSpec spec = sampling::ForwardSpec::of(
        sampling::ForwardSpec::Mode::full, tokens.data(), static_cast<int64_t>(tokens.size()),
        0, {0, static_cast<int64_t>(tokens.size())});
    spec.input = input;
    spec.inputWidth = inputWidth;
    spec.inputRows = inputRows;
    return cpu->forward(spec);
  }

  Mini m;
  std::unique_ptr<CpuBackend> cpu;
};

TEST_F(InputRowsAndCapture, TheFirstRowsComeFromTheInputAndTheCaptureHoldsBothOperands) {
  const std::vector<int32_t> tokens = ids(5);
  std::vector<float> input(3 * kHidden);
  for (size_t i = 0; i < input.size(); ++i)
    input[i] = static_cast<float>(std::cos(0.3 * i));
  StatusOr<sampling::LogitsView> logits = forward(tokens, input.data(), 3);
  ASSERT_TRUE(logits.isOk()) << logits.status().message();
  std::vector<double> selected = embedded(m, tokens), x = selected;
  for (size_t i = 0; i < input.size(); ++i)
    selected[i] = input[i];
  expectHidden(*logits, selected, 1e-6, "selected rows");
  const sampling::LogitsView captured = cpu->capturedRows();
  ASSERT_EQ(captured.rows, 5);
  ASSERT_EQ(captured.vocab, 2 * kHidden);
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t c = 0; c < kHidden; ++c) {
      EXPECT_EQ(captured.row(r)[c], static_cast<float>(x[r * kHidden + c]));
      EXPECT_EQ(captured.row(r)[kHidden + c], static_cast<float>(selected[r * kHidden + c]));
    }
  // Without input every row is the embedding's (forward_input reads zero rows).
  logits = forward(tokens, nullptr, -1, 0);
  ASSERT_TRUE(logits.isOk()) << logits.status().message();
  expectHidden(*logits, x, 1e-6, "no input");
}

TEST_F(InputRowsAndCapture, InputErrors) {
  const std::vector<int32_t> tokens = ids(4);
  std::vector<float> input(8 * kHidden, 1.0f);
  EXPECT_EQ(forward(tokens, input.data(), 5).status().message(),
            "forward: 5 input rows for 4 fed tokens");
  EXPECT_EQ(forward(tokens, input.data(), 2, 6).status().message(),
            "forward: input rows of 6 values do not fit record 'context', which reads 8");
  // A failed forward leaves no captured rows behind.
  EXPECT_EQ(cpu->capturedRows().data, nullptr);
}

// Two functions over one sequence: "forward" keeps its K/V in layer 0, "draft" in layer 1, past
// the model's single layer (a drafter's layers follow the target's). Each: q, k, v projections
// of the embedding, causal attention, the LM head on its output.
class ExtendForward : public ::testing::Test {
protected:
  void SetUp() override {
    for (const char *name : {"forward", "draft"}) {
      const std::string f = name == std::string("forward") ? "" : name;
      const std::string l = f.empty() ? "0" : "1";
      m.random("wq" + l, {8, kHidden}, 0.5f);
      m.random("wk" + l, {4, kHidden}, 0.5f);
      m.random("wv" + l, {4, kHidden}, 0.5f);
      const int64_t x = m.embedding(f);
      const int64_t q = m.add(kp::kLinear, "q", {x}, 8, {{"weight", "wq" + l}}, f);
      const int64_t k = m.add(kp::kLinear, "k", {x}, 4, {{"weight", "wk" + l}}, f);
      const int64_t v = m.add(kp::kLinear, "v", {x}, 4, {{"weight", "wv" + l}}, f);
      const int64_t layer = f.empty() ? 0 : 1;
      m.add(kp::kKvStore, "kv", {k, v}, 0, {}, f, layer);
      const int64_t o = m.add(kp::kAttention, "attention", {q, k, v}, 8,
                              {{"mask", std::string("causal")},
                               {"heads", int64_t{2}},
                               {"kv_heads", int64_t{1}},
                               {"head_dim", int64_t{4}}},
                              f, layer);
      m.head(o, f);
    }
    cpu = m.backend(/*layers=*/1);
    ASSERT_TRUE(cpu);
    ASSERT_TRUE(cpu->reserve(16, 16).isOk());
  }

  // Function `l`'s attention output at positions [first, n) when position j's K/V (and query)
  // come from token kv[j].
  std::vector<double> reference(const std::string &l, const std::vector<int32_t> &kv,
                                int64_t first) const {
    const int64_t n = static_cast<int64_t>(kv.size());
    const std::vector<double> x = embedded(m, kv);
    const std::vector<double> q = linear(x, n, kHidden, m.w("wq" + l).data(), 8),
                              k = linear(x, n, kHidden, m.w("wk" + l).data(), 4),
                              v = linear(x, n, kHidden, m.w("wv" + l).data(), 4);
    std::vector<double> out;
    for (int64_t i = first; i < n; ++i)
      for (int64_t h = 0; h < 2; ++h) {
        std::vector<double> s;
        double maximum = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < 4; ++d)
            dot += q[i * 8 + h * 4 + d] * k[j * 4 + d];
          s.push_back(dot / 2);
          maximum = std::max(maximum, s.back());
        }
        for (double &value : s)
          sum += (value = std::exp(value - maximum));
        for (int64_t d = 0; d < 4; ++d) {
          double o = 0;
          for (int64_t j = 0; j <= i; ++j)
            o += s[j] / sum * v[j * 4 + d];
          out.push_back(o);
        }
      }
    return out;
  }

  StatusOr<sampling::LogitsView> forward(sampling::ForwardSpec::Mode mode, std::string_view f,
                                         const std::vector<int32_t> &tokens, int64_t keep,
                                         int64_t first = 0) {
    sampling::ForwardSpec spec;
    spec.mode = mode;
    spec.function = f;
    spec.tokens = tokens.data();
    spec.count = static_cast<int64_t>(tokens.size());
    spec.keep = keep;
    spec.first = first;
    const int64_t from = mode == sampling::ForwardSpec::Mode::extend ? first : keep;
    spec.rows = {0, spec.count - from};
    return cpu->forward(spec);
  }

  Mini m;
  std::unique_ptr<CpuBackend> cpu;
};

TEST_F(ExtendForward, RewritesOnlyItsLayersAndKeepsTheCacheAtKeep) {
  using Mode = sampling::ForwardSpec::Mode;
  const std::vector<int32_t> seq = ids(8);
  std::vector<int32_t> other = seq; // the same first 3 tokens, then others
  for (size_t i = 3; i < other.size(); ++i)
    other[i] = static_cast<int32_t>((other[i] + 5) % kVocab);
  // The target fills [0, 6) of layer 0.
  StatusOr<sampling::LogitsView> logits = forward(Mode::full, "", seq, 6);
  ASSERT_TRUE(logits.isOk()) << logits.status().message();

  // The drafter extends over all of it: [0, 6) written in layer 1, [6, 8) dropped again.
  logits = forward(Mode::extend, "draft", seq, 6, 0);
  ASSERT_TRUE(logits.isOk()) << logits.status().message();
  expectHidden(*logits, reference("1", seq, 0), 1e-5, "extend from 0");
  EXPECT_EQ(cpu->kvCache().length(0), 6);
  EXPECT_EQ(cpu->kvCache().committedLength(0), 6);
  logits = forward(Mode::cached, "draft", seq, 6);
  ASSERT_TRUE(logits.isOk()) << logits.status().message();
  expectHidden(*logits, reference("1", seq, 6), 1e-5, "draft cached after the extend");

  // Rewriting [3, 6) of layer 1 from other tokens: the drafter sees them, the target (layer 0)
  // still its own.
  logits = forward(Mode::extend, "draft", other, 6, 3);
  ASSERT_TRUE(logits.isOk()) << logits.status().message();
  expectHidden(*logits, reference("1", other, 3), 1e-5, "extend from 3");
  EXPECT_EQ(cpu->kvCache().length(0), 6);
  logits = forward(Mode::cached, "draft", other, 6);
  ASSERT_TRUE(logits.isOk()) << logits.status().message();
  expectHidden(*logits, reference("1", other, 6), 1e-5, "draft sees the rewrite");
  std::vector<int32_t> mixed(seq.begin(), seq.begin() + 6);
  mixed.insert(mixed.end(), other.begin() + 6, other.end());
  logits = forward(Mode::cached, "", other, 6);
  ASSERT_TRUE(logits.isOk()) << logits.status().message();
  expectHidden(*logits, reference("0", mixed, 6), 1e-5, "target keeps its layer");
  // No capture record: no captured rows.
  EXPECT_EQ(cpu->capturedRows().rows, 0);
}

TEST_F(ExtendForward, ErrorsLeaveTheCacheConsistent) {
  using Mode = sampling::ForwardSpec::Mode;
  const std::vector<int32_t> seq = ids(8);
  ASSERT_TRUE(forward(Mode::full, "", seq, 6).isOk());
  EXPECT_EQ(forward(Mode::extend, "draft", seq, 5, 0).status().message(),
            "extend forward: the KV cache holds 6 tokens, the caller expected 5, feeding [0, 8)");
  EXPECT_EQ(forward(Mode::extend, "draft", seq, 6, 7).status().message(),
            "extend forward: the KV cache holds 6 tokens, the caller expected 6, feeding [7, 8)");
  EXPECT_EQ(cpu->kvCache().length(0), 6);
}

} // namespace
} // namespace dlm::cpu

namespace dlm::cpu {
namespace {

// softEmbedding with a mask token (iteration smoothing): the mask's rows equal what the plain
// soft embedding gives them, times the factor, whatever rows lie between (scattered rows take
// the copy path, a run of them the direct one); every other row is zero.
TEST(CpuSoftEmbedding, MaskTokenRowsOnly) {
  const int64_t rows = 70, width = 6, hidden = 5;
  std::mt19937 random(7);
  std::normal_distribution<float> normal(0.f, 2.f);
  std::vector<float> input(rows * width), table(width * hidden);
  for (float &v : input)
    v = normal(random);
  for (float &v : table)
    v = normal(random);
  std::vector<int32_t> tokens(rows, 8);
  for (int64_t r = 0; r < rows; ++r)
    if (r % 3 == 0 || (r >= 40 && r < 60))
      tokens[r] = 7;
  const model::StoredTensor tensor{artifact::DType::f32, table.data(), width, hidden, nullptr};
  std::vector<float> scratch;
  std::vector<float> all(rows * hidden), masked(rows * hidden, -1.f);
  ThreadPool pool(1);
  ASSERT_TRUE(softEmbedding(input.data(), rows, width, tensor, 1.f, tokens.data(), -1, all.data(),
                            scratch, pool)
                  .isOk());
  ASSERT_TRUE(softEmbedding(input.data(), rows, width, tensor, 0.25f, tokens.data(), 7,
                            masked.data(), scratch, pool)
                  .isOk());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < hidden; ++h) {
      const float want = tokens[r] == 7 ? 0.25f * all[r * hidden + h] : 0.f;
      EXPECT_NEAR(masked[r * hidden + h], want, 1e-5f) << "row " << r << " column " << h;
    }
}

// A table read as stored (bf16 by the blocked kernels where the CPU has them, f16 and a hidden
// width the kernels do not take by widened panels) gives the product of its float32 values: a
// vocabulary of several of the kernels' 256-row panels and of the widened path's, chunks of more
// than 12 rows, 2 threads, hidden widths with a 16-column tail and one not a multiple of 16.
TEST(CpuSoftEmbedding, StoredTablesMultiplyAsTheirFloatValues) {
  const int64_t rows = 45, vocab = 700;
  std::mt19937 random(11);
  std::normal_distribution<float> normal(0.f, 2.f);
  std::vector<float> input(rows * vocab);
  for (float &v : input)
    v = normal(random);
  std::vector<int32_t> tokens(rows, 0);
  ThreadPool pool(2);
  for (const int64_t hidden : {48, 40, 1024})
    for (const artifact::DType dtype : {artifact::DType::bf16, artifact::DType::f16}) {
      std::vector<uint16_t> bits(vocab * hidden);
      std::vector<float> values(vocab * hidden);
      for (size_t i = 0; i < bits.size(); ++i) {
        // f16: a random sign and mantissa, exponents 13-16 (0.25 to 4 in magnitude).
        bits[i] = dtype == artifact::DType::bf16
                      ? bf16FromFloat(normal(random))
                      : static_cast<uint16_t>((random() & 0x83ffu) | ((13u + random() % 4) << 10));
        values[i] = dtype == artifact::DType::bf16 ? floatFromBf16(bits[i]) : floatFromF16(bits[i]);
      }
      const model::StoredTensor stored{dtype, bits.data(), vocab, hidden, nullptr};
      const model::StoredTensor wide{artifact::DType::f32, values.data(), vocab, hidden, nullptr};
      std::vector<float> scratch, got(rows * hidden), want(rows * hidden);
      ASSERT_TRUE(softEmbedding(input.data(), rows, vocab, stored, 0.5f, tokens.data(), -1,
                                got.data(), scratch, pool)
                      .isOk());
      ASSERT_TRUE(softEmbedding(input.data(), rows, vocab, wide, 0.5f, tokens.data(), -1,
                                want.data(), scratch, pool)
                      .isOk());
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-4f * (1.f + std::abs(want[i])))
            << "hidden " << hidden << " " << artifact::dtypeName(dtype) << " element " << i;
    }
}

} // namespace
} // namespace dlm::cpu
