// The CPU backend's kernels (runtime/cpu/Kernels.h) and the sampling arithmetic its decoder uses
// (runtime/sampling/SamplingMath.h, CounterRng.h) against the shared double-precision references
// (KernelReferences.h) that the CUDA kernels are held to on the emulated device. Shapes are random
// and ragged: odd widths, 1..N rows, padded row strides, partial and scattered KV pages, GQA and
// MHA, query chunks past the attention's chunk size.
//
// Not checked here but in tests/runtime/cpu/CpuKernelKindsTest.cpp, each against a
// double-precision loop of its own: the kernel kinds DiffusionGemma and DFlash brought (gelu_tanh
// gating, the weightless RMSNorm, RoPE of some pairs, attention scale and sliding window, lm_head
// softcap, MoE). The per-config path (model::modelDims) still refuses block-causal and sliding
// masks by name (checked below); the kernel program carries a window per attention record.
#include "runtime/cpu/Kernels.h"
#include "runtime/model/ModelWeights.h"
#include "runtime/sampling/CounterRng.h"
#include "runtime/sampling/SamplingMath.h"
#include "tests/runtime/conformance/KernelReferences.h"
#include "tests/runtime/conformance/Tolerance.h"
#include "tests/runtime/model/TinyModel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace dlm::cpu {
namespace {

using reference::near;

int randomInt(std::mt19937 &random, int low, int high) {
  return std::uniform_int_distribution<int>(low, high)(random);
}

std::vector<float> randomFloats(std::mt19937 &random, size_t count, float low, float high) {
  std::uniform_real_distribution<float> uniform(low, high);
  std::vector<float> values(count);
  for (float &value : values)
    value = uniform(random);
  return values;
}

std::vector<float> absolute(const std::vector<float> &values) {
  std::vector<float> result(values.size());
  std::transform(values.begin(), values.end(), result.begin(),
                 [](float value) { return std::fabs(value); });
  return result;
}

// A float32 dot product of `terms` products may be off by a few ulp of the sum of the products'
// magnitudes per term; blocked summation keeps it near sqrt(terms) in practice, this allows
// about `terms / 16` so that only wrong arithmetic (not summation order) fails.
double dotTolerance(double magnitude, int64_t terms) {
  return 1e-6 * (1.0 + static_cast<double>(terms) / 16.0) * magnitude + 1e-30;
}

// ---- GEMMs --------------------------------------------------------------------------------------

TEST(CpuKernelConformance, LinearMatchesReference) {
  std::mt19937 random(101);
  const std::vector<int> rowChoices{1, 2, 7, 33, 130};
  for (int trial = 0; trial < 24; ++trial) {
    const int rows = rowChoices[trial % rowChoices.size()];
    const int inputs = randomInt(random, 1, 97);
    const int weightRows = randomInt(random, 1, 61);
    // Fewer outputs than weight rows: the LM head skipping padded embedding rows.
    const int outputs = trial % 3 == 0 ? randomInt(random, 1, weightRows) : weightRows;
    const bool withBias = trial % 2 == 1;
    SCOPED_TRACE(::testing::Message() << "rows " << rows << " inputs " << inputs << " outputs "
                                      << outputs << " of " << weightRows << " bias " << withBias);
    const std::vector<float> x = randomFloats(random, static_cast<size_t>(rows * inputs), -2, 2);
    const std::vector<float> w =
        randomFloats(random, static_cast<size_t>(weightRows * inputs), -1, 1);
    const std::vector<float> bias = randomFloats(random, static_cast<size_t>(weightRows), -1, 1);
    std::vector<float> y(static_cast<size_t>(rows * outputs), -777.f);
    const model::HostTensor tensor{w.data(), weightRows, inputs};
    const Status status =
        linear(x.data(), rows, tensor, outputs, withBias ? bias.data() : nullptr, y.data(), 2);
    ASSERT_TRUE(status.isOk()) << status.message();

    const std::vector<double> want = reference::linear(x.data(), rows, inputs, w.data(), inputs,
                                                       outputs, withBias ? bias.data() : nullptr);
    const std::vector<float> absX = absolute(x), absW = absolute(w), absBias = absolute(bias);
    const std::vector<double> magnitude =
        reference::linear(absX.data(), rows, inputs, absW.data(), inputs, outputs,
                          withBias ? absBias.data() : nullptr);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_TRUE(near(y[i], want[i], dotTolerance(magnitude[i], inputs), 0,
                       "y[" + std::to_string(i) + "]"));
  }
}

TEST(CpuKernelConformance, MatmulMatchesReference) {
  std::mt19937 random(202);
  for (int trial = 0; trial < 24; ++trial) {
    const bool transposeB = trial % 2 == 0;
    const int m = randomInt(random, 1, 70), n = randomInt(random, 1, 70),
              k = randomInt(random, 1, 90);
    // Padded leading dimensions, as attention reads one head out of a [tokens, heads * d] row.
    const int lda = k + randomInt(random, 0, 5);
    const int ldb = (transposeB ? k : n) + randomInt(random, 0, 5);
    const int ldc = n + randomInt(random, 0, 5);
    const float alpha = trial % 3 == 0 ? 1.f : 0.125f;
    SCOPED_TRACE(::testing::Message() << "m " << m << " n " << n << " k " << k << " transposeB "
                                      << transposeB << " alpha " << alpha);
    const std::vector<float> a = randomFloats(random, static_cast<size_t>(m * lda), -2, 2);
    const std::vector<float> b =
        randomFloats(random, static_cast<size_t>((transposeB ? n : k) * ldb), -2, 2);
    const float sentinel = -777.f;
    std::vector<float> c(static_cast<size_t>(m * ldc), sentinel);
    const Status status =
        matmul(transposeB, m, n, k, alpha, a.data(), lda, b.data(), ldb, c.data(), ldc, 1);
    ASSERT_TRUE(status.isOk()) << status.message();

    const std::vector<double> want =
        reference::matmul(transposeB, m, n, k, alpha, a.data(), lda, b.data(), ldb);
    const std::vector<float> absA = absolute(a), absB = absolute(b);
    const std::vector<double> magnitude =
        reference::matmul(transposeB, m, n, k, alpha, absA.data(), lda, absB.data(), ldb);
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j)
        ASSERT_TRUE(near(c[i * ldc + j], want[i * n + j], dotTolerance(magnitude[i * n + j], k), 0,
                         "C[" + std::to_string(i) + ", " + std::to_string(j) + "]"));
      for (int j = n; j < ldc; ++j)
        ASSERT_EQ(c[i * ldc + j], sentinel) << "wrote into C's padding at row " << i;
    }
  }
}

