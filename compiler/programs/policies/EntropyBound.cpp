// The entropy-bound policy (the sampler of runtime/sampling/EntropyBound.cpp, which
// tests/runtime/program/DifferentialDecodeTest holds it to). Per canvas of block_length positions
// (masks, or counter-RNG tokens for uniform noise), for n < S = max_steps:
// T_n = t_min + (t_max - t_min)(S - n)/S; sample, argmax and entropy at T_n; accept by ascending
// entropy within entropy_bound, renoise the rest; the canvas converges to its argmax when that has
// been stable for stability_threshold steps and the mean entropy is below confidence_threshold,
// or at step S - 1.
#include "compiler/programs/policies/Policies.h"
#include "compiler/programs/policies/PolicyBuilder.h"

namespace dlm::programs {
namespace {

using namespace mlir;
namespace gen = generate;

struct Knobs {
  Value genLength, blockLength, maxSteps, tMin, tMax, entropyBound, stabilityThreshold,
      confidenceThreshold, temperature, noise, cache;
};

Knobs declareKnobs(PolicyBuilder &p) {
  Knobs k;
  k.genLength = p.intKnob("gen_length", 32);
  k.blockLength = p.intKnob("block_length", 8);
  // Step counts are forwards: at most 65536 of them, so that no stored default or request can
  // make one generation run for ever (an artifact with max_steps 2^52 did).
  k.maxSteps = p.intKnob("max_steps", 48, std::nullopt, 65536);
  k.tMin = p.realKnob("t_min", 0.4);
  k.tMax = p.realKnob("t_max", 0.8);
  k.entropyBound = p.realKnob("entropy_bound", 0.1);
  k.stabilityThreshold = p.intKnob("stability_threshold", 1);
  k.confidenceThreshold = p.realKnob("confidence_threshold", 0.005);
  // Not used by the policy; declared for the check validateRequest makes on every request.
  k.temperature = p.realKnob("temperature", 0.0);
  k.noise = p.textKnob("noise", std::nullopt, "mask,uniform",
                       "knob 'noise' must be \"mask\" or \"uniform\", got \"{}\"");
  k.cache = p.textKnob("cache", StringRef("none"), "none,prefix",
                       "the entropy-bound policy has no cache mode '{}' (expected none or prefix)");
  return k;
}

// validateRequest (runtime/sampling/Decoding.cpp): the same messages in the same order.
void checkRequest(PolicyBuilder &p, const Knobs &k) {
  Value zero = p.integer(0), zeroReal = p.real(0.0);
  const char *lengths = "gen_length {} is not a positive multiple of block_length {}";
  // Records are written in the order they are built: one builder call per statement where two
  // would be arguments of one call (C++ leaves their order to the compiler).
  Value blockPositive = p.gt("blockPositive", k.blockLength, zero);
  Value genPositive = p.gt("genPositive", k.genLength, zero);
  p.check(p.both("lengthsPositive", blockPositive, genPositive), lengths, k.genLength,
          k.blockLength);
  p.check(p.eq("genMultiple", p.rem("genRest", k.genLength, k.blockLength), zero), lengths,
          k.genLength, k.blockLength);
  p.check(p.ge("temperatureValid", k.temperature, zeroReal), "temperature must be >= 0");
  p.check(p.gt("stepsPositive", k.maxSteps, zero), "max_steps must be positive");
  p.check(p.gt("boundPositive", k.entropyBound, zeroReal), "entropy_bound must be > 0");
  Value tMinPositive = p.gt("tMinPositive", k.tMin, zeroReal);
  Value tMaxPositive = p.gt("tMaxPositive", k.tMax, zeroReal);
  p.check(p.both("temperaturesPositive", tMinPositive, tMaxPositive),
          "t_min and t_max must be > 0");
  p.check(p.ge("stabilityValid", k.stabilityThreshold, zero), "stability_threshold must be >= 0");
}

struct Noise {
  Value excluded, noise, fill;
};

// Mask noise when asked for, else when the model has a mask token.
Noise chooseNoise(PolicyBuilder &p, const Knobs &k) {
  Value mask = p.fact("mask");
  Value noiseGiven = p.defined("noiseGiven", k.noise);
  Value maskAsked = p.eq("maskAsked", k.noise, p.text("mask"));
  Value hasMask = p.ge("hasMask", mask, p.integer(0));
  Value maskGiven = p.both("maskGiven", noiseGiven, maskAsked);
  Value maskMissing = p.both("maskMissing", maskGiven, p.negate("noMask", hasMask));
  p.check(p.negate("maskAvailable", maskMissing),
          "mask noise needs a mask token; the model has none");
  Value maskNoise = p.select("maskNoise", noiseGiven, maskAsked, hasMask);
  return {p.select("excluded", maskNoise, mask, p.integer(-1)),
          p.select("noise", maskNoise, p.text("mask"), p.text("uniform")),
          p.select("fill", maskNoise, p.text("token"), p.text("noise"))};
}

} // namespace

void buildEntropyBound(ModuleOp module) {
  PolicyBuilder p(module, "entropy-bound");
  ImplicitLocOpBuilder &b = p.b();
  const Knobs k = declareKnobs(p);
  checkRequest(p, k);
  const Noise noise = chooseNoise(p, k);
  Value zero = p.integer(0), one = p.integer(1), mask = p.fact("mask");
  Value canvases = p.div("canvases", k.genLength, k.blockLength);
  Value prefix = p.eq("prefix", k.cache, p.text("prefix"));
  Value maxTokens = p.add("maxTokens", p.fact("prompt_len"), k.genLength);
  gen::ReserveOp::create(b, maxTokens, k.blockLength);
  Value lastIndex = p.sub("lastIndex", k.maxSteps, one);
  Value stepsReal = p.toReal("stepsReal", k.maxSteps);
  Value temperatureSpan = p.sub("temperatureSpan", k.tMax, k.tMin);
  Value firstStep = p.set("step", zero);

  // The sequence grows by one canvas per block: prompt ++ committed canvases ++ the canvas.
  ValueRange steps = p.blockLoop(
      "canvas", canvases, firstStep, {"c"}, [&](Value c, ValueRange carried) {
        Value step = carried[0];
        Value begin = p.set("begin", p.fact("seq_len"));
        Value end = p.add("end", begin, k.blockLength);
        Value keep = p.sub("keep", begin, p.fact("shift"));
        // The initial canvas draws at the step of the canvas's first denoising step.
        gen::SeqExtendOp::create(b, k.blockLength, noise.fill, mask, p.integer(2), step);
        gen::WindowOp::create(b, begin, end);
        Value prev = p.value("prev", gen::FillRowOp::create(b, p.tokens(), p.integer(-1)));
        Value run = p.set("run", zero);
        // The prefix cache: K/V of prompt ++ committed (one position less for a logit shift), an
        // undecoded forward that does not move the RNG step. A zero-token forward still runs.
        p.ifThen(prefix, [&] {
          p.forward({"full", keep, keep, zero, zero, {}, false});
        });
        PolicyBuilder::DenoiseLoop loop = p.denoiseLoop(
            "denoise_step", k.maxSteps, k.maxSteps, step, {prev, run}, {"n", "s"}, "ran",
            [&](Value n, Value s, ValueRange held) {
              // T_n in double, in the order of EntropyBound.cpp's expression.
              Value remaining = p.toReal("remainingReal", p.sub("remaining", k.maxSteps, n));
              Value scaled = p.mul("scaled", temperatureSpan, remaining);
              Value T = p.add("T", k.tMin, p.div("fraction", scaled, stepsReal));
              p.ifThen(
                  prefix, [&] { p.forward({"cached", end, keep, begin, end}); },
                  [&] { p.forward({"full", end, zero, begin, end}); });
              auto sample = p.named({"sampled", "argmax", "entropy"},
                                    gen::SampleOp::create(b, Type(), Type(), p.tokens(),
                                                          p.tokens(), p.reals(), "tempered", T,
                                                          noise.excluded, s, "all", StringAttr(),
                                                          Value(), Value()));
              auto accept = p.named(
                  {"prev", "run", "accepted", "converged"},
                  gen::AcceptOp::create(
                      b, p.tokens(), p.i64(), p.flags(), p.i1(), "entropy_bound", "all",
                      sample.getEntropy(), Value(), Value(), k.entropyBound, Value(), Value(),
                      b.getStringAttr("stable_confident"), StringAttr(), sample.getArgmax(),
                      held[0], held[1], k.stabilityThreshold, k.confidenceThreshold));
              Value last = p.eq("last", n, lastIndex);
              auto gate = p.named({"accepted", "sampled", "done"},
                                  gen::GateOp::create(b, p.flags(), p.tokens(), p.i1(),
                                                      "converged_or_last", accept.getKeep(),
                                                      accept.getConverged(), last,
                                                      sample.getSample(), sample.getArgmax()));
              gen::RenoiseOp::create(b, noise.noise, "every_rejected", gate.getKeepOut(),
                                     gate.getSampledOut(), s);
              return std::make_pair(gate.getDone(), SmallVector<Value>{accept.getPrevOut(),
                                                                       accept.getRunOut()});
            });
        Value nextStep = p.add("step", step, loop.ran);
        Value lastCanvas = p.eq("lastCanvas", p.add("nextCanvas", c, one), canvases);
        Value eos = p.value("eos", gen::CommitOp::create(b, p.i1(), begin, end, c, lastCanvas));
        gen::ExitIfOp::create(b, eos);
        return SmallVector<Value>{nextStep};
      });
  gen::FinishOp::create(b, steps[0]);
  p.finish();
}

} // namespace dlm::programs
