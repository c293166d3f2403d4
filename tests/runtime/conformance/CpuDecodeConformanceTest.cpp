// The CPU decoder's policies composed from the shared references, step by step: on a model with
// random logits, every canvas the decoder feeds and every token it commits must be the
// ones the sampler, accept, convergence and renoise references produce, which are the kernels the
// CUDA program chains on the device (sampler -> accept -> renoise). This checks the parts of the
// policies that are not free functions (the convergence test, renoising, the temperature schedule,
// the threshold rule's step cap) against the same definitions the CUDA kernels are held to.
#include "tests/runtime/conformance/KernelReferences.h"
#include "tests/runtime/sampling/FullCachedModel.h"
#include "tests/runtime/sampling/legacy/LegacyDecoding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace dlm::sampling {
namespace {

constexpr int64_t kVocab = 50;
constexpr int32_t kMask = 49;
constexpr int32_t kEos = 48;

// Logits of forward `call` at absolute position p: a per-position profile (sharp, medium or flat,
// so entropies straddle the bound) plus a small per-call jitter, so that argmaxes are stable for
// some steps and not for others. EOS is never likely.
double logitOf(int64_t call, int64_t position, int64_t v) {
  auto unit = [](uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1p-53; };
  const double sharpness = std::vector<double>{9.0, 2.5, 0.4}[position % 3];
  const double base = unit(reference::mix64(static_cast<uint64_t>(position * 1000 + v)));
  const double jitter =
      unit(reference::mix64(static_cast<uint64_t>((call * 7919 + position) * 1000 + v)));
  // Every fourth forward jitters, so argmaxes hold still for a few steps in between.
  const double jitterScale = call % 4 == 0 ? 0.15 : 0.0;
  return v == kEos ? -30.0 : sharpness * base + jitterScale * jitter;
}

class RandomLogitsModel : public dlm::sampling::testing::FullCachedModel {
public:
  std::vector<std::vector<int32_t>> fedCanvases; // tokens of the decoded rows, per forward

