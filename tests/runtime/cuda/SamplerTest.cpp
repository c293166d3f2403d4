// The fused sampler on the emulated device against the shared double reference
// (reference::samplerRow), which computes the whole softmax: entropy, argmax (excluded token never
// chosen), the Gumbel-max sample with the shared counter RNG (so the same token the CPU backend
// draws) and its confidence: the probability at temperature 1 (what the CPU's low-confidence
// policy ranks by) or at the row's temperature, per specialisation; with softmax statistics also
// max z and sum e^(z - max). Rows mix requests with different temperatures (greedy and T = 1
// included), seeds and steps; the vocabulary is ragged for the scalar path; one trial has -inf
// logits.
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
  const int requests = 5;
  const std::vector<float> temperature{0.8f, 0.4f, 0.f, 1.f, 1.3f};
  std::vector<unsigned long long> seed(requests), id(requests);
  std::vector<long long> step(requests);
  for (int r = 0; r < requests; ++r) {
    seed[r] = random();
    id[r] = static_cast<unsigned long long>(randomInt(random, 0, 1000));
    step[r] = randomInt(random, 0, 50);
  }
  std::vector<int> rowRequest(rows), rowPosition(rows);
  std::vector<Logit> logits(static_cast<size_t>(rows * stride), storeAs<Logit>(0.f));
  std::vector<float> exact(logits.size());
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
  std::vector<float> softmaxMax(rows, -1.f), softmaxSum(rows, -1.f);

  const Logit *logitArg = logits.data();
  const int *requestArg = rowRequest.data(), *positionArg = rowPosition.data();
  const unsigned long long *seedArg = seed.data(), *idArg = id.data();
  const long long *stepArg = step.data();
  const float *temperatureArg = temperature.data();
  int *sampledArg = sampled.data(), *argmaxArg = argmax.data();
  float *entropyArg = entropy.data(), *confidenceArg = confidence.data();
  float *maxArg = softmaxMax.data(), *sumArg = softmaxSum.data();
  if (params.softmaxStatistics)
    ASSERT_TRUE(launched(emulatedDevice().launchArgs(
        kernel.name, emu::Dim3{static_cast<unsigned>(rows)}, emu::Dim3{kernel.blockThreads},
        logitArg, stride, rows, requestArg, positionArg, seedArg, idArg, stepArg, temperatureArg,
        excluded, sampledArg, argmaxArg, entropyArg, confidenceArg, maxArg, sumArg)));
  else
    ASSERT_TRUE(launched(emulatedDevice().launchArgs(
        kernel.name, emu::Dim3{static_cast<unsigned>(rows)}, emu::Dim3{kernel.blockThreads},
        logitArg, stride, rows, requestArg, positionArg, seedArg, idArg, stepArg, temperatureArg,
        excluded, sampledArg, argmaxArg, entropyArg, confidenceArg)));

  for (int row = 0; row < rows; ++row) {
    const int r = rowRequest[row];
    const double t = temperature[r];
    const bool sampling = t > 0;
    const uint64_t rowKey = reference::counterKey(seed[r], id[r], reference::kGumbelStream,
                                                  static_cast<uint64_t>(step[r]),
                                                  static_cast<uint64_t>(rowPosition[row]));
    const reference::SamplerRow want = reference::samplerRow(exact.data() + row * stride, vocab, t,
                                                             params.softcap, rowKey, excluded);
    const std::vector<double> &z = want.z;
    const int bestArg = static_cast<int>(want.argmax);
    const int bestSample = static_cast<int>(want.sample);
    const double bestScore = want.sampleScore;
    const std::string where =
        kernel.name + " row " + std::to_string(row) + " T " + std::to_string(t);
    ASSERT_TRUE(near(entropy[row], want.entropy, 2e-4, 1e-3, where + " entropy"));
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
      const double got = z[sampled[row]] + reference::gumbel(rowKey, sampled[row]);
      ASSERT_GE(got, bestScore - 1e-5 * std::max(1.0, std::fabs(bestScore))) << where;
      exactSamples += sampled[row] == bestSample;
      ++samplingRows;
    }
    // The temperature-1 distribution is the greedy row's (z = softcap(logits)).
    const double wantConfidence =
        params.confidence == codegen::SamplerConfidence::unitTemperature
            ? reference::probability(reference::samplerRow(exact.data() + row * stride, vocab, 0,
                                                           params.softcap, rowKey, excluded),
                                     sampled[row])
            : reference::probability(want, sampled[row]);
    ASSERT_TRUE(near(confidence[row], wantConfidence, 1e-6, 1e-3, where + " confidence"));
    if (params.softmaxStatistics) {
      ASSERT_TRUE(near(softmaxMax[row], want.maximum, 1e-6, 1e-6, where + " softmax max"));
      ASSERT_TRUE(near(softmaxSum[row], want.sum, 1e-6, 1e-4, where + " softmax sum"));
    }
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