// ---- Norms, RoPE, elementwise ------------------------------------------------------------------

TEST(CpuKernelConformance, RmsNormMatchesReference) {
  std::mt19937 random(303);
  const std::vector<int> widths{1, 3, 6, 37, 64, 100, 257, 2816};
  for (int width : widths) {
    for (int trial = 0; trial < 3; ++trial) {
      const int rows = randomInt(random, 1, 9);
      const int stride = width + (trial == 1 ? 0 : randomInt(random, 1, 9));
      const bool inPlace = trial == 2;
      const double eps = trial % 2 ? 1e-6 : 1e-5;
      SCOPED_TRACE(::testing::Message() << "width " << width << " rows " << rows << " stride "
                                        << stride << " in place " << inPlace);
      const std::vector<float> x = randomFloats(random, static_cast<size_t>(rows * stride), -2, 2);
      const std::vector<float> weight = randomFloats(random, static_cast<size_t>(width), 0.5, 1.5);
      std::vector<float> y = inPlace ? x : std::vector<float>(x.size(), -777.f);
      rmsNorm(inPlace ? y.data() : x.data(), rows, width, stride, weight.data(), eps, y.data());
      for (int r = 0; r < rows; ++r) {
        const std::vector<double> want =
            reference::rmsNormRow(x.data() + r * stride, width, weight.data(), eps);
        for (int i = 0; i < width; ++i)
          ASSERT_TRUE(near(y[r * stride + i], want[i], 1e-7, 1e-6,
                           "row " + std::to_string(r) + " element " + std::to_string(i)));
        for (int i = width; i < stride; ++i)
          ASSERT_EQ(y[r * stride + i], inPlace ? x[r * stride + i] : -777.f) << "padding changed";
      }
    }
  }
}

