// The entropy-bound policy (DiffusionGemma, SPECS §1.5) on a mask-absorbing model, as
// tests/reference/samplers.py `entropy_bound` runs it. Per canvas of block_length positions
// (initialised to the mask token, or to counter-RNG tokens for uniform noise), for n < S:
//
//   T_n = t_min + (t_max - t_min)(S - n)/S; z = logits / T_n; H = entropy(softmax z);
//   x_samp = argmax(z + gumbel), x_arg = argmax z (mask excluded);
//   accept by ascending H while the entropy accepted before stays <= entropy_bound (the lowest
//   always); accepted positions take x_samp, the others are renoised;
//   converged when x_arg equals each of the last stability_threshold argmax canvases and
//   mean H < confidence_threshold, or at n = S - 1; then x_arg is committed.
//
// Without a cache every step is a full forward over prompt ++ committed ++ canvas; with the
// prefix cache one extra forward per canvas computes the K/V of prompt ++ committed (minus one
// position for a logit shift), which does not decode and so does not advance the RNG step.
#include "runtime/sampling/CounterRng.h"
#include "tests/runtime/sampling/legacy/LegacyDecoding.h"
#include "runtime/sampling/SamplingMath.h"

#include <algorithm>

namespace dlm::sampling {

namespace {

// T_n, in the order of the records' ALU chain (and of the host loop below).
double temperatureOf(const DecodingKnobs &knobs, int64_t n) {
  return knobs.tMin + (knobs.tMax - knobs.tMin) * static_cast<double>(knobs.maxSteps - n) /
                          static_cast<double>(knobs.maxSteps);
}

// Step n of a canvas as the records of the entropy-bound program resolve it.
StepPlan stepPlan(const DecodeRequest &request, bool maskNoise, int64_t excluded, int64_t start,
                  int64_t end, int64_t keep, int64_t globalStep, int64_t n) {
  const DecodingKnobs &knobs = request.knobs;
  const bool prefix = request.cache == CacheMode::prefix;
  StepPlan plan;
  plan.forward.mode = prefix ? ForwardStep::Mode::cached : ForwardStep::Mode::full;
  plan.forward.count = end;
  plan.forward.keep = prefix ? keep : 0;
  plan.forward.rowBegin = start;
  plan.forward.rowEnd = end;
  plan.sample.kind = SampleStep::Kind::tempered;
  plan.sample.temperature = temperatureOf(knobs, n);
  plan.sample.excluded = excluded;
  plan.sample.rngStep = globalStep;
  AcceptStep &accept = plan.accept;
  accept.rule = AcceptStep::Rule::entropyBound;
  accept.bound = knobs.entropyBound;
  accept.candidates = AcceptStep::Candidates::all;
  accept.converge = AcceptStep::Converge::stableConfident;
  accept.stability = knobs.stabilityThreshold;
  accept.confidence = knobs.confidenceThreshold;
  plan.gate.rule = GateStep::Rule::convergedOrLast;
  plan.gate.last = n == knobs.maxSteps - 1;
  plan.renoise.noise = maskNoise ? RenoiseStep::Noise::mask : RenoiseStep::Noise::uniform;
  plan.renoise.candidates = RenoiseStep::Candidates::everyRejected;
  plan.renoise.rngStep = globalStep;
  return plan;
}

// The canvas at the end of `work` from `start`, its first step being the request's
// `firstStep`th; max_steps steps at most, the last one committing the argmax canvas.
LoopPlan canvasPlan(const DecodeRequest &request, const std::vector<int32_t> &work, int32_t mask,
                    int64_t excluded, bool maskNoise, int64_t start, int64_t firstStep,
                    int64_t keep) {
  const DecodingKnobs &knobs = request.knobs;
  const int64_t end = static_cast<int64_t>(work.size());
  LoopPlan plan;
  for (int64_t n = 0; n < knobs.maxSteps; ++n)
    plan.steps.push_back(
        stepPlan(request, maskNoise, excluded, start, end, keep, firstStep + n, n));
  plan.capped = true;
  plan.sequence = work.data();
  plan.total = end;
  plan.begin = start;
  plan.end = end;
  plan.maskToken = mask;
  plan.seed = request.seed;
  plan.request = request.request;
  plan.unroll = knobs.unrollSteps;
  return plan;
}

} // namespace

Status runEntropyBound(ForwardRunner &runner, DecodeModel &model, const TokenFacts &facts,
                       const DecodeRequest &request, const BlockCallback &onBlock,
                       DecodeOutcome &outcome) {
  const DecodingKnobs &knobs = request.knobs;
  const int64_t promptLength = static_cast<int64_t>(request.prompt.size());
  const int64_t canvasLength = knobs.blockLength;
  const int64_t canvases = knobs.genLength / canvasLength;
  const int64_t maxSteps = knobs.maxSteps;
  const int64_t shift = facts.logitShift ? 1 : 0;
  const int64_t vocab = model.vocabSize();
  const bool maskNoise = knobs.noise.empty() ? facts.maskTokenId >= 0 : knobs.noise == "mask";
  const int64_t excluded = maskNoise ? facts.maskTokenId : kNoExcludedToken;
  const int32_t mask = static_cast<int32_t>(facts.maskTokenId);

  // prompt ++ committed canvases ++ the canvas being denoised.
  std::vector<int32_t> work(request.prompt);
  work.reserve(static_cast<size_t>(promptLength + knobs.genLength));

  std::vector<double> entropy(canvasLength);
  std::vector<int32_t> sampled(canvasLength), argmax(canvasLength);
  std::vector<int64_t> order;
  std::vector<uint8_t> accepted;
  // The last stability_threshold argmax canvases, oldest first; -1 before any step.
  std::vector<std::vector<int32_t>> history(static_cast<size_t>(knobs.stabilityThreshold));

  auto noiseToken = [&](rng::Stream stream, int64_t step, int64_t position) {
    if (maskNoise)
      return mask;
    return static_cast<int32_t>(
        rng::randomToken(rng::key(request.seed, request.request, stream, step, position), vocab));
  };

  int64_t step = 0;
  for (int64_t c = 0; c < canvases; ++c) {
    profile::Scope blockTimer = runner.scope(profile::Category::block, "canvas", c);
    const int64_t start = static_cast<int64_t>(work.size());
    const int64_t end = start + canvasLength;
    const int64_t keep = start - shift;
    for (int64_t j = 0; j < canvasLength; ++j)
      work.push_back(noiseToken(rng::kStreamInit, step, start + j));
    for (std::vector<int32_t> &past : history)
      past.assign(canvasLength, -1);

    if (request.cache == CacheMode::prefix) {
      StatusOr<LogitsView> prefix = runner.full(work, keep, keep, LogitRows{0, 0}, false);
      if (!prefix)
        return prefix.status();
    }

    // The whole canvas on the model's device when it can (same decisions, no host round trip
    // per step); the host loop below otherwise.
    const LoopPlan loop = canvasPlan(request, work, mask, excluded, maskNoise, start, step, keep);
    StatusOr<std::optional<int64_t>> deviceSteps =
        runner.denoiseBlockOnDevice(loop, work.data() + start);
    if (!deviceSteps)
      return deviceSteps.status();
    if (*deviceSteps)
      step += **deviceSteps;

    for (int64_t n = 0; !*deviceSteps && n < maxSteps; ++n) {
      profile::Scope stepTimer = runner.scope(profile::Category::step, "denoise_step", step);
      const double temperature = temperatureOf(knobs, n);
      StatusOr<LogitsView> rows =
          request.cache == CacheMode::none
              ? runner.full(work, end, 0, LogitRows{start, end})
              : runner.cached(work, end, keep, LogitRows{start - keep, end - keep});
      if (!rows)
        return rows.status();

      const uint64_t gumbelStep =
          rng::stepKey(request.seed, request.request, rng::kStreamGumbel, step);
      double entropySum = 0;
      for (int64_t j = 0; j < canvasLength; ++j) {
        TemperedRow row = temperedRow(rows->row(j), vocab, temperature,
                                      rng::positionKey(gumbelStep, start + j), excluded);
        entropy[j] = row.entropy;
        sampled[j] = row.sample;
        argmax[j] = row.argmax;
        entropySum += row.entropy;
      }
      entropyAccept(entropy, knobs.entropyBound, order, accepted);
      const bool stable =
          std::all_of(history.begin(), history.end(),
                      [&](const std::vector<int32_t> &past) { return past == argmax; });
      const bool confident =
          entropySum / static_cast<double>(canvasLength) < knobs.confidenceThreshold;
      if ((stable && confident) || n == maxSteps - 1) {
        std::copy(argmax.begin(), argmax.end(), work.begin() + start);
        ++step;
        break;
      }
      for (int64_t j = 0; j < canvasLength; ++j)
        work[start + j] =
            accepted[j] ? sampled[j] : noiseToken(rng::kStreamRenoise, step, start + j);
      if (!history.empty()) {
        std::rotate(history.begin(), history.begin() + 1, history.end());
        history.back() = argmax;
      }
      ++step;
    }

    ++outcome.blocks;
    if (reportBlock(work, start, end, c, c + 1 == canvases, facts, onBlock))
      break;
  }
  outcome.decodeSteps = step;
  finishOutput(work, request.prompt.size(), facts, outcome);
  return Status::ok();
}

} // namespace dlm::sampling
