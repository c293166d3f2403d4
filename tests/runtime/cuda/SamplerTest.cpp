// The fused sampler on the emulated device against a double reference that computes the whole
// softmax: entropy, argmax (excluded token never chosen), the Gumbel-max sample with the shared
// counter RNG (so the same token the CPU backend draws) and its probability. Rows mix requests
// with different temperatures (greedy included), seeds and steps; the vocabulary is ragged for
// the scalar path; one trial has -inf logits.
#include "tests/runtime/cuda/CudaTestSupport.h"
#include "tests/runtime/cuda/EmuKernelConfigs.h"

#include <limits>

namespace {

using namespace dlm;
using namespace dlm::cudatest;

template <typename Logit>
void checkSampler(const codegen::SamplerParams &params, std::mt19937 &random, int trial,
                  int &exactSamples, int &samplingRows) {
  const codegen::KernelSource kernel = *codegen::generateSampler(params);
  const int vocab = static_cast<int>(params.vocab);
  const int rows = randomInt(random, 1, 24);
  const long long stride = vocab + 8;
  const int requests = 4;
  const std::vector<float> temperature{0.8f, 0.4f, 0.f, 1.f};
  std::vector<unsigned long long> seed(requests), id(requests);
  std::vector<long long> step(requests);
  for (int r = 0; r < requests; ++r) {
    seed[r] = random();
    id[r] = static_cast<unsigned long long>(randomInt(random, 0, 1000));
    step[r] = randomInt(random, 0, 50);
  }
  std::vector<int> rowRequest(rows), rowPosition(rows);
  std::vector<Logit> logits(static_cast<size_t>(rows * stride), storeAs<Logit>(0.f));
  std::vector<double> exact(logits.size());
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int row = 0; row < rows; ++row) {
    rowRequest[row] = randomInt(random, 0, requests - 1);
    rowPosition[row] = randomInt(random, 0, 5000);
    const float sharpness = std::vector<float>{0.5f, 3.f, 12.f}[randomInt(random, 0, 2)];
    for (int v = 0; v < vocab; ++v) {
      float value = normal(random) * sharpness;
      if (trial == 2 && std::is_same_v<Logit, float> && v % 7 == 3)
        value = -std::numeric_limits<float>::infinity();
      logits[row * stride + v] = storeAs<Logit>(value);
      exact[row * stride + v] = loadFloat(logits[row * stride + v]);
    }
  }
  const int excluded = trial == 1 ? randomInt(random, 0, vocab - 1) : -1;
  std::vector<int> sampled(rows, -2), argmax(rows, -2);
  std::vector<float> entropy(rows, -1.f), confidence(rows, -1.f);

  const Logit *logitArg = logits.data();
  const int *requestArg = rowRequest.data(), *positionArg = rowPosition.data();
  const unsigned long long *seedArg = seed.data(), *idArg = id.data();
  const long long *stepArg = step.data();
  const float *temperatureArg = temperature.data();
  int *sampledArg = sampled.data(), *argmaxArg = argmax.data();
  float *entropyArg = entropy.data(), *confidenceArg = confidence.data();
  ASSERT_TRUE(emulatedDevice().launchArgs(
      kernel.name, emu::Dim3{static_cast<unsigned>(rows)}, emu::Dim3{kernel.blockThreads}, logitArg,
      stride, rows, requestArg, positionArg, seedArg, idArg, stepArg, temperatureArg, excluded,
      sampledArg, argmaxArg, entropyArg, confidenceArg));

  for (int row = 0; row < rows; ++row) {
    const int r = rowRequest[row];
    const double t = temperature[r];
    const bool sampling = t > 0;
    std::vector<double> z(vocab);
    for (int v = 0; v < vocab; ++v) {
      double logit = exact[row * stride + v];
      if (params.softcap > 0)
        logit = params.softcap * std::tanh(logit / params.softcap);
      z[v] = sampling ? logit / t : logit;
    }
    const double maximum = *std::max_element(z.begin(), z.end());
    double sum = 0;
    for (double value : z)
      sum += std::exp(value - maximum);
    double wantEntropy = 0;
    for (double value : z) {
      const double logP = value - maximum - std::log(sum);
      if (std::isfinite(logP))
        wantEntropy -= std::exp(logP) * logP;
    }
    const uint64_t rowKey = referenceKey(seed[r], id[r], 0, static_cast<uint64_t>(step[r]),
                                static_cast<uint64_t>(rowPosition[row]));
    int bestArg = -1, bestSample = -1;
    double bestScore = -std::numeric_limits<double>::infinity();
    for (int v = 0; v < vocab; ++v) {
      if (v == excluded)
        continue;
      if (bestArg < 0 || z[v] > z[bestArg])
        bestArg = v;
      const double score = z[v] + referenceGumbel(rowKey, v);
      if (bestSample < 0 || score > bestScore) {
        bestScore = score;
        bestSample = v;
      }
    }
    const std::string where =
        kernel.name + " row " + std::to_string(row) + " T " + std::to_string(t);
    ASSERT_TRUE(near(entropy[row], wantEntropy, 2e-4, 1e-3, where + " entropy"));
    ASSERT_GE(argmax[row], 0) << where;
    ASSERT_LT(argmax[row], vocab) << where;
    ASSERT_NE(argmax[row], excluded) << where;
    // float z may turn a near-tie into a tie; the kernel's pick must then be as good.
    ASSERT_GE(z[argmax[row]], z[bestArg] - 1e-5 * std::max(1.0, std::fabs(z[bestArg]))) << where;
    if (!sampling) {
      ASSERT_EQ(sampled[row], argmax[row]) << where << ": greedy rows sample the argmax";
    } else {
      ASSERT_GE(sampled[row], 0) << where;
      ASSERT_NE(sampled[row], excluded) << where;
      const double got = z[sampled[row]] + referenceGumbel(rowKey, sampled[row]);
      ASSERT_GE(got, bestScore - 1e-5 * std::max(1.0, std::fabs(bestScore))) << where;
      exactSamples += sampled[row] == bestSample;
      ++samplingRows;
    }
    const double wantConfidence = std::exp(z[sampled[row]] - maximum) / sum;
    ASSERT_TRUE(near(confidence[row], wantConfidence, 1e-6, 1e-3, where + " confidence"));
  }
}

TEST(SamplerKernel, MatchesDoubleReference) {
  std::mt19937 random(77);
  int exactSamples = 0, samplingRows = 0;
  for (const codegen::SamplerParams &params : samplerConfigs()) {
    for (int trial = 0; trial < 3; ++trial) {
      SCOPED_TRACE(testing::Message() << "vocab " << params.vocab << " trial " << trial);
      if (params.logits == codegen::ElementType::bf16)
        checkSampler<__nv_bfloat16>(params, random, trial, exactSamples, samplingRows);
      else
        checkSampler<float>(params, random, trial, exactSamples, samplingRows);
      if (HasFatalFailure())
        return;
    }
  }
  // Near-ties aside, the sample is the very token the reference (and the CPU backend) draws.
  EXPECT_GE(exactSamples + 1, samplingRows) << exactSamples << " of " << samplingRows;
}

} // namespace
