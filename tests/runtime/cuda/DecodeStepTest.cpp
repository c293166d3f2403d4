// One canvas decoded step by step on the emulated device with the sampler, accept and renoise
// kernels that decodingKernels picks for each policy (ModelKernels.cpp), against the reference
// composition CpuDecodeConformanceTest holds the CPU decoder to. It covers the two places where
// the kernels once disagreed with the CPU: low-confidence ranks masked positions by the chosen
// token's probability at temperature 1 (sampled at T), and the entropy-bound canvas renoises
// every rejected position, with mask noise too. Each test also counts how often the other
// choice would have decided differently, so that it is known to tell them apart.
#include "tests/runtime/cuda/CudaTestSupport.h"
#include "tests/runtime/cuda/EmuKernelConfigs.h"

#include <algorithm>
#include <numeric>

namespace {

using namespace dlm;
using namespace dlm::cudatest;

constexpr int kVocab = 500; // the renoise configs' vocabulary
constexpr int kMask = 499;

struct RequestCounters {
  unsigned long long seed = 0;
  unsigned long long id = 0;
  long long step = 0;
};

struct SamplerOutputs {
  std::vector<int> sampled, argmax;
  std::vector<float> entropy, confidence;
};

codegen::SamplerParams samplerFor(codegen::SamplerConfidence confidence) {
  for (const codegen::SamplerParams &params : samplerConfigs())
    if (params.vocab == kVocab && params.confidence == confidence && !params.softmaxStatistics)
      return params;
  ADD_FAILURE() << "no emulated sampler for vocab " << kVocab;
  return {};
}

codegen::AcceptParams acceptFor(codegen::AcceptRule rule, bool maskAbsorbing) {
  for (const codegen::AcceptParams &params : acceptConfigs())
    if (params.rule == rule && params.maskAbsorbing == maskAbsorbing)
      return params;
  ADD_FAILURE() << "no emulated accept kernel " << codegen::acceptRuleName(rule);
  return {};
}

// Logits of one step's canvas rows: flat, medium and sharp rows, so that ranking by the
// probability at T or at 1 and entropies around the bound both occur.
std::vector<float> canvasLogits(std::mt19937 &random, int rows) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> logits(static_cast<size_t>(rows) * kVocab);
  for (int row = 0; row < rows; ++row) {
    const float sharpness = std::vector<float>{0.3f, 1.5f, 4.f}[randomInt(random, 0, 2)];
    for (int v = 0; v < kVocab; ++v)
      logits[static_cast<size_t>(row) * kVocab + v] = normal(random) * sharpness;
  }
  return logits;
}

// `base` plus a little noise: the argmax canvas holds still between jittered steps.
std::vector<float> jittered(const std::vector<float> &base, std::mt19937 &random, float scale) {
  std::normal_distribution<float> normal(0.f, scale);
  std::vector<float> logits = base;
  if (scale > 0.f)
    for (float &logit : logits)
      logit += normal(random);
  return logits;
}

SamplerOutputs launchSampler(const codegen::SamplerParams &params, const std::vector<float> &logits,
                             int rows, int firstPosition, const RequestCounters &request,
                             float temperature, int excluded) {
  SamplerOutputs out{std::vector<int>(rows, -2), std::vector<int>(rows, -2),
                     std::vector<float>(rows, -1.f), std::vector<float>(rows, -1.f)};
  std::vector<int> rowRequest(rows, 0), rowPosition(rows);
  std::iota(rowPosition.begin(), rowPosition.end(), firstPosition);
  const float *logitArg = logits.data();
  const long long stride = kVocab;
  const int *requestArg = rowRequest.data(), *positionArg = rowPosition.data();
  const unsigned long long *seedArg = &request.seed, *idArg = &request.id;
  const long long *stepArg = &request.step;
  const float *temperatureArg = &temperature;
  int *sampledArg = out.sampled.data(), *argmaxArg = out.argmax.data();
  float *entropyArg = out.entropy.data(), *confidenceArg = out.confidence.data();
  EXPECT_TRUE(emulatedDevice().launchArgs(
      kernelName(codegen::generateSampler, params), emu::Dim3{static_cast<unsigned>(rows)},
      emu::Dim3{static_cast<unsigned>(params.threads)}, logitArg, stride, rows, requestArg,
      positionArg, seedArg, idArg, stepArg, temperatureArg, excluded, sampledArg, argmaxArg,
      entropyArg, confidenceArg));
  return out;
}

