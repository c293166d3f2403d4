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

std::vector<uint8_t> acceptF32(const std::vector<float> &entropy, float bound) {
  std::vector<int64_t> order;
  std::vector<uint8_t> accepted;
  entropyAcceptF32(std::vector<double>(entropy.begin(), entropy.end()), bound, order, accepted);
  return accepted;
}

// Expected values are what torch 2.15 gives for transformers' rule (sort, cumsum, cs - H <= 0.1)
// on these float32 entropies.
TEST(EntropyAcceptF32Test, DecidesAsTransformersFloat32Rule) {
  // 0.05f + 0.05f = 0.1000000015 passes the double bound 0.1 but not the float32 one.
  EXPECT_THAT(accept({0.05f, 0.05f, 0.0625f}, 0.1), ElementsAre(1, 1, 0));
  EXPECT_THAT(acceptF32({0.05f, 0.05f, 0.0625f}, 0.1f), ElementsAre(1, 1, 1));
  // The float32 prefix sum rounds: 0.18f - 0.08f is 0.100000024 > 0.1f.
  EXPECT_THAT(acceptF32({0.05f, 0.05f, 0.08f}, 0.1f), ElementsAre(1, 1, 0));
  EXPECT_THAT(acceptF32({0.5f, 0.125f, 2.0f, 0.125f}, 0.25f), ElementsAre(1, 1, 0, 1));
  EXPECT_THAT(acceptF32({7.0f, 5.0f}, 0.1f), ElementsAre(0, 1));
}

TEST(TemperedRowF32Test, DividesInFloat32WhereTiesGoToTheFirstIndex) {
  // Adjacent floats whose float32 quotients by T = 0.7f tie (torch.argmax gives 0); in double
  // the second is larger.
  const float logits[] = {6.0243382f, 6.0243387f};
  const float T = 0.70000004768371582f;
  ASSERT_EQ(logits[0] / T, logits[1] / T);
  EXPECT_EQ(temperedRowF32(logits, 2, T, 1, kNoExcludedToken).argmax, 0);
  EXPECT_EQ(temperedRow(logits, 2, T, 1, kNoExcludedToken).argmax, 1);
  // The entropy is float32 and close to the exact one.
  const float uniform[] = {1.0f, 1.0f, 1.0f, 1.0f};
  const TemperedRow row = temperedRowF32(uniform, 4, 0.5f, 1, kNoExcludedToken);
  EXPECT_EQ(row.entropy, static_cast<double>(static_cast<float>(row.entropy)));
  EXPECT_NEAR(row.entropy, std::log(4.0), 1e-6);
}

std::vector<uint8_t> hierarchical(const std::vector<double> &confidence,
                                  const std::vector<int64_t> &positions, double threshold,
                                  double low, int64_t depth) {
  std::vector<int64_t> segments;
  std::vector<uint8_t> keep;
  hierarchicalAccept(confidence, positions, HierarchicalRule{threshold, low, depth}, segments,
                     keep);
  return keep;
}

TEST(HierarchicalAcceptTest, DepthOneTakesEachRunsMaximumAboveTheLowThreshold) {
  // Runs: positions 10-12 (maximum 0.6 at 11), 14-15 (maximum 0.5 at 15), 17 (0.3).
  const std::vector<int64_t> positions = {10, 11, 12, 14, 15, 17};
  const std::vector<double> confidence = {0.2, 0.6, 0.55, 0.1, 0.5, 0.3};
  EXPECT_THAT(hierarchical(confidence, positions, 0.9, 0.4, 1), ElementsAre(0, 1, 0, 0, 1, 0));
  // Strict comparisons: a maximum at the low threshold is not taken...
  EXPECT_THAT(hierarchical(confidence, positions, 0.9, 0.5, 1), ElementsAre(0, 1, 0, 0, 0, 0));
  // ...nor a confidence at the high threshold; above it, any candidate is.
  EXPECT_THAT(hierarchical(confidence, positions, 0.55, 0.9, 1), ElementsAre(0, 1, 0, 0, 0, 0));
  EXPECT_THAT(hierarchical(confidence, positions, 0.54, 0.9, 1), ElementsAre(0, 1, 1, 0, 0, 0));
}

