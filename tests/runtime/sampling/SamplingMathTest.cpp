#include "runtime/sampling/SamplingMath.h"
#include "runtime/sampling/CounterRng.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

namespace dlm::sampling {
namespace {

using ::testing::ElementsAre;

TEST(NumTransferTokensTest, SpreadsTheRemainderOverTheFirstSteps) {
  EXPECT_EQ(numTransferTokens(8, 3), (std::vector<int64_t>{3, 3, 2}));
  EXPECT_EQ(numTransferTokens(8, 4), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(numTransferTokens(7, 7), (std::vector<int64_t>(7, 1)));
  EXPECT_EQ(numTransferTokens(32, 5), (std::vector<int64_t>{7, 7, 6, 6, 6}));
}

TEST(NumTransferTokensTest, FewerTokensThanStepsLeavesTrailingZeros) {
  EXPECT_EQ(numTransferTokens(2, 4), (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_EQ(numTransferTokens(0, 2), (std::vector<int64_t>{0, 0}));
}

TEST(DecodeRowTest, GreedyTakesTheLowestIdAmongTies) {
  const float logits[] = {1, 3, 3, 0};
  RowDecision d = decodeRow(logits, 4, 0.0, 0, kNoExcludedToken);
  EXPECT_EQ(d.token, 1);
  const double expected = std::exp(3.0) / (std::exp(1.0) + 2 * std::exp(3.0) + std::exp(0.0));
  EXPECT_NEAR(d.confidence, expected, 1e-15);
}

TEST(DecodeRowTest, ExcludedTokenIsNeverChosenButStaysInTheSoftmax) {
  const float logits[] = {1, 5, 3, 0};
  RowDecision d = decodeRow(logits, 4, 0.0, 0, /*excluded=*/1);
  EXPECT_EQ(d.token, 2);
  const double sum = std::exp(1.0) + std::exp(5.0) + std::exp(3.0) + 1.0;
  EXPECT_NEAR(d.confidence, std::exp(3.0) / sum, 1e-15);
}

TEST(DecodeRowTest, TemperatureAddsScaledGumbelNoiseFromTheCounterRng) {
  const float logits[] = {0.5f, 0.25f, 0.0f, 0.75f, -1.0f};
  const uint64_t k = rng::key(5, 0, rng::kStreamGumbel, 3, 17);
  const double temperature = 2.0;
  int best = -1;
  double bestScore = -INFINITY;
  for (int v = 0; v < 5; ++v) {
    const double score = logits[v] + temperature * rng::gumbel(k, v);
    if (score > bestScore) {
      bestScore = score;
      best = v;
    }
  }
  EXPECT_EQ(decodeRow(logits, 5, temperature, k, kNoExcludedToken).token, best);
}

TEST(TemperedRowTest, UniformLogitsHaveEntropyLogV) {
  const float logits[] = {2, 2, 2, 2, 2, 2, 2, 2};
  TemperedRow row = temperedRow(logits, 8, 0.7, rng::key(1, 0, 0, 0, 0), kNoExcludedToken);
  EXPECT_NEAR(row.entropy, std::log(8.0), 1e-12);
  EXPECT_EQ(row.argmax, 0);
}

TEST(TemperedRowTest, PeakedRowHasNearZeroEntropyAndSamplesThePeak) {
  const float logits[] = {0, 0, 40, 0};
  TemperedRow row = temperedRow(logits, 4, 0.5, rng::key(1, 0, 0, 0, 0), kNoExcludedToken);
  EXPECT_LT(row.entropy, 1e-20);
  EXPECT_EQ(row.argmax, 2);
  EXPECT_EQ(row.sample, 2);
}

TEST(TemperedRowTest, TemperatureDividesTheLogits) {
  const float logits[] = {0, 1};
  TemperedRow row = temperedRow(logits, 2, 0.5, 0, kNoExcludedToken);
  const double p = 1 / (1 + std::exp(2.0)); // softmax of {0, 2}
  EXPECT_NEAR(row.entropy, -(p * std::log(p) + (1 - p) * std::log(1 - p)), 1e-14);
}

TEST(TemperedRowTest, ExclusionAppliesToSampleAndArgmax) {
  const float logits[] = {0, 0, 40, 0};
  TemperedRow row = temperedRow(logits, 4, 0.5, rng::key(1, 0, 0, 0, 0), /*excluded=*/2);
  EXPECT_NE(row.argmax, 2);
  EXPECT_NE(row.sample, 2);
  EXPECT_EQ(row.argmax, 0);
}

TEST(ConfidenceOrderTest, DescendingWithTiesToTheLowerPosition) {
  std::vector<int64_t> order;
  confidenceOrder({0.5, 0.9, 0.5, 0.1}, {10, 11, 9, 12}, order);
  EXPECT_THAT(order, ElementsAre(1, 2, 0, 3));
}

std::vector<uint8_t> accept(const std::vector<double> &entropy, double bound) {
  std::vector<int64_t> order;
  std::vector<uint8_t> accepted;
  entropyAccept(entropy, bound, order, accepted);
  return accepted;
}

TEST(EntropyAcceptTest, AcceptsWhileTheEntropyBeforeStaysWithinTheBound) {
  // Ascending: index 1 (0.125), 3 (0.125), 0 (0.25), 2 (2.0); entropy accepted before each:
  // 0, 0.125, 0.25, 0.5.
  EXPECT_THAT(accept({0.25, 0.125, 2.0, 0.125}, 0.5), ElementsAre(1, 1, 1, 1));
  EXPECT_THAT(accept({0.25, 0.125, 2.0, 0.125}, 0.4375), ElementsAre(1, 1, 0, 1));
  EXPECT_THAT(accept({0.25, 0.125, 2.0, 0.125}, 0.25), ElementsAre(1, 1, 0, 1));
  EXPECT_THAT(accept({0.25, 0.125, 2.0, 0.125}, 0.125), ElementsAre(0, 1, 0, 1));
}

TEST(EntropyAcceptTest, BudgetEdgeIsInclusive) {
  // Before the third: exactly 1.0 = bound -> accepted; a hair less bound -> rejected.
  EXPECT_THAT(accept({0.5, 0.5, 0.5}, 1.0), ElementsAre(1, 1, 1));
  EXPECT_THAT(accept({0.5, 0.5, 0.5}, std::nextafter(1.0, 0.0)), ElementsAre(1, 1, 0));
}

TEST(EntropyAcceptTest, TiesGoToTheLowerIndex) {
  EXPECT_THAT(accept({0.5, 0.5, 0.5}, 0.5), ElementsAre(1, 1, 0));
  EXPECT_THAT(accept({0.5, 0.5, 0.5}, 0.25), ElementsAre(1, 0, 0));
}

TEST(EntropyAcceptTest, TheLowestEntropyIsAlwaysAccepted) {
  EXPECT_THAT(accept({7.0, 5.0}, 0.1), ElementsAre(0, 1));
  EXPECT_THAT(accept({3.0}, 1e-9), ElementsAre(1));
  EXPECT_TRUE(accept({}, 0.1).empty());
}

} // namespace
} // namespace dlm::sampling
