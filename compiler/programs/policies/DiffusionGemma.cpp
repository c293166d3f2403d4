// The generate() loop of transformers 5.23's DiffusionGemmaForBlockDiffusion, its sampler
// arithmetic in float32 as transformers computes it (docs/design/diffusion-gemma.md §6): the
// default (and only) decode program of DiffusionGemma artifacts.
// tests/runtime/program/DiffusionGemmaReplayTest replays transformers' recorded traces through it
// (tests/reference/diffusion_gemma/fixtures/*/replay/): every temperature, accept mask, renoised
// canvas, stop step and committed canvas.
//
// Per canvas of canvas_length positions, starting from uniform random tokens, for steps n < S =
// max_steps: T_n = f32(t_min) + f32(f32(t_max - t_min) * f32(f32(S - n) / f32(S))); z = logits /
// T_n (float32 division); accept by ascending entropy of softmax(z) within entropy_bound (float32
// cumsum), the rest take fresh uniform tokens; the canvas is done when its argmax has been stable
// for stability_threshold steps and the float32 mean entropy is below confidence_threshold, or at
// step S - 1, and commits that step's argmax.
//
// The model's two forward functions (docs/design/diffusion-gemma.md §4): `encode`, causal, writes
// K/V: the prompt's prefill, and the commit of every finished canvas (its argmax re-encoded at its
// own positions, appended to the cache); `decode`, bidirectional over the canvas and the cached
// prefix, K/V read only, self-conditioned on the previous step's processed logits (none on a
// canvas's first step). Like transformers, the last canvas is never re-encoded.
#include "compiler/programs/policies/Policies.h"
#include "compiler/programs/policies/PolicyBuilder.h"
#include "compiler/programs/policies/Shared.h"