TEST(HierarchicalAcceptTest, TheMostConfidentIsAlwaysTakenTiesToTheLowerPosition) {
  EXPECT_THAT(hierarchical({0.2, 0.3, 0.3}, {0, 1, 2}, 1.0, 0.9, 1), ElementsAre(0, 1, 0));
  EXPECT_THAT(hierarchical({0.7}, {5}, 1.0, 0.9, 3), ElementsAre(1));
  EXPECT_TRUE(hierarchical({}, {}, 1.0, 0.4, 1).empty());
}

TEST(HierarchicalAcceptTest, EveryTiedMaximumOfARunIsTaken) {
  // dInfer compares each confidence with its segment's maximum.
  EXPECT_THAT(hierarchical({0.5, 0.2, 0.5}, {0, 1, 2}, 1.0, 0.4, 1), ElementsAre(1, 0, 1));
}

TEST(HierarchicalAcceptTest, DeeperLevelsSplitEachSegmentAtItsChoice) {
  // One run of 7. Level 1 takes 3 (0.9); level 2 the maxima of [0,3) and [4,7): 1 (0.7) and 5
  // (0.8); level 3 those of [0,1), [2,3), [4,5), [6,7) above 0.4: 0 (0.5), 6 (0.6).
  const std::vector<int64_t> positions = {0, 1, 2, 3, 4, 5, 6};
  const std::vector<double> confidence = {0.5, 0.7, 0.3, 0.9, 0.2, 0.8, 0.6};
  EXPECT_THAT(hierarchical(confidence, positions, 1.0, 0.4, 1),
              ElementsAre(0, 0, 0, 1, 0, 0, 0));
  EXPECT_THAT(hierarchical(confidence, positions, 1.0, 0.4, 2),
              ElementsAre(0, 1, 0, 1, 0, 1, 0));
  EXPECT_THAT(hierarchical(confidence, positions, 1.0, 0.4, 3),
              ElementsAre(1, 1, 0, 1, 0, 1, 1));
  // Depth past the last split changes nothing.
  EXPECT_EQ(hierarchical(confidence, positions, 1.0, 0.4, 3),
            hierarchical(confidence, positions, 1.0, 0.4, 9));
  // A segment whose maximum is not above the low threshold is not split further.
  EXPECT_THAT(hierarchical(confidence, positions, 1.0, 0.75, 3),
              ElementsAre(0, 0, 0, 1, 0, 1, 0));
}

TEST(CreditTest, TopProbabilityIsTheArgmaxOfTheSoftmax) {
  // softmax of {0, log 3}: {0.25, 0.75}.
  const float logits[] = {0.0f, static_cast<float>(std::log(3.0))};
  const TopProbability top = topProbability(logits, 2);
  EXPECT_EQ(top.token, 1);
  EXPECT_NEAR(top.probability, 0.75, 1e-7);
  // Ties go to the lower id: uniform over 4.
  const float flat[] = {1.0f, 1.0f, 1.0f, 1.0f};
  EXPECT_EQ(topProbability(flat, 4).token, 0);
  EXPECT_DOUBLE_EQ(topProbability(flat, 4).probability, 0.25);
}

TEST(CreditTest, CreditedLogitAddsAlphaLogOnePlusCredit) {
  EXPECT_EQ(creditedLogit(1.0f, 0.0, 0.5), 1.0f); // no credit: the logit, exactly
  EXPECT_FLOAT_EQ(creditedLogit(-2.0f, 1.0, 0.5), static_cast<float>(-2.0 + 0.5 * std::log(2.0)));
  EXPECT_FLOAT_EQ(creditedLogit(0.5f, std::exp(2.0) - 1.0, 0.5), 1.5f);
}

