// The references themselves on hand-computed cases and on the known answers of the Python
// references (tests/reference/counter_rng.py), so that a wrong reference cannot make both
// backends agree with it.
#include "tests/runtime/conformance/KernelReferences.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace dlm::reference {
namespace {

TEST(KernelReferences, CounterRngMatchesThePythonKnownAnswers) {
  EXPECT_EQ(mix64(0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(counterKey(0, 0, 0, 0, 0), 0x78AE5A9A6B5FD45Eull);
  EXPECT_EQ(counterKey(1, 2, 0, 3, 4), 0x319095646F29ED17ull);
  EXPECT_EQ(counterKey(42, 7, 1, 5, 100), 0x2BD2928089FE1D5Full);
  const uint64_t key = counterKey(0, 0, kGumbelStream, 0, 0);
  EXPECT_NEAR(gumbel(key, 0), 1.4788031479962698, 1e-14);
  EXPECT_NEAR(gumbel(key, 1), -0.7871480386637149, 1e-14);
  EXPECT_NEAR(gumbel(counterKey(42, 7, kGumbelStream, 5, 100), 2), 0.33663595416057923, 1e-14);
  EXPECT_EQ(uniformToken(counterKey(0, 0, kRenoiseStream, 0, 0), 512), 154);
  EXPECT_EQ(uniformToken(counterKey(0, 0, kInitialCanvasStream, 0, 5), 512), 294);
  EXPECT_EQ(uniformToken(counterKey(9, 1, kRenoiseStream, 2, 3), 151936), 117982);
}

TEST(KernelReferences, DenseMath) {
  // y = x W^T + b with W [3, 2] in rows 3 apart (a padded weight).
  const float x[] = {1, 2};
  const float w[] = {1, 0, 9, 0, 1, 9, 1, 1, 9};
  const float bias[] = {0, 0, 1};
  EXPECT_EQ(linear(x, 1, 2, w, 3, 3, bias), (std::vector<double>{1, 2, 4}));
  EXPECT_EQ(linear(x, 1, 2, w, 3, 2, nullptr), (std::vector<double>{1, 2}));
  // [1 2] [3 4; 5 6] and, transposed, [1 2] [3 5; 4 6]^T, times 0.5.
  const float b[] = {3, 4, 5, 6};
  EXPECT_EQ(matmul(false, 1, 2, 2, 0.5, x, 2, b, 2), (std::vector<double>{6.5, 8}));
  EXPECT_EQ(matmul(true, 1, 2, 2, 0.5, x, 2, b, 2), (std::vector<double>{5.5, 8.5}));

  const float row[] = {3, 4};
  const float weight[] = {1, 2};
  const double scale = 1 / std::sqrt(12.5 + 1e-6);
  std::vector<double> normed = rmsNormRow(row, 2, nullptr, 1e-6);
  EXPECT_DOUBLE_EQ(normed[0], 3 * scale);
  EXPECT_DOUBLE_EQ(normed[1], 4 * scale);
  normed = rmsNormRow(row, 2, weight, 1e-6);
  EXPECT_DOUBLE_EQ(normed[1], 8 * scale);

  EXPECT_EQ(activate(Activation::silu, 0), 0);
  EXPECT_DOUBLE_EQ(activate(Activation::silu, 1), 1 / (1 + std::exp(-1.0)));
  EXPECT_EQ(activate(Activation::geluTanh, 0), 0);
  EXPECT_NEAR(activate(Activation::geluTanh, 1), 0.8411919906082768, 1e-15); // torch, tanh
  EXPECT_NEAR(activate(Activation::geluTanh, -10), 0, 1e-20);
  EXPECT_DOUBLE_EQ(gatedActivation(Activation::silu, 2, 3), 3 * 2 / (1 + std::exp(-2.0)));
}

TEST(KernelReferences, RopeRotatesNeoxPairs) {
  const float head[] = {1, 2, 3, 4};
  RopeSpec spec;
  spec.headDim = 4;
  spec.theta = 100;
  // Position 0 is the identity.
  EXPECT_EQ(ropeHead(head, spec, 0), (std::vector<double>{1, 2, 3, 4}));
  // Pairs (0, 2) and (1, 3); pair j turns by position * 100^(-2j/4): 3 and 0.3 rad.
  std::vector<double> y = ropeHead(head, spec, 3);
  EXPECT_DOUBLE_EQ(y[0], 1 * std::cos(3.0) - 3 * std::sin(3.0));
  EXPECT_DOUBLE_EQ(y[2], 3 * std::cos(3.0) + 1 * std::sin(3.0));
  EXPECT_NEAR(y[1], 2 * std::cos(0.3) - 4 * std::sin(0.3), 1e-15);
  EXPECT_NEAR(y[3], 4 * std::cos(0.3) + 2 * std::sin(0.3), 1e-15);
  // Partial rotary: only the first two dims rotate, as pair (0, 1); "proportional": of the
  // rotary pairs only the first turns.
  spec.rotaryDim = 2;
  y = ropeHead(head, spec, 3);
  EXPECT_DOUBLE_EQ(y[0], 1 * std::cos(3.0) - 2 * std::sin(3.0));
  EXPECT_DOUBLE_EQ(y[1], 2 * std::cos(3.0) + 1 * std::sin(3.0));
  EXPECT_EQ(y[2], 3);
  EXPECT_EQ(y[3], 4);
  spec.rotaryDim = 0;
  spec.frequencyPairs = 1;
  y = ropeHead(head, spec, 3);
  EXPECT_EQ(y[1], 2);
  EXPECT_EQ(y[3], 4);
}

TEST(KernelReferences, MaskKinds) {
  AttentionMask mask;
  mask.window = 2;
  mask.blockSize = 4;
  auto visible = [&](MaskKind kind, bool causalRequest, int64_t query, int64_t key) {
    mask.kind = kind;
    mask.causalRequest = causalRequest;
    return keyVisible(mask, query, key);
  };
  EXPECT_TRUE(visible(MaskKind::causal, false, 5, 5));
  EXPECT_FALSE(visible(MaskKind::causal, false, 5, 6));
  EXPECT_TRUE(visible(MaskKind::bidirectional, false, 0, 9));
  EXPECT_TRUE(visible(MaskKind::blockCausal, false, 5, 7)); // same block [4, 8)
  EXPECT_FALSE(visible(MaskKind::blockCausal, false, 5, 8));
  EXPECT_TRUE(visible(MaskKind::slidingWindow, false, 5, 4));
  EXPECT_FALSE(visible(MaskKind::slidingWindow, false, 5, 3)); // 5 - 3 = window
  EXPECT_FALSE(visible(MaskKind::slidingWindow, false, 5, 6));
  EXPECT_TRUE(visible(MaskKind::slidingWindowSymmetric, false, 5, 6));
  EXPECT_FALSE(visible(MaskKind::slidingWindowSymmetric, false, 5, 7));
  // A causal request stays causal, and windowed under the sliding kinds.
  EXPECT_FALSE(visible(MaskKind::bidirectional, true, 0, 9));
  EXPECT_FALSE(visible(MaskKind::blockCausal, true, 5, 6));
  EXPECT_FALSE(visible(MaskKind::slidingWindowSymmetric, true, 5, 6));
  EXPECT_FALSE(visible(MaskKind::slidingWindowSymmetric, true, 5, 3));
}

TEST(KernelReferences, AttentionWeighsVisibleValues) {
  // Two keys of one KV head, head dim 1: q . k = 0 and ln 3, so weights 1/4 and 3/4.
  const float query[] = {1};
  const float keys[] = {0, static_cast<float>(std::log(3.0))};
  const float values[] = {4, 8};
  AttentionMask mask;
  mask.kind = MaskKind::bidirectional;
  std::vector<double> out = attentionHead(query, keys, values, 2, 1, 0, 1, 1.0, mask, 0);
  EXPECT_NEAR(out[0], 0.25 * 4 + 0.75 * 8, 1e-6); // the key is a float: ln 3 rounded
  mask.kind = MaskKind::causal;
  EXPECT_EQ(attentionHead(query, keys, values, 2, 1, 0, 1, 1.0, mask, 0)[0], 4);
  // No visible key: zeros, not 0 / 0.
  mask.kind = MaskKind::slidingWindow;
  mask.window = 1;
  EXPECT_EQ(attentionHead(query, keys, values, 2, 1, 0, 1, 1.0, mask, 9)[0], 0);
}

TEST(KernelReferences, SamplerStatistics) {
  const float flat[] = {1, 1, 1, 1};
  SamplerRow row = samplerRow(flat, 4, 0, 0, 0, -1);
  EXPECT_NEAR(row.entropy, std::log(4.0), 1e-15);
  EXPECT_EQ(row.argmax, 0); // ties to the lower id
  EXPECT_EQ(row.sample, 0); // greedy samples the argmax
  EXPECT_DOUBLE_EQ(row.sampleProbability, 0.25);
  row = samplerRow(flat, 4, 0, 0, 0, /*excluded=*/0);
  EXPECT_EQ(row.argmax, 1);
  EXPECT_NEAR(row.entropy, std::log(4.0), 1e-15); // the excluded token stays in the softmax

  // Temperature divides, softcap squashes first; -inf contributes nothing to the entropy.
  const float logits[] = {2, 0, -std::numeric_limits<float>::infinity()};
  row = samplerRow(logits, 3, 0.5, 0, 0, -1);
  EXPECT_DOUBLE_EQ(row.z[0], 4);
  const double p = 1 / (1 + std::exp(-4.0));
  EXPECT_NEAR(row.entropy, -(p * std::log(p) + (1 - p) * std::log(1 - p)), 1e-15);
  row = samplerRow(logits, 3, 0, 1.0, 0, -1);
  EXPECT_DOUBLE_EQ(row.z[0], std::tanh(2.0));

  // The sample is argmax(z + gumbel) with the counter RNG.
  const uint64_t key = counterKey(0, 0, kGumbelStream, 0, 0);
  const float even[] = {0, 0, 0, 0};
  row = samplerRow(even, 4, 1.0, 0, key, -1);
  int64_t best = 0;
  for (int64_t v = 1; v < 4; ++v)
    if (gumbel(key, v) > gumbel(key, best))
      best = v;
  EXPECT_EQ(row.sample, best);
  EXPECT_EQ(row.sample, 0); // gumbel(key, 0..3) = 1.48, -0.79, 0.18, 1.40 (Python)
}

TEST(KernelReferences, AcceptRules) {
  // Dyadic values: the sums are exact, so the budget's edge is exact too.
  const std::vector<double> entropy{0.5, 0.125, 0.25, 0.125};
  AcceptKnobs knobs;
  // Walk 1, 3, 2, 0; accepted while the entropy before is <= 0.25 (position 2 lands on it).
  knobs.entropyBound = 0.25;
  EXPECT_EQ(acceptCanvas(AcceptRule::entropyBound, entropy, {}, {}, knobs),
            (std::vector<uint8_t>{0, 1, 1, 1}));
  knobs.entropyBound = 0;
  EXPECT_EQ(acceptCanvas(AcceptRule::entropyBound, entropy, {}, {}, knobs),
            (std::vector<uint8_t>{0, 1, 0, 0})); // the lowest always
  EXPECT_EQ(acceptCanvas(AcceptRule::entropyBound, entropy, {}, {1, 0, 1, 0}, knobs),
            (std::vector<uint8_t>{0, 0, 1, 0})); // candidates only

  const std::vector<double> confidence{0.2, 0.9, 0.4, 0.9};
  knobs.threshold = 0.95;
  EXPECT_EQ(acceptCanvas(AcceptRule::confidenceThreshold, {}, confidence, {}, knobs),
            (std::vector<uint8_t>{0, 1, 0, 0})); // none above: the most confident, lower position
  knobs.threshold = 0.4;
  EXPECT_EQ(acceptCanvas(AcceptRule::confidenceThreshold, {}, confidence, {}, knobs),
            (std::vector<uint8_t>{0, 1, 1, 1}));
  knobs.topK = 3;
  EXPECT_EQ(acceptCanvas(AcceptRule::topK, {}, confidence, {}, knobs),
            (std::vector<uint8_t>{0, 1, 1, 1}));
  knobs.topK = 0;
  EXPECT_EQ(acceptCanvas(AcceptRule::topK, {}, confidence, {}, knobs),
            (std::vector<uint8_t>{0, 0, 0, 0}));
}

TEST(KernelReferences, ConvergenceAndRenoise) {
  const std::vector<double> entropy{0.125, 0.375};
  Convergence c = convergenceAfterStep({5, 6}, {5, 6}, 1, entropy, 2, 0.5);
  EXPECT_EQ(c.stableSteps, 2);
  EXPECT_TRUE(c.converged);
  c = convergenceAfterStep({5, 6}, {5, 6}, 1, entropy, 2, 0.25); // mean 0.25 is not below
  EXPECT_FALSE(c.converged);
  c = convergenceAfterStep({5, 7}, {5, 6}, 4, entropy, 0, 0.5);
  EXPECT_EQ(c.stableSteps, 0);
  EXPECT_TRUE(c.converged); // stability 0 needs no stable step

  const int64_t mask = 99;
  EXPECT_EQ(noiseToken(NoiseKind::maskToken, false, mask, 512, 0, 0, 0, 0), mask);
  EXPECT_EQ(noiseToken(NoiseKind::uniform, false, mask, 512, 0, 0, 0, 0), 154);
  EXPECT_EQ(noiseToken(NoiseKind::uniform, true, mask, 512, 0, 0, 0, 5), 294);
  EXPECT_EQ(renoisedToken(RenoiseCandidates::maskedOnly, false, true, 7, mask, mask, mask), 7);
  EXPECT_EQ(renoisedToken(RenoiseCandidates::maskedOnly, false, false, 7, mask, mask, mask), mask);
  EXPECT_EQ(renoisedToken(RenoiseCandidates::maskedOnly, false, false, 7, 3, mask, mask), 3);
  EXPECT_EQ(renoisedToken(RenoiseCandidates::everyPosition, false, false, 7, 3, mask, 11), 11);
  EXPECT_EQ(renoisedToken(RenoiseCandidates::everyPosition, false, false, 7, 3, mask, mask), mask);
  EXPECT_EQ(renoisedToken(RenoiseCandidates::everyPosition, true, true, 7, 3, mask, 11), 11);
}

} // namespace
} // namespace dlm::reference
