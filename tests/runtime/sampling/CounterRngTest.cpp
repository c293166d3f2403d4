// Known answers printed by tests/reference/counter_rng.py (python counter_rng.py).
#include "runtime/sampling/CounterRng.h"

#include <gtest/gtest.h>

namespace dlm::sampling::rng {
namespace {

TEST(CounterRngTest, Mix64MatchesTheReference) { EXPECT_EQ(mix64(0), 0xE220A8397B1DCDAFull); }

TEST(CounterRngTest, KeysMatchTheReference) {
  EXPECT_EQ(key(0, 0, 0, 0, 0), 0x78AE5A9A6B5FD45Eull);
  EXPECT_EQ(key(1, 2, 0, 3, 4), 0x319095646F29ED17ull);
  EXPECT_EQ(key(42, 7, 1, 5, 100), 0x2BD2928089FE1D5Full);
  EXPECT_EQ(positionKey(stepKey(42, 7, 1, 5), 100), key(42, 7, 1, 5, 100));
}

TEST(CounterRngTest, UniformIsBitExact) {
  const uint64_t k = key(0, 0, 0, 0, 0);
  EXPECT_EQ(uniform(k, 0), 0.7961956752947816);
  EXPECT_EQ(uniform(k, 1), 0.11112257838554035);
  EXPECT_EQ(uniform(k, 2), 0.4328746129317837);
  EXPECT_EQ(uniform(k, 3), 0.7810997456973221);
}

TEST(CounterRngTest, GumbelMatchesTheReference) {
  // numpy's vectorised log may differ from libm's by an ulp or two; decisions never hinge on it.
  const uint64_t k = key(0, 0, 0, 0, 0);
  EXPECT_NEAR(gumbel(k, 0), 1.4788031479962698, 1e-14);
  EXPECT_NEAR(gumbel(k, 1), -0.7871480386637149, 1e-14);
  EXPECT_NEAR(gumbel(k, 2), 0.17756428604386276, 1e-14);
  EXPECT_NEAR(gumbel(k, 3), 1.398154730314527, 1e-14);
  const uint64_t k2 = key(42, 7, kStreamGumbel, 5, 100);
  EXPECT_NEAR(gumbel(k2, 0), 3.4739506481483753, 1e-14);
  EXPECT_NEAR(gumbel(k2, 1), 0.31804033838132373, 1e-14);
  EXPECT_NEAR(gumbel(k2, 2), 0.33663595416057923, 1e-14);
}

TEST(CounterRngTest, RandomTokensMatchTheReference) {
  EXPECT_EQ(randomToken(key(0, 0, kStreamRenoise, 0, 0), 512), 154);
  EXPECT_EQ(randomToken(key(0, 0, kStreamInit, 0, 5), 512), 294);
  EXPECT_EQ(randomToken(key(9, 1, kStreamRenoise, 2, 3), 151936), 117982);
}

TEST(CounterRngTest, UniformStaysInsideTheOpenInterval) {
  // The extreme bit patterns map to 0.5 * 2^-53 and 1 - 0.5 * 2^-53.
  for (uint64_t v = 0; v < 10000; ++v) {
    const double u = uniform(key(3, 1, 0, 2, 9), v);
    ASSERT_GT(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

} // namespace
} // namespace dlm::sampling::rng