TEST(ConfidenceOrderTest, NanRanksLast) {
  std::vector<int64_t> order;
  confidenceOrder({std::nan(""), 0.5, std::nan(""), 0.9}, {0, 1, 2, 3}, order);
  EXPECT_THAT(order, ElementsAre(3, 1, 0, 2));
}

// transformers' TopKLogitsWarper and TopPLogitsWarper, checked by hand.
std::vector<int> allowedIds(const std::vector<float> &logits, double temperature, int64_t topK,
                            double topP, int64_t excluded = kNoExcludedToken) {
  std::vector<uint8_t> allowed;
  std::vector<int32_t> order;
  topKTopPFilter(logits.data(), static_cast<int64_t>(logits.size()), temperature, topK, topP,
                 excluded, allowed, order);
  std::vector<int> ids;
  for (size_t v = 0; v < allowed.size(); ++v)
    if (allowed[v])
      ids.push_back(static_cast<int>(v));
  return ids;
}

TEST(TopKTopPFilterTest, TopKKeepsEveryTokenTiedWithTheKth) {
  const std::vector<float> logits = {0, 1, 2, 3, 3};
  EXPECT_THAT(allowedIds(logits, 1.0, 1, 1.0), ElementsAre(3, 4));
  EXPECT_THAT(allowedIds(logits, 1.0, 2, 1.0), ElementsAre(3, 4));
  EXPECT_THAT(allowedIds(logits, 1.0, 3, 1.0), ElementsAre(2, 3, 4));
  EXPECT_THAT(allowedIds(logits, 1.0, 0, 1.0), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_THAT(allowedIds(logits, 1.0, 9, 1.0), ElementsAre(0, 1, 2, 3, 4));
  // The excluded token is never allowed and does not count towards k.
  EXPECT_THAT(allowedIds(logits, 1.0, 2, 1.0, /*excluded=*/4), ElementsAre(2, 3));
}

TEST(TopKTopPFilterTest, TopPDropsTheTailWhoseMassIsAtMostOneMinusP) {
  // softmax(0, 1, 2, 3) = 0.0321, 0.0871, 0.2369, 0.6439; ascending cumulative 0.0321, 0.1192,
  // 0.3561, 1: a token goes when its cumulative mass is <= 1 - p.
  const std::vector<float> logits = {0, 1, 2, 3};
  EXPECT_THAT(allowedIds(logits, 1.0, 0, 0.7), ElementsAre(2, 3));   // 0.3 removes 0 and 1
  EXPECT_THAT(allowedIds(logits, 1.0, 0, 0.5), ElementsAre(3));      // 0.5 removes 0, 1 and 2
  EXPECT_THAT(allowedIds(logits, 1.0, 0, 0.9), ElementsAre(1, 2, 3)); // 0.1 removes 0
  EXPECT_THAT(allowedIds(logits, 1.0, 0, 1e-6), ElementsAre(3));     // the largest always stays
  // The temperature comes first: at T = 0.5 (z = 0, 2, 4, 6; masses 0.0021, 0.0158, 0.1170,
  // 0.8650) p = 0.8 keeps only the largest.
  EXPECT_THAT(allowedIds(logits, 0.5, 0, 0.8), ElementsAre(3));
  // Top-k first, then top-p over what top-k kept: k = 2 leaves 2 and 3 (masses 0.2689, 0.7311),
  // and p = 0.7 then drops 2 (0.2689 <= 0.3).
  EXPECT_THAT(allowedIds(logits, 1.0, 2, 0.7), ElementsAre(3));
}

TEST(TopKTopPFilterTest, DecodeRowDrawsOnlyAllowedTokens) {
  const std::vector<float> logits = {0, 0, 0, 0, 0, 0};
  std::vector<uint8_t> allowed = {0, 0, 1, 0, 1, 0};
  for (uint64_t key = 0; key < 200; ++key) {
    const RowDecision d = decodeRow(logits.data(), 6, 1.0, key, kNoExcludedToken, allowed.data());
    EXPECT_TRUE(d.token == 2 || d.token == 4) << d.token;
  }
}

} // namespace
} // namespace dlm::sampling