struct AcceptKnobs {
  double bound = 0, threshold = 0;
  int topK = 0, stability = 0;
  double confidenceBound = 0;
};

// keep per position; previousArgmax, stableSteps and converged are the request's device state.
std::vector<unsigned char> launchAccept(const codegen::AcceptParams &params,
                                        const SamplerOutputs &step, const std::vector<int> &canvas,
                                        std::vector<int> &previousArgmax, int &stableSteps,
                                        int &converged, const AcceptKnobs &knobs) {
  const codegen::KernelSource kernel = *codegen::generateAccept(params);
  std::vector<unsigned char> keep(canvas.size(), 9);
  const float *e = step.entropy.data(), *c = step.confidence.data();
  const int *a = step.argmax.data(), *tokens = canvas.data();
  int *p = previousArgmax.data(), *s = &stableSteps, *done = &converged;
  unsigned char *k = keep.data();
  EXPECT_TRUE(emulatedDevice().launchArgs(kernel.name, emu::Dim3{1},
                                          emu::Dim3{kernel.blockThreads}, e, c, a, tokens, p, s, k,
                                          done, knobs.bound, knobs.threshold, knobs.topK, kMask,
                                          knobs.stability, knobs.confidenceBound));
  return keep;
}

void launchRenoise(const codegen::RenoiseParams &params, const std::vector<unsigned char> &keep,
                   const std::vector<int> &sampled, std::vector<int> &canvas, int firstPosition,
                   const RequestCounters &request) {
  const int rows = static_cast<int>(canvas.size());
  std::vector<int> rowRequest(rows, 0), rowPosition(rows);
  std::iota(rowPosition.begin(), rowPosition.end(), firstPosition);
  const unsigned char *keepArg = keep.data();
  const int *sampledArg = sampled.data(), *requestArg = rowRequest.data(),
            *positionArg = rowPosition.data();
  int *canvasArg = canvas.data();
  const unsigned long long *seedArg = &request.seed, *idArg = &request.id;
  const long long *stepArg = &request.step;
  EXPECT_TRUE(emulatedDevice().launchArgs(
      kernelName(codegen::generateRenoise, params),
      emu::Dim3{static_cast<unsigned>((rows + 255) / 256)}, emu::Dim3{256}, rows, keepArg,
      sampledArg, canvasArg, requestArg, positionArg, seedArg, idArg, stepArg, kMask));
}

uint64_t gumbelKey(const RequestCounters &request, int position) {
  return reference::counterKey(request.seed, request.id, reference::kGumbelStream,
                               static_cast<uint64_t>(request.step),
                               static_cast<uint64_t>(position));
}

