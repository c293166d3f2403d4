// The low-confidence policy (LLaDA's reference sampler, Fast-dLLM's `generate`, SPECS §5) as
// tests/reference/samplers.py `low_confidence` runs it:
//
//   x = prompt ++ gen_length masks, blocks of block_length left to right, steps/blocks steps each.
//   A step: forward; candidates = masked positions of the current block; x0 = argmax(logits +
//   T * gumbel) (mask excluded), conf = softmax(logits)[x0]; unmask the k most confident (ties:
//   lower position). Fixed count: k from num_transfer_tokens over the block's masks. Threshold
//   (Fast-dLLM, dInfer, SGLang): every candidate with conf >= threshold, at least one, for as
//   many steps as the block needs, whatever `steps` says; with the step_cap knob, step
//   step_cap takes all that remain. The block ends when it has no masks; a block holding EOS
//   ends generation.
//   Prefix cache: the block's first step is a full forward keeping K/V of [0, block_start)
//   ([0, block_start - 1) with a logit shift, whose chunk then starts one position early so the
//   shifted row of block_start is exact); later steps feed x[keep:] over that cache.
#include "runtime/sampling/CounterRng.h"
#include "tests/runtime/sampling/legacy/LegacyDecoding.h"
#include "runtime/sampling/SamplingMath.h"

#include <algorithm>

