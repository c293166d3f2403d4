// The entropy-bound policy (the sampler of runtime/sampling/EntropyBound.cpp, which
// tests/runtime/program/DifferentialDecodeTest holds it to). Per canvas of block_length positions
// (masks, or counter-RNG tokens for uniform noise), for n < S = max_steps:
// T_n = t_min + (t_max - t_min)(S - n)/S; sample, argmax and entropy at T_n; accept by ascending
// entropy within entropy_bound, renoise the rest; the canvas converges to its argmax when that has
// been stable for stability_threshold steps and the mean entropy is below confidence_threshold,
// or at step S - 1.
#include "compiler/programs/policies/Policies.h"
#include "compiler/programs/policies/PolicyBuilder.h"
#include "compiler/programs/policies/Shared.h"

namespace dlm::programs {
namespace {

using namespace mlir;
namespace gen = generate;

struct Knobs {
  Value genLength, blockLength;
  EntropyBoundKnobs eb;
  Value temperature, noise, cache;
};

Knobs declareKnobs(PolicyBuilder &p) {
  Knobs k;
  k.genLength = p.intKnob("gen_length", 32);
  k.blockLength = p.intKnob("block_length", 8);
  k.eb = declareEntropyBoundKnobs(p);
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
  checkBlockLengths(p, k.genLength, k.blockLength, k.temperature);
  p.check(p.gt("stepsPositive", k.eb.maxSteps, zero), "max_steps must be positive");
  p.check(p.gt("boundPositive", k.eb.entropyBound, zeroReal), "entropy_bound must be > 0");
  Value tMinPositive = p.gt("tMinPositive", k.eb.tMin, zeroReal);
  Value tMaxPositive = p.gt("tMaxPositive", k.eb.tMax, zeroReal);
  p.check(p.both("temperaturesPositive", tMinPositive, tMaxPositive),
          "t_min and t_max must be > 0");
  p.check(p.ge("stabilityValid", k.eb.stabilityThreshold, zero),
          "stability_threshold must be >= 0");
  checkNotBlockCausal(p, "entropy-bound");
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
  Value lastIndex = p.sub("lastIndex", k.eb.maxSteps, one);
  Value stepsReal = p.toReal("stepsReal", k.eb.maxSteps);
  Value temperatureSpan = p.sub("temperatureSpan", k.eb.tMax, k.eb.tMin);
  Value firstStep = p.set("step", zero);

  // The sequence grows by one canvas per block: prompt ++ committed canvases ++ the canvas.
  ValueRange steps =
      p.blockLoop("canvas", canvases, firstStep, {"c"}, [&](Value c, ValueRange carried) {
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
        p.ifThen(prefix, [&] { p.forward({"full", keep, keep, zero, zero, {}, false}); });
        PolicyBuilder::DenoiseLoop loop = p.denoiseLoop(
            "denoise_step", k.eb.maxSteps, k.eb.maxSteps, step, {prev, run}, {"n", "s"}, "ran",
            [&](Value n, Value s, ValueRange held) {
              // T_n in double, in the order of EntropyBound.cpp's expression.
              Value remaining = p.toReal("remainingReal", p.sub("remaining", k.eb.maxSteps, n));
              Value scaled = p.mul("scaled", temperatureSpan, remaining);
              Value T = p.add("T", k.eb.tMin, p.div("fraction", scaled, stepsReal));
              p.ifThen(
                  prefix,
                  [&] {
                    p.forward({"cached", end, keep, begin, end});
                  },
                  [&] {
                    p.forward({"full", end, zero, begin, end});
                  });
              auto sample =
                  p.named({"sampled", "argmax", "entropy"},
                          gen::SampleOp::create(b, Type(), Type(), p.tokens(), p.tokens(),
                                                p.reals(), "tempered", T, noise.excluded, s, "all",
                                                StringAttr(), Value(), Value()));
              EntropyStep step =
                  entropyBoundStep(p, k.eb, sample, held, n, s, lastIndex, noise.noise, {});
              return std::make_pair(step.done, SmallVector<Value>{step.prev, step.run});
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