TEST(DeviceDecodeStep, LowConfidenceRanksByTheTemperatureOneConfidence) {
  std::mt19937 random(5);
  const codegen::SamplerParams sampler = samplerFor(codegen::SamplerConfidence::unitTemperature);
  const codegen::RenoiseParams remask{kVocab, codegen::NoiseKind::maskToken, false,
                                      codegen::RenoiseCandidates::maskedOnly};
  int steps = 0, decisionsThatDependOnIt = 0;
  for (int trial = 0; trial < 6; ++trial) {
    const bool byThreshold = trial % 2 == 1;
    const codegen::AcceptParams accept = acceptFor(
        byThreshold ? codegen::AcceptRule::confidenceThreshold : codegen::AcceptRule::topK, true);
    const int canvasLength = static_cast<int>(accept.canvas);
    const float temperature = std::vector<float>{0.7f, 1.3f, 0.4f}[trial % 3];
    const int first = 11 + trial;
    RequestCounters request{random(), static_cast<unsigned long long>(trial), 0};
    std::vector<int> canvas(canvasLength, kMask), previousArgmax(canvasLength, -1);
    int stableSteps = 0, converged = -1;
    SCOPED_TRACE(testing::Message() << "trial " << trial << " T " << temperature);

    for (int n = 0; std::count(canvas.begin(), canvas.end(), kMask) > 0 && n < 40;
         ++n, ++request.step, ++steps) {
      const std::vector<float> logits = canvasLogits(random, canvasLength);
      const SamplerOutputs got =
          launchSampler(sampler, logits, canvasLength, first, request, temperature, kMask);

      std::vector<uint8_t> candidate(canvasLength);
      std::vector<int64_t> sample(canvasLength);
      std::vector<double> unitConfidence(canvasLength), confidenceAtT(canvasLength);
      for (int j = 0; j < canvasLength; ++j) {
        candidate[j] = canvas[j] == kMask;
        const float *row = logits.data() + static_cast<size_t>(j) * kVocab;
        const uint64_t key = gumbelKey(request, first + j);
        const reference::SamplerRow atT =
            reference::samplerRow(row, kVocab, temperature, 0, key, kMask);
        const reference::SamplerRow unit = reference::samplerRow(row, kVocab, 0, 0, key, kMask);
        sample[j] = atT.sample;
        unitConfidence[j] = reference::probability(unit, atT.sample);
        confidenceAtT[j] = reference::probability(atT, atT.sample);
        if (!candidate[j])
          continue;
        ASSERT_EQ(got.sampled[j], sample[j]) << "step " << n << " position " << j;
        ASSERT_TRUE(near(got.confidence[j], unitConfidence[j], 1e-6, 1e-4,
                         "confidence at step " + std::to_string(n)));
      }
      AcceptKnobs knobs;
      reference::AcceptKnobs referenceKnobs;
      // Fast-dLLM's threshold, and threshold 0 (everything left) from the sixth step.
      knobs.threshold = referenceKnobs.threshold = n >= 5 ? 0.0 : 0.25;
      knobs.topK = randomInt(random, 1, 4);
      referenceKnobs.topK = knobs.topK;
      const reference::AcceptRule rule = referenceAcceptRule(accept.rule);
      const std::vector<uint8_t> want =
          reference::acceptCanvas(rule, {}, unitConfidence, candidate, referenceKnobs);
      decisionsThatDependOnIt +=
          want != reference::acceptCanvas(rule, {}, confidenceAtT, candidate, referenceKnobs);
      const std::vector<unsigned char> keep = launchAccept(accept, got, canvas, previousArgmax,
                                                           stableSteps, converged, knobs);
      std::vector<int> next(canvasLength);
      for (int j = 0; j < canvasLength; ++j) {
        ASSERT_EQ(keep[j], want[j]) << "step " << n << " position " << j;
        next[j] = static_cast<int>(reference::renoisedToken(
            reference::RenoiseCandidates::maskedOnly, false, want[j], sample[j], canvas[j], kMask,
            kMask));
      }
      launchRenoise(remask, keep, got.sampled, canvas, first, request);
      ASSERT_EQ(canvas, next) << "canvas after step " << n;
    }
    EXPECT_EQ(std::count(canvas.begin(), canvas.end(), kMask), 0);
  }
  // Ranking by the probability at T would have kept other positions in some steps.
  EXPECT_GT(decisionsThatDependOnIt, 0) << "of " << steps << " steps";
  RecordProperty("steps", std::to_string(steps));
  RecordProperty("steps_where_ranking_at_T_differs", std::to_string(decisionsThatDependOnIt));
}