TEST(CpuKernelConformance, RopeMatchesReference) {
  std::mt19937 random(404);
  struct Shape {
    int headDim;
    double theta;
    int rotaryDim = 0; // 0: the whole head
  };
  const std::vector<Shape> shapes{{2, 10000.0},      {6, 10000.0},       {32, 500000.0},
                                  {64, 10000.0},     {128, 1000000.0},   {16, 600000.0, 8},
                                  {64, 10000.0, 32}, {128, 10000.0, 64}, {6, 10000.0, 2}};
  RopeTable table; // shared across shapes: each build must notice a changed head size or theta
  for (const Shape &shape : shapes) {
    for (int trial = 0; trial < 3; ++trial) {
      const int rows = randomInt(random, 1, 7);
      const int heads = randomInt(random, 1, 5);
      const int stride = heads * shape.headDim + (trial == 0 ? 0 : 8);
      const int firstPosition =
          trial == 2 ? randomInt(random, 20000, 40000) : randomInt(random, 0, 64);
      SCOPED_TRACE(::testing::Message()
                   << "head_dim " << shape.headDim << " rotary_dim " << shape.rotaryDim << " heads "
                   << heads << " rows " << rows << " first position " << firstPosition);
      const int rotaryDim = shape.rotaryDim ? shape.rotaryDim : shape.headDim;
      table.build(firstPosition + rows, rotaryDim, shape.theta);
      const std::vector<float> before =
          randomFloats(random, static_cast<size_t>(rows * stride), -3, 3);
      std::vector<float> x = before;
      applyRope(x.data(), rows, stride, heads, shape.headDim, table, firstPosition);
      reference::RopeSpec spec;
      spec.headDim = shape.headDim;
      spec.rotaryDim = rotaryDim;
      spec.theta = shape.theta;
      for (int r = 0; r < rows; ++r) {
        for (int h = 0; h < heads; ++h) {
          const int base = r * stride + h * shape.headDim;
          const std::vector<double> want =
              reference::ropeHead(before.data() + base, spec, firstPosition + r);
          for (int d = 0; d < shape.headDim; ++d)
            ASSERT_TRUE(near(x[base + d], want[d], 3e-6, 1e-6,
                             "row " + std::to_string(r) + " head " + std::to_string(h) + " dim " +
                                 std::to_string(d)));
        }
        for (int i = heads * shape.headDim; i < stride; ++i)
          ASSERT_EQ(x[r * stride + i], before[r * stride + i]) << "padding changed";
      }
    }
  }
}

// The distance in float ulps between `got` and the float nearest to `want`.
double ulpDistance(float got, double want) {
  const float rounded = static_cast<float>(want);
  const float ulp = std::nextafter(std::fabs(rounded), std::numeric_limits<float>::infinity()) -
                    std::fabs(rounded);
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

TEST(CpuKernelConformance, ExpIsWithinTwoUlpAndClamps) {
  std::mt19937 random(505);
  std::vector<float> x = randomFloats(random, 4097, -87.f, 88.f);
  const std::vector<float> edges{-87.f, -10.f, -1e-3f, 0.f, 1e-3f, 0.5f, 1.f, 10.f, 88.f};
  x.insert(x.end(), edges.begin(), edges.end());
  std::vector<float> y = x;
  expInPlace(y.data(), static_cast<int64_t>(y.size()));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double distance = ulpDistance(y[i], std::exp(static_cast<double>(x[i])));
    worst = std::max(worst, distance);
    ASSERT_LE(distance, 2.0) << "exp(" << x[i] << ") = " << y[i];
  }
  RecordProperty("worst_ulp", std::to_string(worst));
  // Outside [-87.3, 88] the argument is clamped (to the floats nearest those bounds): no inf, no
  // denormal, no NaN.
  std::vector<float> outside{-1000.f, -88.f, 89.f, 1000.f};
  expInPlace(outside.data(), 4);
  const double low = std::exp(static_cast<double>(-87.3f)), high = std::exp(88.0);
  EXPECT_LE(ulpDistance(outside[0], low), 2.0) << outside[0];
  EXPECT_LE(ulpDistance(outside[1], low), 2.0) << outside[1];
  EXPECT_LE(ulpDistance(outside[2], high), 2.0) << outside[2];
  EXPECT_LE(ulpDistance(outside[3], high), 2.0) << outside[3];
}