  int64_t vocabSize() const override { return kVocab; }
  Status reserve(int64_t, int64_t) override { return Status::ok(); }
  StatusOr<LogitsView> runFull(const int32_t *tokens, int64_t, int64_t, LogitRows rows) override {
    fedCanvases.emplace_back(tokens + rows.begin, tokens + rows.end);
    buffer_.resize(static_cast<size_t>(rows.count() * kVocab));
    const int64_t call = static_cast<int64_t>(fedCanvases.size()) - 1;
    for (int64_t r = 0; r < rows.count(); ++r)
      for (int64_t v = 0; v < kVocab; ++v)
        buffer_[r * kVocab + v] = static_cast<float>(logitOf(call, rows.begin + r, v));
    return LogitsView{buffer_.data(), rows.count(), kVocab};
  }
  StatusOr<LogitsView> runCached(const int32_t *, int64_t, int64_t, LogitRows) override {
    return Status::error("not supported yet: this test model has no cache");
  }

private:
  std::vector<float> buffer_;
};

struct Replay {
  std::vector<std::vector<int32_t>> fedCanvases;
  std::vector<int32_t> output;
  // Canvases that converged after renoising at least once, and canvases that hit the step cap.
  int64_t convergedAfterRenoise = 0;
  int64_t capped = 0;
};

// The entropy-bound policy (runtime/sampling/EntropyBound.cpp, SPECS §1.5) written with the
// references: the glue (temperature schedule, canvas loop) is restated, every decision comes
// from KernelReferences.
Replay replayEntropyBound(const DecodeRequest &request, bool maskNoise) {
  const DecodingKnobs &knobs = request.knobs;
  const reference::NoiseKind noise =
      maskNoise ? reference::NoiseKind::maskToken : reference::NoiseKind::uniform;
  const int64_t excluded = maskNoise ? kMask : -1;
  const int64_t canvasLength = knobs.blockLength;
  Replay replay;
  std::vector<int32_t> sequence(request.prompt);
  uint64_t step = 0;
  for (int64_t c = 0; c < knobs.genLength / canvasLength; ++c) {
    const int64_t start = static_cast<int64_t>(sequence.size());
    std::vector<int32_t> canvas(static_cast<size_t>(canvasLength));
    for (int64_t j = 0; j < canvasLength; ++j)
      canvas[j] = static_cast<int32_t>(reference::noiseToken(
          noise, true, kMask, kVocab, request.seed, request.request, step, start + j));
    std::vector<int64_t> previousArgmax(static_cast<size_t>(canvasLength), -1);
    int64_t stableSteps = 0;
    std::vector<int32_t> committed;
    for (int64_t n = 0; n < knobs.maxSteps; ++n) {
      const double temperature = knobs.tMin + (knobs.tMax - knobs.tMin) *
                                                  static_cast<double>(knobs.maxSteps - n) /
                                                  static_cast<double>(knobs.maxSteps);
      const int64_t call = static_cast<int64_t>(replay.fedCanvases.size());
      replay.fedCanvases.push_back(canvas);
      std::vector<double> entropy(static_cast<size_t>(canvasLength));
      std::vector<int64_t> sampled(entropy.size()), argmax(entropy.size());
      for (int64_t j = 0; j < canvasLength; ++j) {
        std::vector<float> logits(static_cast<size_t>(kVocab));
        for (int64_t v = 0; v < kVocab; ++v)
          logits[v] = static_cast<float>(logitOf(call, start + j, v));
        const uint64_t key = reference::counterKey(request.seed, request.request,
                                                   reference::kGumbelStream, step, start + j);
        const reference::SamplerRow row =
            reference::samplerRow(logits.data(), kVocab, temperature, 0, key, excluded);
        entropy[j] = row.entropy;
        sampled[j] = row.sample;
        argmax[j] = row.argmax;
      }
      reference::AcceptKnobs acceptKnobs;
      acceptKnobs.entropyBound = knobs.entropyBound;
      const std::vector<uint8_t> keep = reference::acceptCanvas(reference::AcceptRule::entropyBound,
                                                                entropy, {}, {}, acceptKnobs);
      const reference::Convergence convergence =
          reference::convergenceAfterStep(argmax, previousArgmax, stableSteps, entropy,
                                          knobs.stabilityThreshold, knobs.confidenceThreshold);
      if (convergence.converged || n == knobs.maxSteps - 1) {
        replay.convergedAfterRenoise += convergence.converged && n > 0;
        replay.capped += !convergence.converged;
        committed.assign(argmax.begin(), argmax.end());
        ++step;
        break;
      }
      for (int64_t j = 0; j < canvasLength; ++j) {
        const int64_t noiseToken = reference::noiseToken(noise, false, kMask, kVocab, request.seed,
                                                         request.request, step, start + j);
        canvas[j] = static_cast<int32_t>(
            reference::renoisedToken(reference::RenoiseCandidates::everyPosition, false, keep[j],
                                     sampled[j], canvas[j], kMask, noiseToken));
      }
      previousArgmax = argmax;
      stableSteps = convergence.stableSteps;
      ++step;
    }
    sequence.insert(sequence.end(), committed.begin(), committed.end());
  }
  replay.output.assign(sequence.begin() + static_cast<int64_t>(request.prompt.size()),
                       sequence.end());
  return replay;
}

TEST(CpuDecodeConformance, EntropyBoundMatchesTheReferenceComposition) {
  TokenFacts facts;
  facts.maskTokenId = kMask;
  facts.eosTokenIds = {kEos};
  int64_t forwards = 0, convergedAfterRenoise = 0, capped = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const bool maskNoise = trial % 2 == 0;
    DecodeRequest request;
    request.prompt = {3, 1, 4, 1, 5};
    request.seed = 1000 + trial;
    request.request = trial;
    request.knobs.policy = Policy::entropyBound;
    request.knobs.blockLength = std::vector<int64_t>{4, 7, 16}[trial % 3];
    request.knobs.genLength = 2 * request.knobs.blockLength;
    request.knobs.maxSteps = 12;
    request.knobs.entropyBound = std::vector<double>{0.1, 0.8, 3.0}[(trial / 2) % 3];
    request.knobs.stabilityThreshold = trial % 4 == 3 ? 0 : 1 + trial % 3;
    // Mean entropies run about 2.8-3.5 nats here: 4 converges once the argmax holds still, 3.3
    // sometimes, 2 never (the step cap).
    request.knobs.confidenceThreshold = std::vector<double>{4.0, 3.3, 2.0}[(trial / 3) % 3];
    request.knobs.noise = maskNoise ? "mask" : "uniform";
    SCOPED_TRACE(::testing::Message()
                 << "trial " << trial << " noise " << request.knobs.noise << " canvas "
                 << request.knobs.blockLength << " bound " << request.knobs.entropyBound
                 << " stability " << request.knobs.stabilityThreshold);

    RandomLogitsModel model;
    StatusOr<DecodeOutcome> outcome = decode(model, facts, request, {});
    ASSERT_TRUE(outcome.isOk()) << outcome.status().message();
    const Replay want = replayEntropyBound(request, maskNoise);
    ASSERT_EQ(model.fedCanvases.size(), want.fedCanvases.size()) << "forward count";
    for (size_t f = 0; f < want.fedCanvases.size(); ++f)
      ASSERT_EQ(model.fedCanvases[f], want.fedCanvases[f]) << "canvas fed to forward " << f;
    ASSERT_EQ(outcome->outputIds, want.output);
    forwards += static_cast<int64_t>(want.fedCanvases.size());
    convergedAfterRenoise += want.convergedAfterRenoise;
    capped += want.capped;
  }
  // The trials exercise renoising, convergence and the step cap, not only one-step canvases.
  EXPECT_GT(convergedAfterRenoise, 2) << forwards << " forwards";
  EXPECT_GT(capped, 2) << forwards << " forwards";
  RecordProperty("forwards", std::to_string(forwards));
  RecordProperty("converged_after_renoise", std::to_string(convergedAfterRenoise));
  RecordProperty("capped", std::to_string(capped));
}