TEST(DeviceDecodeStep, EntropyBoundRenoisesEveryRejectedPosition) {
  std::mt19937 random(17);
  const codegen::SamplerParams sampler = samplerFor(codegen::SamplerConfidence::atTemperature);
  const codegen::AcceptParams accept = acceptFor(codegen::AcceptRule::entropyBound, false);
  const int canvasLength = static_cast<int>(accept.canvas);
  const int maxSteps = 8;
  const double tMin = 0.4, tMax = 0.8;
  int maskedTokensKept = 0, convergedSteps = 0;
  for (int trial = 0; trial < 6; ++trial) {
    const bool maskNoise = trial % 2 == 0;
    const codegen::NoiseKind noise =
        maskNoise ? codegen::NoiseKind::maskToken : codegen::NoiseKind::uniform;
    const int excluded = maskNoise ? kMask : -1;
    const int first = 5 + 3 * trial;
    RequestCounters request{random(), static_cast<unsigned long long>(trial), 0};
    AcceptKnobs knobs;
    knobs.bound = std::vector<double>{0.1, 0.8, 3.0}[(trial / 2) % 3];
    knobs.stability = 1;
    // Mean entropies run about 3-5 nats here: 7 converges once the argmax holds still, 1 never.
    knobs.confidenceBound = std::vector<double>{7.0, 1.0}[(trial / 2) % 2];
    SCOPED_TRACE(testing::Message() << "trial " << trial << " noise "
                                    << codegen::noiseKindName(noise) << " bound " << knobs.bound);

    std::vector<int> canvas(canvasLength, -7);
    launchRenoise({kVocab, noise, true}, std::vector<unsigned char>(canvasLength, 0),
                  std::vector<int>(canvasLength, 0), canvas, first, request);
    for (int j = 0; j < canvasLength; ++j)
      ASSERT_EQ(canvas[j], reference::noiseToken(referenceNoise(noise), true, kMask, kVocab,
                                                 request.seed, request.id, 0, first + j));
    std::vector<int> previousArgmax(canvasLength, -1);
    std::vector<int64_t> referencePrevious(canvasLength, -1);
    int stableSteps = 0, converged = -1;
    int64_t referenceStable = 0;
    const std::vector<float> base = canvasLogits(random, canvasLength);

    for (int n = 0; n < maxSteps; ++n, ++request.step) {
      // The device reads the temperature as a float; the reference takes that same value.
      const float temperature =
          static_cast<float>(tMin + (tMax - tMin) * (maxSteps - n) / maxSteps);
      // Every third step jitters the logits, so the argmax changes now and then.
      const std::vector<float> logits = jittered(base, random, n % 3 == 0 ? 0.3f : 0.f);
      const SamplerOutputs got =
          launchSampler(sampler, logits, canvasLength, first, request, temperature, excluded);
      std::vector<double> entropy(canvasLength);
      std::vector<int64_t> sample(canvasLength), argmax(canvasLength);
      for (int j = 0; j < canvasLength; ++j) {
        const reference::SamplerRow row = reference::samplerRow(
            logits.data() + static_cast<size_t>(j) * kVocab, kVocab, temperature, 0,
            gumbelKey(request, first + j), excluded);
        entropy[j] = row.entropy;
        sample[j] = row.sample;
        argmax[j] = row.argmax;
        ASSERT_EQ(got.sampled[j], sample[j]) << "step " << n << " position " << j;
        ASSERT_EQ(got.argmax[j], argmax[j]) << "step " << n << " position " << j;
        ASSERT_TRUE(near(got.entropy[j], entropy[j], 2e-4, 1e-3, "entropy"));
      }
      reference::AcceptKnobs referenceKnobs;
      referenceKnobs.entropyBound = knobs.bound;
      const std::vector<uint8_t> want = reference::acceptCanvas(reference::AcceptRule::entropyBound,
                                                                entropy, {}, {}, referenceKnobs);
      const reference::Convergence convergence = reference::convergenceAfterStep(
          argmax, referencePrevious, referenceStable, entropy, knobs.stability,
          knobs.confidenceBound);
      const std::vector<unsigned char> keep = launchAccept(accept, got, canvas, previousArgmax,
                                                           stableSteps, converged, knobs);
      ASSERT_EQ(stableSteps, convergence.stableSteps) << "step " << n;
      ASSERT_EQ(converged, convergence.converged ? 1 : 0) << "step " << n;
      convergedSteps += convergence.converged;
      referencePrevious = argmax;
      referenceStable = convergence.stableSteps;

      std::vector<int> next(canvasLength);
      for (int j = 0; j < canvasLength; ++j) {
        ASSERT_EQ(keep[j], want[j]) << "step " << n << " position " << j;
        const int64_t noiseToken =
            reference::noiseToken(referenceNoise(noise), false, kMask, kVocab, request.seed,
                                  request.id, static_cast<uint64_t>(request.step), first + j);
        next[j] = static_cast<int>(reference::renoisedToken(
            reference::RenoiseCandidates::everyPosition, false, want[j], sample[j], canvas[j],
            kMask, noiseToken));
        // Masked-only candidates would have left this rejected token in place.
        maskedTokensKept += maskNoise && !want[j] && canvas[j] != kMask;
      }
      launchRenoise({kVocab, noise, false, codegen::RenoiseCandidates::everyRejected}, keep,
                    got.sampled, canvas, first, request);
      ASSERT_EQ(canvas, next) << "canvas after step " << n;
    }
  }
  EXPECT_GT(maskedTokensKept, 0) << "no step re-masked a sampled token";
  EXPECT_GT(convergedSteps, 0) << "no step converged";
  RecordProperty("remasked_tokens", std::to_string(maskedTokensKept));
  RecordProperty("converged_steps", std::to_string(convergedSteps));
}

} // namespace