// Found by fuzz/artifact: a damaged weight made an attention score NaN, and exp converted NaN to
// an integer (undefined; UBSan stops there). NaN stays NaN, its neighbours are untouched.
TEST(CpuKernelConformance, ExpKeepsNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x{0.f, nan, 1.f, -nan, 2.f, nan, nan, nan, nan, 3.f};
  expInPlace(x.data(), static_cast<int64_t>(x.size()));
  for (size_t i : {1, 3, 5, 6, 7, 8})
    EXPECT_TRUE(std::isnan(x[i])) << i;
  EXPECT_EQ(x[0], 1.f);
  EXPECT_LE(ulpDistance(x[9], std::exp(3.0)), 2.0);
  std::vector<float> gate{nan, 1.f}, up{1.f, 1.f};
  siluMultiply(gate.data(), up.data(), 2);
  EXPECT_TRUE(std::isnan(gate[0]));
  EXPECT_FALSE(std::isnan(gate[1]));
}

TEST(CpuKernelConformance, SiluMultiplyMatchesGatedActivationReference) {
  std::mt19937 random(606);
  for (int count : {1, 3, 17, 77, 200, 1031}) {
    std::vector<float> gate = randomFloats(random, static_cast<size_t>(count), -30, 30);
    const std::vector<float> up = randomFloats(random, static_cast<size_t>(count), -3, 3);
    if (count > 4) { // saturated gates: exp(-gate) clamps at both ends
      gate[0] = -100.f;
      gate[1] = 100.f;
    }
    const std::vector<float> before = gate;
    siluMultiply(gate.data(), up.data(), count);
    for (int i = 0; i < count; ++i)
      ASSERT_TRUE(near(gate[i],
                       reference::gatedActivation(reference::Activation::silu, before[i], up[i]),
                       1e-30, 1e-6,
                       "count " + std::to_string(count) + " element " + std::to_string(i) +
                           " gate " + std::to_string(before[i])));
  }
}

// The softcap's tanh is a polynomial (vectorised), not std::tanh: within a few ulps of
// cap * tanh(x / cap) in double over the logits' range and past it, on both sides of the
// polynomial's switch at |x / cap| = 0.625; saturated at both ends; NaN stays NaN.
TEST(CpuKernelConformance, SoftcapIsWithinFourUlpOfTanh) {
  std::mt19937 random(808);
  const float cap = 30.0f;
  std::vector<float> x = randomFloats(random, 4097, -200.f, 200.f);
  const std::vector<float> edges{-1e4f, -18.75f, -18.7f, -1e-6f, 0.f, 1e-6f,
                                 0.01f, 18.7f,   18.75f, 18.8f,  1e4f};
  x.insert(x.end(), edges.begin(), edges.end());
  std::vector<float> y = x;
  softcapInPlace(y.data(), cap, static_cast<int64_t>(y.size()));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = cap * std::tanh(static_cast<double>(x[i] / cap));
    const double distance = want == 0 ? std::fabs(y[i]) : ulpDistance(y[i], want);
    worst = std::max(worst, distance);
    ASSERT_LE(distance, 4.0) << "softcap(" << x[i] << ") = " << y[i] << ", want " << want;
  }
  RecordProperty("worst_ulp", std::to_string(worst));
  std::vector<float> nan{std::numeric_limits<float>::quiet_NaN()};
  softcapInPlace(nan.data(), cap, 1);
  EXPECT_TRUE(std::isnan(nan[0]));
}

// In float, 1 + tanh(..) cancels for gates below about -5 (as in PyTorch's float GELU): an
// absolute tolerance there.
TEST(CpuKernelConformance, GeluTanhMultiplyMatchesGatedActivationReference) {
  std::mt19937 random(909);
  for (int count : {1, 3, 17, 77, 200, 1031}) {
    std::vector<float> gate = randomFloats(random, static_cast<size_t>(count), -12, 12);
    const std::vector<float> up = randomFloats(random, static_cast<size_t>(count), -3, 3);
    const std::vector<float> before = gate;
    geluTanhMultiply(gate.data(), up.data(), count);
    for (int i = 0; i < count; ++i)
      ASSERT_TRUE(near(
          gate[i], reference::gatedActivation(reference::Activation::geluTanh, before[i], up[i]),
          1e-6, 1e-6,
          "count " + std::to_string(count) + " element " + std::to_string(i) + " gate " +
              std::to_string(before[i])));
  }
}