// The low-confidence policy (runtime/sampling/LowConfidence.cpp, SPECS §5) written with the
// references: per step the masked positions of the block are the candidates, the token is the
// sampler's (Gumbel-max at T, argmax when greedy; the mask excluded), the confidence its
// probability at temperature 1, and the accept rule top-k (k from the Fast-dLLM schedule) or the
// confidence threshold (as many steps as the block needs; with a step cap, everything left on
// the cap's step).
Replay replayLowConfidence(const DecodeRequest &request) {
  const DecodingKnobs &knobs = request.knobs;
  const int64_t promptLength = static_cast<int64_t>(request.prompt.size());
  const int64_t blocks = knobs.genLength / knobs.blockLength;
  const int64_t stepsPerBlock = knobs.steps / blocks;
  Replay replay;
  std::vector<int32_t> x(request.prompt);
  x.resize(static_cast<size_t>(promptLength + knobs.genLength), kMask);
  uint64_t step = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = promptLength + b * knobs.blockLength;
    const int64_t end = begin + knobs.blockLength;
    const int64_t masked = std::count(x.begin() + begin, x.begin() + end, kMask);
    for (int64_t i = 0; std::count(x.begin() + begin, x.begin() + end, kMask) > 0; ++i, ++step) {
      const int64_t call = static_cast<int64_t>(replay.fedCanvases.size());
      replay.fedCanvases.emplace_back(x.begin() + begin, x.begin() + end);
      std::vector<int64_t> positions, tokens;
      std::vector<double> confidence;
      for (int64_t p = begin; p < end; ++p) {
        if (x[p] != kMask)
          continue;
        std::vector<float> logits(static_cast<size_t>(kVocab));
        for (int64_t v = 0; v < kVocab; ++v)
          logits[v] = static_cast<float>(logitOf(call, p, v));
        const uint64_t key =
            reference::counterKey(request.seed, request.request, reference::kGumbelStream, step, p);
        const reference::SamplerRow row =
            reference::samplerRow(logits.data(), kVocab, knobs.temperature, 0, key, kMask);
        const reference::SamplerRow plain =
            reference::samplerRow(logits.data(), kVocab, 0, 0, key, kMask);
        positions.push_back(p);
        tokens.push_back(row.sample);
        confidence.push_back(reference::probability(plain, row.sample));
      }
      reference::AcceptKnobs acceptKnobs;
      reference::AcceptRule rule = reference::AcceptRule::topK;
      if (!knobs.threshold) {
        // Fast-dLLM's schedule: masked / steps per step, one more for the first masked % steps.
        acceptKnobs.topK =
            i < stepsPerBlock ? masked / stepsPerBlock + (i < masked % stepsPerBlock ? 1 : 0) : 1;
      } else if (knobs.stepCap && i >= *knobs.stepCap - 1) {
        acceptKnobs.topK = static_cast<int64_t>(positions.size());
      } else {
        rule = reference::AcceptRule::confidenceThreshold;
        acceptKnobs.threshold = *knobs.threshold;
      }
      const std::vector<uint8_t> keep =
          reference::acceptCanvas(rule, {}, confidence, {}, acceptKnobs);
      for (size_t c = 0; c < positions.size(); ++c)
        if (keep[c])
          x[positions[c]] = static_cast<int32_t>(tokens[c]);
    }
  }
  replay.output.assign(x.begin() + promptLength, x.end());
  return replay;
}

