// The generated typed parameters of the kernel kinds (runtime/model/KernelParams.h, from
// runtime/schema/KernelOps.td): defaults applied, optional ones told apart from absent, choices
// as enums, weights by name, and errors that name the parameter.
#include "runtime/model/KernelParams.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace dlm::spec::kernels {
namespace {

using Parameters = artifact::Attributes;

template <typename P> StatusOr<P> read(const Parameters &parameters) {
  StatusOr<KernelParams> params = readKernelParams(P::kind, parameters);
  if (!params)
    return params.status();
  return std::get<P>(*params);
}

TEST(KernelParams, TheDeclaredDefaultsApplyWhenAParameterIsLeftOut) {
  StatusOr<RopeParams> rope = read<RopeParams>({{"theta", 10000.0}, {"head_dim", int64_t{64}}});
  ASSERT_TRUE(rope.isOk()) << rope.status().message();
  EXPECT_EQ(rope->rotatedPairs, 32); // head_dim / 2
  rope = read<RopeParams>(
      {{"theta", 10000.0}, {"head_dim", int64_t{64}}, {"rotated_pairs", int64_t{8}}});
  ASSERT_TRUE(rope.isOk());
  EXPECT_EQ(rope->rotatedPairs, 8);

  StatusOr<AttentionParams> attention =
      read<AttentionParams>({{"mask", std::string("bidirectional")},
                             {"heads", int64_t{4}},
                             {"kv_heads", int64_t{2}},
                             {"head_dim", int64_t{16}}});
  ASSERT_TRUE(attention.isOk()) << attention.status().message();
  EXPECT_EQ(attention->mask, AttentionMask::bidirectional);
  EXPECT_EQ(nameOf(attention->mask), "bidirectional");
  EXPECT_DOUBLE_EQ(attention->scale, 0.25); // 1 / sqrt(head_dim)
  EXPECT_FALSE(attention->window.has_value());

  StatusOr<EmbeddingParams> embedding = read<EmbeddingParams>({{"weight", std::string("embed")}});
  ASSERT_TRUE(embedding.isOk());
  EXPECT_EQ(embedding->weight.name, "embed");
  EXPECT_EQ(embedding->scale, 1.0);

  StatusOr<LinearParams> linear = read<LinearParams>({{"weight", std::string("w")}});
  ASSERT_TRUE(linear.isOk());
  EXPECT_FALSE(linear->accumulate);
  EXPECT_FALSE(linear->bias); // an optional weight left out has no name
}

TEST(KernelParams, OptionalParametersWithoutADefaultAreToldApartFromAbsent) {
  StatusOr<LmHeadParams> head =
      read<LmHeadParams>({{"weight", std::string("embed")}, {"logit_shift", false}});
  ASSERT_TRUE(head.isOk()) << head.status().message();
  EXPECT_FALSE(head->softcap.has_value());
  EXPECT_FALSE(head->eps.has_value());
  head = read<LmHeadParams>(
      {{"weight", std::string("embed")}, {"logit_shift", true}, {"softcap", 30.0}});
  ASSERT_TRUE(head.isOk());
  EXPECT_EQ(head->softcap, 30.0);
  EXPECT_TRUE(head->logitShift);
}

TEST(KernelParams, MissingOrMistypedParametersAreNamed) {
  EXPECT_EQ(read<RopeParams>({{"head_dim", int64_t{64}}}).status().message(),
            "parameter 'theta' is missing or not a real");
  EXPECT_EQ(
      read<RopeParams>({{"theta", int64_t{10000}}, {"head_dim", int64_t{64}}}).status().message(),
      "parameter 'theta' is missing or not a real");
  EXPECT_EQ(read<AttentionParams>({{"mask", std::string("sideways")},
                                   {"heads", int64_t{4}},
                                   {"kv_heads", int64_t{2}},
                                   {"head_dim", int64_t{16}}})
                .status()
                .message(),
            "parameter 'mask' is 'sideways', not one of causal, bidirectional, block_causal");
  EXPECT_EQ(read<ScaleParams>({{"weight", std::string()}}).status().message(),
            "parameter 'weight' names no weight");
  EXPECT_EQ(read<ScaleParams>({{"weight", 1.0}}).status().message(),
            "parameter 'weight' is missing or not text");
}

TEST(KernelParams, WeightsAreVisitedInDeclarationOrder) {
  StatusOr<NormLinearParams> linear = read<NormLinearParams>({{"norm_weight", std::string("n")},
                                                              {"eps", 1e-6},
                                                              {"weight", std::string("w")},
                                                              {"accumulate", true}});
  ASSERT_TRUE(linear.isOk()) << linear.status().message();
  EXPECT_TRUE(linear->accumulate);
  std::vector<std::string> names;
  linear->forEachWeight([&](const WeightRef &w) { names.push_back(w.name); });
  EXPECT_EQ(names, (std::vector<std::string>{"n", "w", ""})); // the bias left out
}

TEST(KernelParams, EveryKindReadsIntoItsOwnAlternative) {
  for (const KindContract &contract : kKindContracts) {
    // The required parameters of each kind, of their declared types.
    Parameters parameters;
    for (size_t i = 0; i < contract.parameterCount; ++i) {
      const ParameterSpec &p = contract.parameters[i];
      if (!p.required)
        continue;
      switch (p.type) {
      case ParameterType::integer:
        parameters[std::string(p.name)] = int64_t{2};
        break;
      case ParameterType::real:
        parameters[std::string(p.name)] = 0.5;
        break;
      case ParameterType::flag:
        parameters[std::string(p.name)] = true;
        break;
      case ParameterType::text:
      case ParameterType::weight:
      case ParameterType::slots:
        parameters[std::string(p.name)] =
            p.choiceCount ? std::string(p.choices[0]) : std::string("1");
        break;
      }
    }
    StatusOr<KernelParams> params =
        readKernelParams(static_cast<KernelKind>(contract.kind), parameters);
    ASSERT_TRUE(params.isOk()) << contract.name << ": " << params.status().message();
    EXPECT_EQ(params->index(), contract.kind) << contract.name;
  }
}

} // namespace
} // namespace dlm::spec::kernels