TEST(CpuKernelConformance, AddInPlaceIsTheRoundedSum) {
  std::mt19937 random(707);
  for (int count : {1, 5, 33, 1000}) {
    std::vector<float> h = randomFloats(random, static_cast<size_t>(count), -5, 5);
    const std::vector<float> delta = randomFloats(random, static_cast<size_t>(count), -5, 5);
    const std::vector<float> before = h;
    addInPlace(h.data(), delta.data(), count);
    for (int i = 0; i < count; ++i) // the double sum of two floats, rounded once, is exact
      ASSERT_EQ(h[i], static_cast<float>(static_cast<double>(before[i]) + delta[i])) << i;
  }
}

// ---- Attention over the paged KV cache ---------------------------------------------------------

struct AttentionCase {
  int headDim, heads, kvHeads, pageTokens;
};

void checkPagedAttention(const AttentionCase &shape, std::mt19937 &random, int trial,
                         ThreadPool &pool) {
  const int kvWidth = shape.kvHeads * shape.headDim;
  const int qWidth = shape.heads * shape.headDim;
  // Trial 0: a single key; trial 1: more queries than one attention chunk; others ragged.
  const int keyCount = trial == 0 ? 1 : randomInt(random, trial == 1 ? 140 : 2, 300);
  const int queries = trial == 1
                          ? randomInt(random, static_cast<int>(kAttentionQueryChunk) + 1, keyCount)
                          : randomInt(random, 1, std::min(keyCount, 40));
  // Usually the newest positions (a forward appending its rows); sometimes earlier ones.
  const int firstPosition =
      randomInt(random, 0, 2) ? keyCount - queries : randomInt(random, 0, keyCount - queries);
  const bool causal = randomInt(random, 0, 1) == 1;
  SCOPED_TRACE(::testing::Message()
               << "head_dim " << shape.headDim << " heads " << shape.heads << "/" << shape.kvHeads
               << " page " << shape.pageTokens << " keys " << keyCount << " queries " << queries
               << " from " << firstPosition << " causal " << causal << " threads "
               << pool.threads());

  // Pages handed out in shuffled order, with spares, every slot NaN until written: a kernel that
  // reads a slot it was not given, another layer or past the last key produces NaN.
  const int pagesNeeded = (keyCount + shape.pageTokens - 1) / shape.pageTokens;
  const int pageCount = pagesNeeded + 3;
  const int64_t layers = 2, layer = 1;
  HostKvPages pages(pageCount, shape.pageTokens, layers, kvWidth);
  for (int p = 0; p < pageCount; ++p)
    for (int64_t l = 0; l < layers; ++l) {
      std::fill_n(pages.keys(p, l), shape.pageTokens * kvWidth, NAN);
      std::fill_n(pages.values(p, l), shape.pageTokens * kvWidth, NAN);
    }
  std::vector<kv::PageIndex> order(static_cast<size_t>(pageCount));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), random);
  const std::vector<kv::PageIndex> blockTable(order.begin(), order.begin() + pagesNeeded);

  // Logical keys and values, [key][kvHead][dim], stored in chunks as forwards store them.
  const std::vector<float> keys =
      randomFloats(random, static_cast<size_t>(keyCount * kvWidth), -1, 1);
  const std::vector<float> values =
      randomFloats(random, static_cast<size_t>(keyCount * kvWidth), -1, 1);
  for (int first = 0; first < keyCount;) {
    const int count = std::min(keyCount - first, randomInt(random, 1, 2 * shape.pageTokens + 3));
    storeKv(pages, blockTable.data(), layer, first, count, keys.data() + first * kvWidth,
            values.data() + first * kvWidth);
    first += count;
  }

  const std::vector<float> q = randomFloats(random, static_cast<size_t>(queries * qWidth), -3, 3);
  std::vector<float> out(q.size(), -777.f);
  AttentionScratch scratch;
  scratch.reserve(keyCount, kvWidth, pool.threads());
  const AttentionShape attention{shape.heads, shape.kvHeads, shape.headDim, causal};
  const Status status = pagedAttention(q.data(), queries, firstPosition, keyCount, attention, pages,
                                       blockTable.data(), layer, out.data(), scratch, pool);
  ASSERT_TRUE(status.isOk()) << status.message();

  reference::AttentionMask mask;
  mask.kind = causal ? reference::MaskKind::causal : reference::MaskKind::bidirectional;
  const double scale = 1.0 / std::sqrt(static_cast<double>(shape.headDim));
  const int group = shape.heads / shape.kvHeads;
  for (int i = 0; i < queries; ++i)
    for (int h = 0; h < shape.heads; ++h) {
      const std::vector<double> want = reference::attentionHead(
          q.data() + i * qWidth + h * shape.headDim, keys.data(), values.data(), keyCount,
          shape.kvHeads, h / group, shape.headDim, scale, mask, firstPosition + i);
      for (int d = 0; d < shape.headDim; ++d)
        ASSERT_TRUE(near(out[i * qWidth + h * shape.headDim + d], want[d], 2e-5, 1e-4,
                         "query " + std::to_string(i) + " (position " +
                             std::to_string(firstPosition + i) + ") head " + std::to_string(h) +
                             " dim " + std::to_string(d)));
    }
}