TEST(CpuDecodeConformance, LowConfidenceMatchesTheReferenceComposition) {
  TokenFacts facts;
  facts.maskTokenId = kMask;
  facts.eosTokenIds = {kEos};
  int64_t forwards = 0;
  for (int trial = 0; trial < 12; ++trial) {
    DecodeRequest request;
    request.prompt = {2, 7, 1, 8};
    request.seed = 77 + trial;
    request.request = trial;
    request.knobs.policy = Policy::lowConfidence;
    request.knobs.blockLength = std::vector<int64_t>{5, 8, 16}[trial % 3];
    request.knobs.genLength = 2 * request.knobs.blockLength;
    request.knobs.steps = std::vector<int64_t>{4, 6, 2 * request.knobs.blockLength}[trial % 3];
    request.knobs.temperature = std::vector<double>{0.0, 0.7, 1.3}[(trial / 3) % 3];
    if (trial % 2)
      request.knobs.threshold = std::vector<double>{0.3, 0.6, 0.9}[(trial / 2) % 3];
    if (trial % 4 == 3)
      request.knobs.stepCap = 2;
    SCOPED_TRACE(::testing::Message()
                 << "trial " << trial << " block " << request.knobs.blockLength << " steps "
                 << request.knobs.steps << " T " << request.knobs.temperature << " threshold "
                 << request.knobs.threshold.value_or(-1) << " step cap "
                 << request.knobs.stepCap.value_or(-1));

    RandomLogitsModel model;
    StatusOr<DecodeOutcome> outcome = decode(model, facts, request, {});
    ASSERT_TRUE(outcome.isOk()) << outcome.status().message();
    const Replay want = replayLowConfidence(request);
    ASSERT_EQ(model.fedCanvases.size(), want.fedCanvases.size()) << "forward count";
    for (size_t f = 0; f < want.fedCanvases.size(); ++f)
      ASSERT_EQ(model.fedCanvases[f], want.fedCanvases[f]) << "block fed to forward " << f;
    ASSERT_EQ(outcome->outputIds, want.output);
    forwards += static_cast<int64_t>(want.fedCanvases.size());
  }
  RecordProperty("forwards", std::to_string(forwards));
}

} // namespace
} // namespace dlm::sampling
