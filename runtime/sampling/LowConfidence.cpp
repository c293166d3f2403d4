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
#include "runtime/sampling/Decoding.h"
#include "runtime/sampling/SamplingMath.h"

#include <algorithm>

namespace dlm::sampling {

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
    BlockLoopRequest loop;
    loop.policy = Policy::lowConfidence;
    loop.knobs = &knobs;
    loop.prefixCache = request.cache == CacheMode::prefix;
    loop.keep = loop.prefixCache ? keep : 0;
    loop.sequence = x.data();
    loop.total = total;
    loop.begin = begin;
    loop.end = end;
    loop.maskToken = mask;
    loop.excludedToken = mask;
    loop.seed = request.seed;
    loop.request = request.request;
    loop.firstStep = step;
    // Fixed count: the schedule's steps. Threshold: the explicit cap, else the block length,
    // which never decides (each step unmasks at least one, so at most one mask is left for it).
    // A cap past the block length never decides either.
    loop.stepCap = !knobs.threshold
                       ? stepsPerBlock
                       : std::min(knobs.stepCap.value_or(blockLength), blockLength);
    if (!knobs.threshold)
      loop.transferSchedule = schedule;
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
    if (reportBlock(x, begin, end, b, facts, onBlock)) {
      std::fill(x.begin() + end, x.end(), static_cast<int32_t>(facts.eosTokenIds.front()));
      break;
    }
  }
  outcome.decodeSteps = step;
  finishOutput(x, request.prompt.size(), facts, outcome);
  return Status::ok();
}

} // namespace dlm::sampling