TEST(CpuKernelConformance, PagedAttentionMatchesReference) {
  const std::vector<AttentionCase> cases{
      {6, 4, 2, 4},    // the tiny models' head size, GQA
      {16, 4, 4, 1},   // MHA, one token per page
      {64, 8, 1, 16},  // MQA
      {64, 4, 2, 3},   // pages that never align with anything
      {128, 2, 1, 32}, // a long head, large pages
      {2, 3, 3, 5},    // the smallest head, odd head count
  };
  std::mt19937 random(808);
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (const AttentionCase &shape : cases)
      for (int trial = 0; trial < 5; ++trial) {
        checkPagedAttention(shape, random, trial, pool);
        if (HasFatalFailure())
          return;
      }
  }
}

// The mask kinds dlm.masked_attention defines that the CPU backend lacks are refused by name when
// a model asks for them, rather than run under the wrong mask.
TEST(CpuKernelConformance, UnsupportedMaskKindsAreNamed) {
  dlm::testing::TinyModel tiny({});
  const std::vector<std::pair<artifact::AttentionMaskKind, std::string>> unsupported{
      {artifact::AttentionMaskKind::sliding_window, "sliding_window"},
      {artifact::AttentionMaskKind::symmetric_sliding_window, "symmetric_sliding_window"},
  };
  for (const auto &[kind, name] : unsupported) {
    artifact::ModelConfig config = tiny.config();
    config.attentionMask = kind;
    StatusOr<model::ModelDims> dims = model::modelDims(config);
    ASSERT_FALSE(dims.isOk()) << name;
    EXPECT_EQ(dims.status().message(), "not supported yet: attention mask '" + name + "'");
  }
}

// ---- Sampling arithmetic of the CPU decoder ----------------------------------------------------

// Logits rows with a spread of sharpness; some rows integer-valued (exact ties everywhere), some
// with -inf entries.
std::vector<float> randomLogits(std::mt19937 &random, int vocab, int kind) {
  std::normal_distribution<float> normal(0.f, 1.f);
  const float sharpness = std::vector<float>{0.5f, 3.f, 12.f}[randomInt(random, 0, 2)];
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (int v = 0; v < vocab; ++v) {
    logits[v] =
        kind == 1 ? static_cast<float>(randomInt(random, 0, 3)) : normal(random) * sharpness;
    if (kind == 2 && v % 7 == 3)
      logits[v] = -std::numeric_limits<float>::infinity();
  }
  return logits;
}

