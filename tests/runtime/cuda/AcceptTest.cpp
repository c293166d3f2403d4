// The accept-rule kernels on the emulated device against the shared reference: the walk order
// (ascending entropy or descending confidence, ties to the lower position), the entropy budget
// including exact edges (dyadic entropies summing exactly to the bound), thresholds, top-k, the
// mask-absorbing candidate rule, and the convergence test with its stable-step counter.
#include "tests/runtime/cuda/CudaTestSupport.h"
#include "tests/runtime/cuda/EmuKernelConfigs.h"

#include <algorithm>
#include <numeric>

namespace {

using namespace dlm;
using namespace dlm::cudatest;
using codegen::AcceptRule;

void checkAccept(const codegen::AcceptParams &params, std::mt19937 &random, int trial) {
  const codegen::KernelSource kernel = *codegen::generateAccept(params);
  const int canvas = static_cast<int>(params.canvas);
  const int requests = randomInt(random, 1, 3);
  const int rows = requests * canvas;
  const int mask = 4242;
  // Dyadic values (multiples of 1/4) on trial 1: sums are exact and ties are plentiful.
  const bool dyadic = trial == 1;
  std::vector<float> entropy(rows), confidence(rows);
  std::vector<int> argmax(rows), canvasTokens(rows), previous(rows), stable(requests);
  for (int i = 0; i < rows; ++i) {
    entropy[i] = dyadic ? randomInt(random, 0, 12) * 0.25f
                        : std::uniform_real_distribution<float>(0.f, 3.f)(random);
    confidence[i] = dyadic ? randomInt(random, 0, 8) * 0.125f
                           : std::uniform_real_distribution<float>(0.f, 1.f)(random);
    argmax[i] = randomInt(random, 0, 999);
    canvasTokens[i] = randomInt(random, 0, 2) ? mask : randomInt(random, 0, 999);
  }
  for (int r = 0; r < requests; ++r) {
    stable[r] = randomInt(random, 0, 3);
    const bool same = randomInt(random, 0, 1);
    for (int i = 0; i < canvas; ++i)
      previous[r * canvas + i] = same ? argmax[r * canvas + i] : randomInt(random, -1, 999);
    if (!same)
      previous[r * canvas] = -1; // at least one position changed
  }
  const std::vector<int> previousBefore = previous, stableBefore = stable;

  auto isCandidate = [&](int row) { return !params.maskAbsorbing || canvasTokens[row] == mask; };
  // The bound: an exact partial sum of the first request's walk on dyadic trials.
  double bound = std::uniform_real_distribution<double>(0.0, 4.0)(random);
  if (dyadic) {
    std::vector<float> walk;
    for (int i = 0; i < canvas; ++i)
      if (isCandidate(i))
        walk.push_back(entropy[i]);
    std::sort(walk.begin(), walk.end());
    const size_t upTo =
        walk.empty() ? 0
                     : static_cast<size_t>(randomInt(random, 0, static_cast<int>(walk.size()) - 1));
    bound = std::accumulate(walk.begin(), walk.begin() + upTo, 0.0);
  }
  const double threshold = dyadic ? 0.5 : std::uniform_real_distribution<double>(0.2, 0.9)(random);
  const int topK = randomInt(random, 1, canvas + 2);
  const int stability = randomInt(random, 0, 2);
  const double confidenceBound = std::uniform_real_distribution<double>(0.5, 2.5)(random);

  std::vector<unsigned char> keep(rows, 9);
  std::vector<int> converged(requests, -1);
  const float *e = entropy.data(), *c = confidence.data();
  const int *a = argmax.data(), *tokens = canvasTokens.data();
  int *p = previous.data(), *s = stable.data(), *done = converged.data();
  unsigned char *k = keep.data();
  ASSERT_TRUE(launched(emulatedDevice().launchArgs(
      kernel.name, emu::Dim3{static_cast<unsigned>(requests)}, emu::Dim3{kernel.blockThreads}, e, c,
      a, tokens, p, s, k, done, bound, threshold, topK, mask, stability, confidenceBound)));

  for (int r = 0; r < requests; ++r) {
    const int first = r * canvas;
    const std::vector<double> requestEntropy(entropy.begin() + first,
                                             entropy.begin() + first + canvas);
    const std::vector<double> requestConfidence(confidence.begin() + first,
                                                confidence.begin() + first + canvas);
    std::vector<uint8_t> candidate(canvas);
    for (int i = 0; i < canvas; ++i)
      candidate[i] = isCandidate(first + i);
    reference::AcceptKnobs knobs;
    knobs.entropyBound = bound;
    knobs.threshold = threshold;
    knobs.topK = topK;
    const std::vector<uint8_t> want = reference::acceptCanvas(
        referenceAcceptRule(params.rule), requestEntropy, requestConfidence, candidate, knobs);
    for (int i = 0; i < canvas; ++i) {
      ASSERT_EQ(keep[first + i], want[i])
          << kernel.name << " request " << r << " position " << i << " entropy "
          << entropy[first + i] << " confidence " << confidence[first + i] << " bound " << bound;
      ASSERT_EQ(previous[first + i], argmax[first + i]);
    }
    const std::vector<int64_t> requestArgmax(argmax.begin() + first,
                                             argmax.begin() + first + canvas);
    const std::vector<int64_t> requestPrevious(previousBefore.begin() + first,
                                               previousBefore.begin() + first + canvas);
    const reference::Convergence convergence =
        reference::convergenceAfterStep(requestArgmax, requestPrevious, stableBefore[r],
                                        requestEntropy, stability, confidenceBound);
    EXPECT_EQ(stable[r], convergence.stableSteps) << kernel.name << " request " << r;
    EXPECT_EQ(converged[r], convergence.converged ? 1 : 0) << kernel.name << " request " << r;
  }
}

TEST(AcceptKernel, MatchesReference) {
  std::mt19937 random(99);
  for (const codegen::AcceptParams &params : acceptConfigs()) {
    for (int trial = 0; trial < 4; ++trial) {
      SCOPED_TRACE(testing::Message() << codegen::acceptRuleName(params.rule) << " canvas "
                                      << params.canvas << " trial " << trial);
      checkAccept(params, random, trial);
      if (HasFatalFailure())
        return;
    }
  }
}

} // namespace
