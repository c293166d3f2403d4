#include "tests/runtime/sampling/legacy/LegacyDecoding.h"

#include <string>

namespace dlm::sampling {

StatusOr<CacheMode> parseCacheMode(std::string_view name) {
  if (name == "none")
    return CacheMode::none;
  if (name == "prefix")
    return CacheMode::prefix;
  if (name == "dual")
    return CacheMode::dual;
  return Status::error("unknown cache mode '" + std::string(name) +
                       "' (expected none, prefix or dual)");
}

const char *cacheModeName(CacheMode mode) {
  switch (mode) {
  case CacheMode::none:
    return "none";
  case CacheMode::prefix:
    return "prefix";
  case CacheMode::dual:
    return "dual";
  }
  return "?";
}

namespace {
std::string str(int64_t value) { return std::to_string(value); }
} // namespace

Status validateRequest(const DecodeRequest &request, const TokenFacts &facts, int64_t vocab) {
  const DecodingKnobs &k = request.knobs;
  if (request.prompt.empty())
    return Status::error("empty prompt");
  for (int32_t id : request.prompt)
    if (id < 0 || id >= vocab)
      return Status::error("prompt token id " + str(id) + " is outside the vocabulary [0, " +
                           str(vocab) + ")");
  if (k.blockLength <= 0 || k.genLength <= 0 || k.genLength % k.blockLength)
    return Status::error("gen_length " + str(k.genLength) + " is not a positive multiple of " +
                         "block_length " + str(k.blockLength));
  if (!(k.temperature >= 0))
    return Status::error("temperature must be >= 0");
  if (k.policy == Policy::lowConfidence) {
    const int64_t blocks = k.genLength / k.blockLength;
    if (k.steps <= 0)
      return Status::error("knob 'steps' must be at least 1, got " + str(k.steps));
    if (k.steps % blocks)
      return Status::error("steps " + str(k.steps) + " is not divisible by the number of " +
                           "blocks " + str(blocks));
    if (facts.maskTokenId < 0)
      return Status::error("the low-confidence policy needs a mask token; the model has none");
    return Status::ok();
  }
  if (k.maxSteps <= 0)
    return Status::error("max_steps must be positive");
  if (!(k.entropyBound > 0))
    return Status::error("entropy_bound must be > 0");
  if (!(k.tMin > 0) || !(k.tMax > 0))
    return Status::error("t_min and t_max must be > 0");
  if (k.stabilityThreshold < 0)
    return Status::error("stability_threshold must be >= 0");
  if (k.noise == "mask" && facts.maskTokenId < 0)
    return Status::error("mask noise needs a mask token; the model has none");
  return Status::ok();
}

int64_t maxSequenceTokens(const DecodeRequest &request) {
  return static_cast<int64_t>(request.prompt.size()) + request.knobs.genLength;
}

int64_t maxLogitRows(const DecodeRequest &request) {
  return request.captureFirstLogits ? maxSequenceTokens(request) : request.knobs.blockLength;
}

StatusOr<DecodeOutcome> decode(DecodeModel &model, const TokenFacts &facts,
                               const DecodeRequest &request, const BlockCallback &onBlock) {
  profile::Scope timer(request.profiler, profile::Category::request, "request",
                       profile::TrackKind::request, request.request,
                       /*layer=*/-1, static_cast<int64_t>(request.prompt.size()));
  DLM_RETURN_IF_ERROR(validateRequest(request, facts, model.vocabSize()));
  DLM_RETURN_IF_ERROR(model.reserve(maxSequenceTokens(request), maxLogitRows(request)));
  DecodeOutcome outcome;
  ForwardRunner runner(model, request.captureFirstLogits, outcome, request.profiler,
                       request.request);
  if (request.knobs.policy == Policy::lowConfidence)
    DLM_RETURN_IF_ERROR(runLowConfidence(runner, model, facts, request, onBlock, outcome));
  else
    DLM_RETURN_IF_ERROR(runEntropyBound(runner, model, facts, request, onBlock, outcome));
  return outcome;
}

} // namespace dlm::sampling