// decodeRow (low-confidence) draws argmax(logits + T gumbel), the sampler reference
// argmax(logits / T + gumbel): the same token but for near-ties at double rounding. Its
// confidence is the token's probability at temperature 1, as LLaDA's sampler has it.
TEST(CpuKernelConformance, DecodeRowMatchesSamplerReference) {
  std::mt19937 random(909);
  int nearTies = 0, sampledRows = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int vocab = std::vector<int>{1, 2, 7, 40, 1000, 4099}[trial % 6];
    const int kind = trial % 3;
    const std::vector<float> logits = randomLogits(random, vocab, kind);
    const double temperature =
        std::vector<double>{0.0, 0.4, 0.8, 1.0, 1.7}[randomInt(random, 0, 4)];
    const int64_t excluded =
        vocab > 1 && randomInt(random, 0, 1) ? randomInt(random, 0, vocab - 1) : -1;
    const uint64_t key =
        reference::counterKey(random(), randomInt(random, 0, 9), reference::kGumbelStream,
                              randomInt(random, 0, 99), randomInt(random, 0, 5000));
    if (vocab == 1 && excluded == 0)
      continue;
    SCOPED_TRACE(::testing::Message() << "vocab " << vocab << " T " << temperature << " excluded "
                                      << excluded << " logits kind " << kind);
    const sampling::RowDecision got =
        sampling::decodeRow(logits.data(), vocab, temperature, key, excluded);
    const reference::SamplerRow want =
        reference::samplerRow(logits.data(), vocab, temperature, 0, key, excluded);
    if (temperature == 0) {
      ASSERT_EQ(got.token, want.argmax) << "greedy: ties go to the lower id";
    } else {
      ++sampledRows;
      if (got.token != want.sample) {
        // Only a near-tie of the noisy scores may break differently.
        const double gotScore =
            want.z[got.token] + reference::gumbel(key, static_cast<uint64_t>(got.token));
        ASSERT_NEAR(gotScore, want.sampleScore, 1e-12 * std::max(1.0, std::fabs(gotScore)))
            << "sampled " << got.token << ", reference " << want.sample;
        ++nearTies;
      }
    }
    const reference::SamplerRow plain = reference::samplerRow(logits.data(), vocab, 0, 0, key, -1);
    ASSERT_TRUE(
        near(got.confidence, reference::probability(plain, got.token), 1e-15, 1e-12, "confidence"));
  }
  EXPECT_EQ(nearTies, 0) << "of " << sampledRows << " sampled rows";
}

// temperedRow (entropy-bound) is the sampler at temperature T: same sample, argmax and entropy.
TEST(CpuKernelConformance, TemperedRowMatchesSamplerReference) {
  std::mt19937 random(1010);
  for (int trial = 0; trial < 300; ++trial) {
    const int vocab = std::vector<int>{2, 7, 40, 1000, 4099}[trial % 5];
    const int kind = trial % 3;
    const std::vector<float> logits = randomLogits(random, vocab, kind);
    const double temperature =
        std::vector<double>{0.1, 0.4, 0.8, 1.0, 1.7}[randomInt(random, 0, 4)];
    const int64_t excluded = randomInt(random, 0, 1) ? randomInt(random, 0, vocab - 1) : -1;
    const uint64_t key =
        reference::counterKey(random(), 3, reference::kGumbelStream, randomInt(random, 0, 99),
                              randomInt(random, 0, 5000));
    SCOPED_TRACE(::testing::Message() << "vocab " << vocab << " T " << temperature << " excluded "
                                      << excluded << " logits kind " << kind);
    const sampling::TemperedRow got =
        sampling::temperedRow(logits.data(), vocab, temperature, key, excluded);
    const reference::SamplerRow want =
        reference::samplerRow(logits.data(), vocab, temperature, 0, key, excluded);
    ASSERT_EQ(got.sample, want.sample);
    ASSERT_EQ(got.argmax, want.argmax) << "ties go to the lower id";
    ASSERT_TRUE(near(got.entropy, want.entropy, 1e-13, 1e-12, "entropy"));
  }
}

// Entropies and confidences drawn from a few dyadic values: exact sums, many ties, budgets that
// land exactly on a partial sum.
std::vector<double> walkValues(std::mt19937 &random, int count, bool dyadic, double scale) {
  std::vector<double> values(static_cast<size_t>(count));
  for (double &value : values)
    value = dyadic ? randomInt(random, 0, 8) * scale / 8
                   : std::uniform_real_distribution<double>(0, scale)(random);
  return values;
}

TEST(CpuKernelConformance, EntropyAcceptMatchesReference) {
  std::mt19937 random(1111);
  for (int trial = 0; trial < 400; ++trial) {
    const int canvas = randomInt(random, 1, 70);
    const bool dyadic = trial % 2 == 0;
    const std::vector<double> entropy = walkValues(random, canvas, dyadic, 3.0);
    reference::AcceptKnobs knobs;
    if (dyadic) { // a partial sum of the sorted entropies: the edge of the budget
      std::vector<double> sorted = entropy;
      std::sort(sorted.begin(), sorted.end());
      knobs.entropyBound =
          std::accumulate(sorted.begin(), sorted.begin() + randomInt(random, 0, canvas - 1), 0.0);
    } else {
      knobs.entropyBound = std::uniform_real_distribution<double>(0, 6)(random);
    }
    std::vector<int64_t> order;
    std::vector<uint8_t> accepted;
    sampling::entropyAccept(entropy, knobs.entropyBound, order, accepted);
    const std::vector<uint8_t> want =
        reference::acceptCanvas(reference::AcceptRule::entropyBound, entropy, {}, {}, knobs);
    ASSERT_EQ(accepted, want) << "canvas " << canvas << " bound " << knobs.entropyBound;
  }
}

