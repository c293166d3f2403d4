#include "tests/runtime/sampling/legacy/DecodingKnobs.h"

#include <gtest/gtest.h>

namespace dlm::sampling {
namespace {

using artifact::Attributes;

TEST(DecodingKnobsTest, DefaultsAreThoseOfTheReferenceGenerator) {
  StatusOr<DecodingKnobs> knobs = resolveKnobs("", {}, {});
  ASSERT_TRUE(knobs.isOk()) << knobs.status().message();
  EXPECT_EQ(knobs->policy, Policy::lowConfidence);
  EXPECT_EQ(knobs->genLength, 32);
  EXPECT_EQ(knobs->blockLength, 8);
  EXPECT_EQ(knobs->steps, 16);
  EXPECT_FALSE(knobs->threshold.has_value());
  EXPECT_EQ(knobs->temperature, 0.0);
  EXPECT_EQ(knobs->maxSteps, 48);
  EXPECT_EQ(knobs->tMin, 0.4);
  EXPECT_EQ(knobs->tMax, 0.8);
  EXPECT_EQ(knobs->entropyBound, 0.1);
  EXPECT_EQ(knobs->stabilityThreshold, 1);
  EXPECT_EQ(knobs->confidenceThreshold, 0.005);
}

TEST(DecodingKnobsTest, RequestOverridesTheArtifact) {
  Attributes program{{"gen_length", int64_t(64)}, {"threshold", 0.9}, {"temperature", 0.5}};
  Attributes request{{"gen_length", int64_t(16)}, {"threshold", std::string("none")}};
  StatusOr<DecodingKnobs> knobs = resolveKnobs("entropy-bound", program, request);
  ASSERT_TRUE(knobs.isOk()) << knobs.status().message();
  EXPECT_EQ(knobs->policy, Policy::entropyBound);
  EXPECT_EQ(knobs->genLength, 16);
  EXPECT_FALSE(knobs->threshold.has_value());
  EXPECT_EQ(knobs->temperature, 0.5);
}

TEST(DecodingKnobsTest, PolicyKnobAndUnderscoreSpelling) {
  StatusOr<DecodingKnobs> knobs =
      resolveKnobs("entropy_bound", {}, {{"policy", std::string("low_confidence")}});
  ASSERT_TRUE(knobs.isOk());
  EXPECT_EQ(knobs->policy, Policy::lowConfidence);
}

TEST(DecodingKnobsTest, UnknownPolicyIsNamed) {
  StatusOr<DecodingKnobs> knobs = resolveKnobs("", {}, {{"policy", std::string("greedy")}});
  ASSERT_FALSE(knobs.isOk());
  EXPECT_EQ(knobs.status().message(),
            "unknown policy 'greedy' (expected low-confidence or entropy-bound)");
  StatusOr<DecodingKnobs> fromArtifact = resolveKnobs("magic", {}, {});
  ASSERT_FALSE(fromArtifact.isOk());
  EXPECT_EQ(fromArtifact.status().message(),
            "artifact decoding program: unknown policy 'magic' (expected low-confidence or "
            "entropy-bound)");
}

TEST(DecodingKnobsTest, UnknownKnobAndWrongTypesAreNamed) {
  StatusOr<DecodingKnobs> unknown = resolveKnobs("", {}, {{"stepz", int64_t(3)}});
  ASSERT_FALSE(unknown.isOk());
  EXPECT_EQ(unknown.status().message(), "unknown knob 'stepz'");
  StatusOr<DecodingKnobs> wrong = resolveKnobs("", {}, {{"steps", 2.5}});
  ASSERT_FALSE(wrong.isOk());
  EXPECT_EQ(wrong.status().message(), "knob 'steps' must be an integer");
  StatusOr<DecodingKnobs> text = resolveKnobs("", {}, {{"temperature", std::string("hot")}});
  ASSERT_FALSE(text.isOk());
  EXPECT_EQ(text.status().message(), "knob 'temperature' must be a number");
  StatusOr<DecodingKnobs> noise = resolveKnobs("", {}, {{"noise", std::string("pink")}});
  ASSERT_FALSE(noise.isOk());
}

// dlmc compile --unroll: the program's unroll factor, at least 1; 0 (absent) leaves the choice to
// the backend.
TEST(DecodingKnobsTest, UnrollStepsComesFromTheProgramAndIsAtLeastOne) {
  StatusOr<DecodingKnobs> absent = resolveKnobs("", {}, {});
  ASSERT_TRUE(absent.isOk());
  EXPECT_EQ(absent->unrollSteps, 0);
  StatusOr<DecodingKnobs> two = resolveKnobs("", {{"unroll_steps", int64_t(2)}}, {});
  ASSERT_TRUE(two.isOk()) << two.status().message();
  EXPECT_EQ(two->unrollSteps, 2);
  StatusOr<DecodingKnobs> zero = resolveKnobs("", {{"unroll_steps", int64_t(0)}}, {});
  ASSERT_FALSE(zero.isOk());
  EXPECT_EQ(zero.status().message(),
            "artifact decoding program: knob 'unroll_steps' must be at least 1, got 0");
}

TEST(DecodingKnobsTest, IntegralRealsAndIntegerRealsAreAccepted) {
  StatusOr<DecodingKnobs> knobs =
      resolveKnobs("", {}, {{"steps", 8.0}, {"temperature", int64_t(1)}});
  ASSERT_TRUE(knobs.isOk());
  EXPECT_EQ(knobs->steps, 8);
  EXPECT_EQ(knobs->temperature, 1.0);
}

} // namespace
} // namespace dlm::sampling
