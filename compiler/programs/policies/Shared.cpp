#include "compiler/programs/policies/Shared.h"

namespace dlm::programs {

using namespace mlir;
namespace gen = generate;

void checkBlockLengths(PolicyBuilder &p, Value genLength, Value blockLength, Value temperature) {
  Value zero = p.integer(0);
  const char *lengths = "gen_length {} is not a positive multiple of block_length {}";
  Value blockPositive = p.gt("blockPositive", blockLength, zero);
  Value genPositive = p.gt("genPositive", genLength, zero);
  p.check(p.both("lengthsPositive", blockPositive, genPositive), lengths, genLength, blockLength);
  // A remainder is taken only once its divisor is known to be positive.
  p.check(p.eq("genMultiple", p.rem("genRest", genLength, blockLength), zero), lengths, genLength,
          blockLength);
  p.check(p.ge("temperatureValid", temperature, p.real(0.0)), "temperature must be >= 0");
}

void checkNotBlockCausal(PolicyBuilder &p, StringRef policy) {
  p.check(p.eq("notBlockCausal", p.fact("attention_block"), p.integer(0)),
          ("not supported yet: the " + policy +
           " policy on a block-causal model (its blocks start at position 0: block-refinement "
           "decodes it)")
              .str());
}

void checkNewTokens(PolicyBuilder &p, Value maxNewTokens) {
  p.check(p.gt("newTokensPositive", maxNewTokens, p.integer(0)),
          "max_new_tokens must be positive, got {}", maxNewTokens);
}

SamplingKnobs declareSamplingKnobs(PolicyBuilder &p) {
  SamplingKnobs k;
  k.temperature = p.realKnob("temperature", 0.0);
  k.topK = p.intKnob("top_k", 0);
  k.topP = p.realKnob("top_p", 1.0);
  return k;
}

void checkSampling(PolicyBuilder &p, const SamplingKnobs &k) {
  Value zeroReal = p.real(0.0);
  p.check(p.ge("temperatureValid", k.temperature, zeroReal), "temperature must be >= 0");
  p.check(p.ge("topKValid", k.topK, p.integer(0)), "top_k must be >= 0 (0: no limit), got {}",
          k.topK);
  Value topPPositive = p.gt("topPPositive", k.topP, zeroReal);
  Value topPAtMostOne = p.le("topPAtMostOne", k.topP, p.real(1.0));
  p.check(p.both("topPValid", topPPositive, topPAtMostOne), "top_p must be in (0, 1]");
}

gen::SampleOp sampleRows(PolicyBuilder &p, const SamplingKnobs &k, Value step, StringRef token) {
  return p.named({token, "confidence"},
                 gen::SampleOp::create(p.b(), p.tokens(), p.reals(), Type(), Type(), Type(),
                                       "gumbel_max", k.temperature, p.integer(-1), step, "all",
                                       StringAttr(), k.topK, k.topP));
}

FirstToken commitFirstToken(PolicyBuilder &p, const SamplingKnobs &k, Value start, Value limit,
                            StringRef token) {
  ImplicitLocOpBuilder &b = p.b();
  Value zero = p.integer(0), one = p.integer(1);
  Value next = p.add("next", start, one);
  gen::SeqExtendOp::create(b, one, p.text("token"), zero, Value(), Value());
  gen::WindowOp::create(b, start, next);
  Value step = p.set("step", zero);
  gen::SeqWriteOp::create(b, sampleRows(p, k, step, token).getToken());
  FirstToken first;
  first.step = p.add("step", step, one);
  Value atLimit = p.ge("atLimit", next, limit);
  Value eos = p.value("eos", gen::CommitOp::create(b, p.i1(), start, next, zero, atLimit));
  first.done = p.either("done", eos, atLimit);
  first.committed = p.set("committed", next);
  first.blocks = p.set("blocks", one);
  return first;
}

EntropyBoundKnobs declareEntropyBoundKnobs(PolicyBuilder &p) {
  EntropyBoundKnobs k;
  // Step counts are forwards: at most 65536 of them, so that no stored default or request can
  // make one generation run for ever (an artifact with max_steps 2^52 did).
  k.maxSteps = p.intKnob("max_steps", 48, std::nullopt, 65536);
  k.tMin = p.realKnob("t_min", 0.4);
  k.tMax = p.realKnob("t_max", 0.8);
  k.entropyBound = p.realKnob("entropy_bound", 0.1);
  k.stabilityThreshold = p.intKnob("stability_threshold", 1);
  k.confidenceThreshold = p.realKnob("confidence_threshold", 0.005);
  return k;
}

EntropyStep entropyBoundStep(PolicyBuilder &p, const EntropyBoundKnobs &k, gen::SampleOp sample,
                             ValueRange held, Value n, Value s, Value lastIndex, Value noise,
                             StringRef precision) {
  ImplicitLocOpBuilder &b = p.b();
  auto accept =
      p.named({"prev", "run", "accepted", "converged"},
              gen::AcceptOp::create(b, p.tokens(), p.i64(), p.flags(), p.i1(), "entropy_bound",
                                    "all", sample.getEntropy(), Value(), Value(), k.entropyBound,
                                    Value(), Value(), b.getStringAttr("stable_confident"),
                                    precision.empty() ? StringAttr() : b.getStringAttr(precision),
                                    sample.getArgmax(), held[0], held[1], k.stabilityThreshold,
                                    k.confidenceThreshold));
  Value last = p.eq("last", n, lastIndex);
  // Done: the canvas is this step's argmax.
  auto gate = p.named({"accepted", "sampled", "done"},
                      gen::GateOp::create(b, p.flags(), p.tokens(), p.i1(), "converged_or_last",
                                          accept.getKeep(), accept.getConverged(), last,
                                          sample.getSample(), sample.getArgmax()));
  gen::RenoiseOp::create(b, noise, "every_rejected", gate.getKeepOut(), gate.getSampledOut(), s);
  return {gate.getDone(), accept.getPrevOut(), accept.getRunOut()};
}

} // namespace dlm::programs