// The low-confidence policy unmasks a prefix of confidenceOrder: the first k (fixed count, the
// top-k rule) or, with a threshold, every candidate at or above it and at least one.
TEST(CpuKernelConformance, ConfidenceOrderSelectionsMatchReference) {
  std::mt19937 random(1212);
  for (int trial = 0; trial < 400; ++trial) {
    const int count = randomInt(random, 1, 64);
    const std::vector<double> confidence = walkValues(random, count, trial % 2 == 0, 1.0);
    // The candidates' canvas positions: increasing, not contiguous (unmasked ones skipped).
    std::vector<int64_t> positions(static_cast<size_t>(count));
    int64_t next = randomInt(random, 0, 500);
    for (int64_t &position : positions)
      position = next += randomInt(random, 1, 3);
    std::vector<int64_t> order;
    sampling::confidenceOrder(confidence, positions, order);

    reference::AcceptKnobs knobs;
    knobs.topK = randomInt(random, 0, count + 2);
    knobs.threshold = trial % 2 == 0 ? 0.5 : std::uniform_real_distribution<double>(0, 1)(random);
    std::vector<uint8_t> topK(static_cast<size_t>(count), 0);
    for (int64_t s = 0; s < std::min<int64_t>(knobs.topK, count); ++s)
      topK[static_cast<size_t>(order[s])] = 1;
    ASSERT_EQ(topK, reference::acceptCanvas(reference::AcceptRule::topK, {}, confidence, {}, knobs))
        << "top " << knobs.topK << " of " << count;

    const int64_t above = std::count_if(confidence.begin(), confidence.end(),
                                        [&](double c) { return c >= knobs.threshold; });
    std::vector<uint8_t> threshold(static_cast<size_t>(count), 0);
    for (int64_t s = 0; s < std::max<int64_t>(above, 1); ++s)
      threshold[static_cast<size_t>(order[s])] = 1;
    ASSERT_EQ(threshold, reference::acceptCanvas(reference::AcceptRule::confidenceThreshold, {},
                                                 confidence, {}, knobs))
        << "threshold " << knobs.threshold;
  }
}

// The noise the CPU decoder draws (Gumbel, renoise and initial-canvas tokens) is the reference
// counter RNG's, bit for bit.
TEST(CpuKernelConformance, CounterRngDrawsMatchReference) {
  std::mt19937_64 random(1313);
  for (int trial = 0; trial < 2000; ++trial) {
    const uint64_t seed = random(), request = random() % 1000, step = random() % 500,
                   position = random() % 100000;
    const int64_t vocab = 1 + static_cast<int64_t>(random() % 200000);
    for (uint64_t stream :
         {reference::kGumbelStream, reference::kRenoiseStream, reference::kInitialCanvasStream}) {
      const uint64_t key = sampling::rng::key(seed, request, stream, step, position);
      ASSERT_EQ(key, reference::counterKey(seed, request, stream, step, position));
      ASSERT_EQ(sampling::rng::randomToken(key, vocab), reference::uniformToken(key, vocab));
    }
    const uint64_t gumbelKey = reference::counterKey(seed, request, 0, step, position);
    const uint64_t v = random() % 200000;
    ASSERT_EQ(sampling::rng::gumbel(gumbelKey, v), reference::gumbel(gumbelKey, v));
    const uint64_t renoiseKey =
        sampling::rng::key(seed, request, sampling::rng::kStreamRenoise, step, position);
    ASSERT_EQ(sampling::rng::randomToken(renoiseKey, vocab),
              reference::noiseToken(reference::NoiseKind::uniform, false, -1, vocab, seed, request,
                                    step, position));
    const uint64_t initKey =
        sampling::rng::key(seed, request, sampling::rng::kStreamInit, step, position);
    ASSERT_EQ(sampling::rng::randomToken(initKey, vocab),
              reference::noiseToken(reference::NoiseKind::uniform, true, -1, vocab, seed, request,
                                    step, position));
  }
}

} // namespace
} // namespace dlm::cpu
