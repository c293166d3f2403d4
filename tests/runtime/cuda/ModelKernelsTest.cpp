// The sampler, accept and renoise kernels decodingKernels picks per decoding policy are the ones
// that make the CPU decoder's decisions (runtime/sampling/): low-confidence ranks masked
// positions by the temperature-1 confidence and re-masks nothing it unmasked; entropy-bound
// walks every position by entropy and renoises every rejected one, with either noise.
#include "compiler/codegen/ModelKernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace {

using namespace dlm;

artifact::ModelConfig demoLikeConfig(int64_t maskToken) {
  artifact::ModelConfig config;
  config.architecture = "LLaDAModelLM";
  config.vocabSize = 1024;
  config.hiddenSize = 128;
  config.numLayers = 2;
  config.numHeads = 4;
  config.numKvHeads = 2;
  config.headDim = 32;
  config.intermediateSize = 384;
  config.ropeTheta = 10000.0;
  config.maskTokenId = maskToken;
  config.attentionMask = artifact::AttentionMaskKind::bidirectional;
  return config;
}

// The specialisations of the kernels of one kind, as "key=value" strings per kernel.
std::vector<std::vector<std::string>> specialisationsOf(const std::vector<codegen::KernelSource> &kernels,
                                                        const std::string &kind) {
  std::vector<std::vector<std::string>> found;
  for (const codegen::KernelSource &kernel : kernels) {
    if (kernel.kind != kind)
      continue;
    std::vector<std::string> entries;
    for (const auto &[key, value] : kernel.specialisation) {
      std::string text;
      if (const auto *b = std::get_if<bool>(&value))
        text = *b ? "true" : "false";
      else if (const auto *i = std::get_if<int64_t>(&value))
        text = std::to_string(*i);
      else if (const auto *s = std::get_if<std::string>(&value))
        text = *s;
      else
        text = std::to_string(std::get<double>(value));
      entries.push_back(key + "=" + text);
    }
    found.push_back(entries);
  }
  return found;
}

bool has(const std::vector<std::string> &entries, const std::string &entry) {
  return std::find(entries.begin(), entries.end(), entry) != entries.end();
}

TEST(ModelKernels, LowConfidenceRanksByUnitConfidenceAndRemasksNothing) {
  for (bool threshold : {false, true}) {
    codegen::ModelKernelOptions options;
    options.policy = "low-confidence";
    options.confidenceThreshold = threshold;
    StatusOr<std::vector<codegen::KernelSource>> kernels =
        codegen::decodingKernels(demoLikeConfig(1000), options);
    ASSERT_TRUE(kernels) << kernels.status().message();
    const auto samplers = specialisationsOf(*kernels, "sampler");
    ASSERT_EQ(samplers.size(), 1u);
    EXPECT_TRUE(has(samplers[0], "confidence=unit_temperature"));
    const auto accepts = specialisationsOf(*kernels, "accept");
    ASSERT_EQ(accepts.size(), 1u);
    EXPECT_TRUE(has(accepts[0], "mask_absorbing=true"));
    EXPECT_TRUE(has(accepts[0], threshold ? "rule=confidence_threshold" : "rule=top_k"));
    const auto renoises = specialisationsOf(*kernels, "renoise");
    ASSERT_EQ(renoises.size(), 1u);
    EXPECT_TRUE(has(renoises[0], "noise=mask"));
    EXPECT_TRUE(has(renoises[0], "candidates=masked_only"));
    EXPECT_TRUE(has(renoises[0], "initial_canvas=false"));
  }
}

TEST(ModelKernels, LowConfidenceNeedsAMaskToken) {
  codegen::ModelKernelOptions options;
  options.policy = "low-confidence";
  StatusOr<std::vector<codegen::KernelSource>> kernels =
      codegen::decodingKernels(demoLikeConfig(-1), options);
  ASSERT_FALSE(kernels);
  EXPECT_NE(kernels.status().message().find("needs a mask token"), std::string::npos)
      << kernels.status().message();
}

// DiffusionGemma's sampler and left-to-right decoding run on the host over the device forwards
// (the device block loop does not run their programs): no decoding kernels, with or without a
// mask token.
TEST(ModelKernels, HostDecodingNeedsNoDecodingKernels) {
  codegen::ModelKernelOptions options;
  options.hostDecoding = true;
  for (int64_t mask : {int64_t(-1), int64_t(1000)}) {
    StatusOr<std::vector<codegen::KernelSource>> kernels =
        codegen::decodingKernels(demoLikeConfig(mask), options);
    ASSERT_TRUE(kernels) << kernels.status().message();
    EXPECT_TRUE(kernels->empty());
  }
}

TEST(ModelKernels, EntropyBoundRenoisesEveryRejectedPositionWithEitherNoise) {
  codegen::ModelKernelOptions options;
  options.policy = "entropy-bound";
  StatusOr<std::vector<codegen::KernelSource>> kernels =
      codegen::decodingKernels(demoLikeConfig(1000), options);
  ASSERT_TRUE(kernels) << kernels.status().message();
  const auto accepts = specialisationsOf(*kernels, "accept");
  ASSERT_EQ(accepts.size(), 1u);
  EXPECT_TRUE(has(accepts[0], "rule=entropy_bound"));
  EXPECT_TRUE(has(accepts[0], "mask_absorbing=false"));
  const auto renoises = specialisationsOf(*kernels, "renoise");
  // Renoise and initial canvas, for mask and uniform noise (the noise is a run-time knob).
  ASSERT_EQ(renoises.size(), 4u);
  for (const auto &renoise : renoises)
    EXPECT_TRUE(has(renoise, "candidates=every_rejected"));
  int maskNoise = 0, initial = 0;
  for (const auto &renoise : renoises) {
    maskNoise += has(renoise, "noise=mask");
    initial += has(renoise, "initial_canvas=true");
  }
  EXPECT_EQ(maskNoise, 2);
  EXPECT_EQ(initial, 2);

  // Without a mask token only uniform noise exists.
  kernels = codegen::decodingKernels(demoLikeConfig(-1), options);
  ASSERT_TRUE(kernels) << kernels.status().message();
  const auto uniformOnly = specialisationsOf(*kernels, "renoise");
  ASSERT_EQ(uniformOnly.size(), 2u);
  for (const auto &renoise : uniformOnly)
    EXPECT_TRUE(has(renoise, "noise=uniform"));
}

} // namespace