namespace dlm::programs {
namespace {

using namespace mlir;
namespace gen = generate;

struct Knobs {
  Value maxNewTokens, canvasLength;
  EntropyBoundKnobs eb;
};

// transformers' defaults (DiffusionGemmaGenerationConfig, DiffusionGemmaConfig.canvas_length).
Knobs declareKnobs(PolicyBuilder &p) {
  Knobs k;
  k.maxNewTokens = p.intKnob("max_new_tokens", 256);
  k.canvasLength = p.intKnob("canvas_length", 256);
  k.eb = declareEntropyBoundKnobs(p);
  return k;
}

// DiffusionGemmaGenerationConfig.validate, plus what the records need (positive lengths, T > 0).
void checkRequest(PolicyBuilder &p, const Knobs &k) {
  Value zero = p.integer(0), zeroReal = p.real(0.0);
  p.check(p.gt("canvasPositive", k.canvasLength, zero), "canvas_length must be positive, got {}",
          k.canvasLength);
  checkNewTokens(p, k.maxNewTokens);
  p.check(p.gt("stepsPositive", k.eb.maxSteps, zero), "max_steps must be positive");
  p.check(p.ge("tMinValid", k.eb.tMin, zeroReal), "t_min must be >= 0");
  p.check(p.gt("temperaturesOrdered", k.eb.tMax, k.eb.tMin), "t_max must be greater than t_min");
  p.check(p.gt("boundPositive", k.eb.entropyBound, zeroReal), "entropy_bound must be > 0");
  p.check(p.ge("stabilityValid", k.eb.stabilityThreshold, zero),
          "stability_threshold must be >= 0");
  p.check(p.gt("confidencePositive", k.eb.confidenceThreshold, zeroReal),
          "confidence_threshold must be > 0");
  checkNotBlockCausal(p, "diffusion-gemma");
}

// One canvas's denoising steps; gives the steps run.
Value denoiseCanvas(PolicyBuilder &p, const Knobs &k, Value step, Value begin, Value end,
                    Value keep, Value lastIndex, Value temperatureSpan, Value stepsF32) {
  ImplicitLocOpBuilder &b = p.b();
  // The stop rule's history starts at -1 on every canvas.
  Value prev = p.value("prev", gen::FillRowOp::create(b, p.tokens(), p.integer(-1)));
  Value run = p.set("run", p.integer(0));
  // No self-conditioning on a canvas's first step.
  Value noLogits = p.value("sc", gen::DropLogitsOp::create(b, p.logits()));
  PolicyBuilder::DenoiseLoop loop = p.denoiseLoop(
      "denoise_step", k.eb.maxSteps, k.eb.maxSteps, step, {prev, run, noLogits}, {"n", "s"}, "ran",
      [&](Value n, Value s, ValueRange held) {
        // T_n in float32, with cur_step = S - n counting down.
        Value curStep = p.toReal("curStepF32", p.sub("curStep", k.eb.maxSteps, n), "f32");
        Value fraction = p.div("fraction", curStep, stepsF32, "f32");
        Value scaled = p.mul("scaled", temperatureSpan, fraction, "f32");
        Value T = p.add("T", k.eb.tMin, scaled, "f32");
        p.forward({"cached", end, keep, begin, end, {}, std::nullopt, "decode", held[2]});
        auto sample =
            p.named({"sampled", "argmax", "entropy"},
                    gen::SampleOp::create(b, Type(), Type(), p.tokens(), p.tokens(), p.reals(),
                                          "tempered", T, p.integer(-1), s, "all",
                                          b.getStringAttr("f32"), Value(), Value()));
        // The next step's self-conditioning input: these logits / T in float32.
        Value selfConditioning = p.value("sc", gen::HoldLogitsOp::create(b, p.logits(), T));
        // Done: the canvas is this step's argmax (transformers still draws the renoise, unused).
        // Every rejected position takes a fresh uniform token; the old canvas never survives.
        EntropyStep step =
            entropyBoundStep(p, k.eb, sample, held, n, s, lastIndex, p.text("uniform"), "f32");
        return std::make_pair(step.done, SmallVector<Value>{step.prev, step.run, selfConditioning});
      });
  return loop.ran;
}

} // namespace

void buildDiffusionGemma(ModuleOp module) {
  PolicyBuilder p(module, "diffusion-gemma");
  ImplicitLocOpBuilder &b = p.b();
  const Knobs k = declareKnobs(p);
  checkRequest(p, k);
  Value zero = p.integer(0), one = p.integer(1), promptLength = p.fact("prompt_len");
  // ceil(max_new_tokens / canvas_length) whole canvases; the output is not cut to max_new_tokens.
  Value roundedUp = p.add("roundedUp", k.maxNewTokens, k.canvasLength);
  Value roundedDown = p.sub("roundedDown", roundedUp, one);
  Value canvases = p.div("canvases", roundedDown, k.canvasLength);
  Value generated = p.mul("generated", canvases, k.canvasLength);
  Value maxTokens = p.add("maxTokens", promptLength, generated);
  gen::ReserveOp::create(b, maxTokens, k.canvasLength);
  Value lastIndex = p.sub("lastIndex", k.eb.maxSteps, one);
  // t_max - t_min is a Python float (double); torch rounds it to float32 where it meets the
  // tensor.
  Value temperatureSpan = p.sub("temperatureSpan", k.eb.tMax, k.eb.tMin);
  Value stepsF32 = p.toReal("stepsF32", k.eb.maxSteps, "f32");
  Value firstStep = p.set("step", zero);
  // The prompt's prefill: the encoder's K/V of every prompt position.
  p.forward({"full", promptLength, promptLength, zero, zero, {}, false, "encode"});

  // The sequence grows by one canvas per block: prompt ++ committed canvases ++ the canvas.
  ValueRange steps =
      p.blockLoop("canvas", canvases, firstStep, {"c"}, [&](Value c, ValueRange carried) {
        Value step = carried[0];
        Value begin = p.set("begin", p.fact("seq_len"));
        Value end = p.add("end", begin, k.canvasLength);
        Value keep = p.sub("keep", begin, p.fact("shift"));
        // randint(0, V, [C]): the initial canvas, drawn at the step of the canvas's first step.
        gen::SeqExtendOp::create(b, k.canvasLength, p.text("noise"), Value(), p.integer(2), step);
        gen::WindowOp::create(b, begin, end);
        Value ran =
            denoiseCanvas(p, k, step, begin, end, keep, lastIndex, temperatureSpan, stepsF32);
        Value nextStep = p.add("step", step, ran);
        Value lastCanvas = p.eq("lastCanvas", p.add("nextCanvas", c, one), canvases);
        // A canvas holding EOS ends the request (transformers pads after it; the output stops
        // there).
        Value eos = p.value("eos", gen::CommitOp::create(b, p.i1(), begin, end, c, lastCanvas));
        gen::ExitIfOp::create(b, eos);
        // The commit: the encoder re-encodes the canvas (its argmax) at its positions into the
        // cache.
        p.ifThen(p.negate("moreCanvases", lastCanvas), [&] {
          p.forward({"append", end, keep, end, end, {}, false, "encode"});
        });
        return SmallVector<Value>{nextStep};
      });
  gen::FinishOp::create(b, steps[0]);
  p.finish();
}

} // namespace dlm::programs