namespace dlm::sampling {

namespace {

// Step i of a block as the records of the low-confidence program resolve it (see the host loop
// below for the same decisions).
StepPlan stepPlan(const DecodeRequest &request, int32_t mask, int64_t begin, int64_t end,
                  int64_t globalStep, int64_t i, const std::vector<int64_t> &schedule,
                  int64_t keep) {
  const DecodingKnobs &knobs = request.knobs;
  const bool prefix = request.cache == CacheMode::prefix;
  const int64_t total = static_cast<int64_t>(request.prompt.size()) + knobs.genLength;
  StepPlan plan;
  plan.forward.mode = prefix && i > 0 ? ForwardStep::Mode::cached : ForwardStep::Mode::full;
  plan.forward.count = total;
  plan.forward.keep = prefix ? keep : 0;
  plan.forward.rowBegin = begin;
  plan.forward.rowEnd = end;
  plan.sample.kind = SampleStep::Kind::gumbelMax;
  plan.sample.temperature = knobs.temperature;
  plan.sample.excluded = mask;
  plan.sample.rngStep = globalStep;
  AcceptStep &accept = plan.accept;
  accept.candidates = AcceptStep::Candidates::masked;
  if (!knobs.threshold) {
    accept.rule = AcceptStep::Rule::topK;
    accept.k = i < static_cast<int64_t>(schedule.size()) ? schedule[i] : 1;
  } else if (knobs.stepCap && i >= *knobs.stepCap - 1) {
    // The explicit step cap: every candidate left (k = block_length >= candidates).
    accept.rule = AcceptStep::Rule::topK;
    accept.k = knobs.blockLength;
  } else {
    accept.rule = AcceptStep::Rule::threshold;
    accept.threshold = *knobs.threshold;
  }
  plan.gate.rule = GateStep::Rule::noMaskLeft;
  plan.renoise.noise = RenoiseStep::Noise::mask;
  plan.renoise.candidates = RenoiseStep::Candidates::maskedOnly;
  plan.renoise.rngStep = globalStep;
  return plan;
}

// The block [begin, end) of `x`, its first step being the request's `firstStep`th. The loop
// stops at the step cap: steps per block with a fixed count, step_cap with a threshold; never
// past block_length steps, as each step unmasks at least one position (a bound, not a cap).
LoopPlan blockPlan(const DecodeRequest &request, const std::vector<int32_t> &x, int32_t mask,
                   int64_t begin, int64_t end, int64_t firstStep,
                   const std::vector<int64_t> &schedule, int64_t stepsPerBlock, int64_t keep) {
  const DecodingKnobs &knobs = request.knobs;
  const int64_t blockLength = knobs.blockLength;
  const std::optional<int64_t> cap =
      knobs.threshold ? knobs.stepCap : std::optional<int64_t>(stepsPerBlock);
  LoopPlan plan;
  plan.capped = cap && *cap <= blockLength;
  const int64_t steps = plan.capped ? *cap : blockLength;
  for (int64_t i = 0; i < steps; ++i)
    plan.steps.push_back(stepPlan(request, mask, begin, end, firstStep + i, i, schedule, keep));
  plan.sequence = x.data();
  plan.total = static_cast<int64_t>(x.size());
  plan.begin = begin;
  plan.end = end;
  plan.maskToken = mask;
  plan.seed = request.seed;
  plan.request = request.request;
  plan.unroll = knobs.unrollSteps;
  return plan;
}

} // namespace

Status runLowConfidence(ForwardRunner &runner, DecodeModel &model, const TokenFacts &facts,
                        const DecodeRequest &request, const BlockCallback &onBlock,
                        DecodeOutcome &outcome) {
  const DecodingKnobs &knobs = request.knobs;
  const int64_t promptLength = static_cast<int64_t>(request.prompt.size());
  const int64_t total = promptLength + knobs.genLength;
  const int64_t blockLength = knobs.blockLength;
  const int64_t blocks = knobs.genLength / blockLength;
  const int64_t stepsPerBlock = knobs.steps / blocks;
  const int32_t mask = static_cast<int32_t>(facts.maskTokenId);
  const int64_t shift = facts.logitShift ? 1 : 0;
  const int64_t vocab = model.vocabSize();

  std::vector<int32_t> x(request.prompt);
  x.resize(static_cast<size_t>(total), mask);

  // Per-step scratch, sized once.
  std::vector<int64_t> positions, order;
  std::vector<double> confidence;
  std::vector<int32_t> proposal;
  positions.reserve(blockLength);
  order.reserve(blockLength);
  confidence.reserve(blockLength);
  proposal.reserve(blockLength);

  int64_t step = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    profile::Scope blockTimer = runner.scope(profile::Category::block, "block", b);
    const int64_t begin = promptLength + b * blockLength;
    const int64_t end = begin + blockLength;
    auto blockHasMask = [&] {
      return std::find(x.begin() + begin, x.begin() + end, mask) != x.begin() + end;
    };
    const int64_t masked = std::count(x.begin() + begin, x.begin() + end, mask);
    const std::vector<int64_t> schedule = numTransferTokens(masked, stepsPerBlock);
    const int64_t keep = begin - shift;

    // The whole block on the model's device when it can (same decisions, no host round trip
    // per step); the host loop below otherwise.
    const LoopPlan loop =
        blockPlan(request, x, mask, begin, end, step, schedule, stepsPerBlock, keep);
    std::optional<int64_t> deviceSteps;
    if (masked > 0) {
      StatusOr<std::optional<int64_t>> ran = runner.denoiseBlockOnDevice(loop, x.data() + begin);
      if (!ran)
        return ran.status();
      deviceSteps = *ran;
    }
    if (deviceSteps)
      step += *deviceSteps;

    for (int64_t i = 0; !deviceSteps && blockHasMask(); ++i, ++step) {
      profile::Scope stepTimer = runner.scope(profile::Category::step, "denoise_step", step);
      StatusOr<LogitsView> rows =
          (request.cache == CacheMode::none || i == 0)
              ? runner.full(x, total, request.cache == CacheMode::prefix ? keep : 0,
                            LogitRows{begin, end})
              : runner.cached(x, total, keep, LogitRows{begin - keep, end - keep});
      if (!rows)
        return rows.status();

      positions.clear();
      confidence.clear();
      proposal.clear();
      const uint64_t gumbelStep =
          rng::stepKey(request.seed, request.request, rng::kStreamGumbel, step);
      for (int64_t j = 0; j < blockLength; ++j) {
        if (x[begin + j] != mask)
          continue;
        const int64_t position = begin + j;
        RowDecision decision = decodeRow(rows->row(j), vocab, knobs.temperature,
                                         rng::positionKey(gumbelStep, position), mask);
        positions.push_back(position);
        confidence.push_back(decision.confidence);
        proposal.push_back(decision.token);
      }
      confidenceOrder(confidence, positions, order);

      const int64_t candidates = static_cast<int64_t>(positions.size());
      int64_t take;
      if (!knobs.threshold) {
        take = i < static_cast<int64_t>(schedule.size()) ? schedule[i] : 1;
      } else if (knobs.stepCap && i >= *knobs.stepCap - 1) {
        take = candidates; // the explicit step cap: unmask everything left
      } else {
        take = std::count_if(confidence.begin(), confidence.end(),
                             [&](double c) { return c >= *knobs.threshold; });
        take = std::max<int64_t>(take, 1);
      }
      take = std::min(take, candidates);
      for (int64_t s = 0; s < take; ++s)
        x[positions[order[s]]] = proposal[order[s]];
    }

    ++outcome.blocks;
    if (reportBlock(x, begin, end, b, b + 1 == blocks, facts, onBlock)) {
      std::fill(x.begin() + end, x.end(), static_cast<int32_t>(facts.eosTokenIds.front()));
      break;
    }
  }
  outcome.decodeSteps = step;
  finishOutput(x, request.prompt.size(), facts, outcome);
  return Status::ok();
}

} // namespace dlm::sampling
