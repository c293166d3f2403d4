// The low-confidence policy (runtime/sampling/LowConfidence.cpp's, which
// tests/runtime/program/DifferentialDecodeTest holds it to): x = prompt ++ gen_length masks;
// blocks of block_length left to right. A step: forward, Gumbel-max proposals and
// unit-temperature confidences on the block's masks, then unmask the k most confident (fixed
// count: the transfer schedule), those >= threshold (at least one), or, with low_threshold,
// dInfer's hierarchical choice; with step_cap, step step_cap - 1 takes every candidate. With
// credit, dInfer's credit decoding fuses a per-block credit into the logits first. A block ends
// when it has no mask left. The cache: none, the prefix cache (the committed prefix's K/V reused)
// or the dual cache (the block's first forward keeps the whole sequence's K/V, later ones feed
// only the block over it), with dInfer's vicinity refresh (the window widened by prefix_look and
// after_look positions, full forwards for the request's first warmup_steps + 1 steps). With
// smoothing, dInfer's iteration smoothing (docs/design/contracts-from-the-compiler.md §7).
#include "compiler/programs/policies/Policies.h"
#include "compiler/programs/policies/PolicyBuilder.h"
#include "compiler/programs/policies/Shared.h"

namespace dlm::programs {
namespace {

using namespace mlir;
namespace gen = generate;

struct Knobs {
  Value genLength, blockLength, steps, temperature, threshold, stepCap, lowThreshold, depth, credit,
      creditAlpha, creditBeta, creditGamma, cache, prefixLook, afterLook, warmupSteps, smoothing,
      smoothingInit, smoothingGrowth, thresholdDecay;
};

// A real knob of at least 0.
Value nonNegativeReal(PolicyBuilder &p, StringRef name, double fallback) {
  Builder &b = p.b();
  return p.knob(name, p.f64(),
                {b.getF64FloatAttr(fallback), false, {}, {}, b.getI64IntegerAttr(0)});
}

Knobs declareKnobs(PolicyBuilder &p) {
  Builder &b = p.b();
  Knobs k;
  k.genLength = p.intKnob("gen_length", 32);
  k.blockLength = p.intKnob("block_length", 8);
  // Step counts are forwards: at least one, at most 65536 of them, so that no stored default or
  // request can make one generation run for ever (an artifact with max_steps 2^52 did).
  k.steps = p.intKnob("steps", 16, 1, 65536);
  k.temperature = p.realKnob("temperature", 0.0);
  k.threshold = p.knob("threshold", p.f64(),
                       {Attribute(), true, {}, {}, b.getI64IntegerAttr(0), b.getI64IntegerAttr(1)});
  k.stepCap =
      p.knob("step_cap", p.i64(),
             {Attribute(), true, {}, {}, b.getI64IntegerAttr(1), b.getI64IntegerAttr(65536)});
  k.lowThreshold =
      p.knob("low_threshold", p.f64(),
             {Attribute(), true, {}, {}, b.getI64IntegerAttr(0), b.getI64IntegerAttr(1)});
  k.depth = p.intKnob("depth", 1, 1);
  k.credit = p.boolKnob("credit", false);
  k.creditAlpha = p.realKnob("credit_alpha", 0.7);
  k.creditBeta = p.realKnob("credit_beta", 0.8);
  k.creditGamma = p.realKnob("credit_gamma", 0.2);
  k.cache = p.textKnob("cache", StringRef("none"), "none,prefix,dual",
                       "unknown cache mode '{}' (expected none, prefix or dual)");
  // dInfer's vicinity refresh: the dual cache's later steps also recompute the K/V of
  // prefix_look positions before the block and after_look after it; the request's first
  // warmup_steps forwards, and the one after them, are full ones.
  // Bounded so that no request overflows a position (a window is clipped to the sequence).
  k.prefixLook = p.intKnob("prefix_look", 0, 0, int64_t(1) << 30);
  k.afterLook = p.intKnob("after_look", 0, 0, int64_t(1) << 30);
  k.warmupSteps = p.intKnob("warmup_steps", 0, 0, 65536);
  // dInfer's iteration smoothing (IterationSmooth): after global step j, a masked position's next
  // input is E[mask] + w_j softmax(z_j) @ E with w_j = min(smoothing_init + smoothing_growth j,
  // smoothing), and step j's threshold is max(1 - threshold_decay j, threshold). 0: off.
  k.smoothing = nonNegativeReal(p, "smoothing", 0.0);
  k.smoothingInit = nonNegativeReal(p, "smoothing_init", 0.15);
  k.smoothingGrowth = nonNegativeReal(p, "smoothing_growth", 0.02);
  k.thresholdDecay = nonNegativeReal(p, "threshold_decay", 0.02);
  return k;
}

// validateRequest (runtime/sampling/Decoding.cpp): the same messages in the same order. A
// remainder is taken only once its divisor is known to be positive. Gives the block count.
Value checkRequest(PolicyBuilder &p, const Knobs &k) {
  Value zero = p.integer(0);
  checkBlockLengths(p, k.genLength, k.blockLength, k.temperature);
  Value blocks = p.div("blocks", k.genLength, k.blockLength);
  p.check(p.eq("stepsDivisible", p.rem("stepsRest", k.steps, blocks), zero),
          "steps {} is not divisible by the number of blocks {}", k.steps, blocks);
  p.check(p.ge("hasMask", p.fact("mask"), zero),
          "the low-confidence policy needs a mask token; the model has none");
  checkNotBlockCausal(p, "low-confidence");
  return blocks;
}

// Checked only when credit decoding is on. A NaN fails every comparison, so it is refused too.
void checkCredit(PolicyBuilder &p, const Knobs &k) {
  Value zeroReal = p.real(0.0);
  Value creditOff = p.negate("creditOff", k.credit);
  Value alphaPositive = p.gt("alphaPositive", k.creditAlpha, zeroReal);
  p.check(p.either("alphaValid", creditOff, alphaPositive), "credit_alpha must be > 0");
  Value betaPositive = p.gt("betaPositive", k.creditBeta, zeroReal);
  Value betaAtMostOne = p.le("betaAtMostOne", k.creditBeta, p.real(1.0));
  Value betaInRange = p.both("betaInRange", betaPositive, betaAtMostOne);
  p.check(p.either("betaValid", creditOff, betaInRange), "credit_beta must be in (0, 1]");
  Value gammaPositive = p.gt("gammaPositive", k.creditGamma, zeroReal);
  p.check(p.either("gammaValid", creditOff, gammaPositive), "credit_gamma must be > 0");
}

// The vicinity refines the dual cache only (dInfer's vicinity iteration has no other).
void checkVicinity(PolicyBuilder &p, const Knobs &k, Value dual) {
  Value zero = p.integer(0);
  Value noPrefixLook = p.eq("noPrefixLook", k.prefixLook, zero);
  Value noLook = p.both("noLook", noPrefixLook, p.eq("noAfterLook", k.afterLook, zero));
  Value noVicinity = p.both("noVicinity", noLook, p.eq("noWarmup", k.warmupSteps, zero));
  p.check(p.either("vicinityValid", dual, noVicinity),
          "prefix_look, after_look and warmup_steps refine the dual cache; cache is '{}'", k.cache);
}

// Smoothing re-embeds the masked positions from the last forward's logits. The prefix cache feeds
// every masked position at each step; the dual cache's windows would need the embeddings of the
// positions they skip, which dlm does not keep.
Value checkSmoothing(PolicyBuilder &p, const Knobs &k) {
  Value smoothOn = p.gt("smoothOn", k.smoothing, p.real(0.0));
  Value notDual = p.negate("notDual", p.eq("dualCache", k.cache, p.text("dual")));
  p.check(p.either("smoothingValid", p.negate("smoothOff", smoothOn), notDual),
          "not supported yet: smoothing with the dual cache");
  return smoothOn;
}

// What the steps of every block share.
struct Plan {
  Value blocks, stepsPerBlock, prefix, dual, capOn, hierarchical, confidenceDriven, highThreshold,
      creditCapacity, cap, lastStep, total, warmupEnd, smoothOn;
};

Plan plan(PolicyBuilder &p, const Knobs &k, Value blocks) {
  Plan plan;
  plan.blocks = blocks;
  plan.stepsPerBlock = p.div("stepsPerBlock", k.steps, blocks);
  plan.prefix = p.eq("prefix", k.cache, p.text("prefix"));
  plan.dual = p.eq("dual", k.cache, p.text("dual"));
  checkVicinity(p, k, plan.dual);
  plan.smoothOn = checkSmoothing(p, k);
  // The steps before warmupEnd are full forwards: the warmup's and the one after it (none
  // without a warmup), bounded once so that a step tests one comparison.
  Value warmupOn = p.gt("warmupOn", k.warmupSteps, p.integer(0));
  Value afterWarmup = p.add("afterWarmup", k.warmupSteps, p.integer(1));
  plan.warmupEnd = p.select("warmupEnd", warmupOn, afterWarmup, p.integer(0));
  Value thresholdOn = p.defined("thresholdOn", k.threshold);
  plan.capOn = p.defined("capOn", k.stepCap);
  // Hierarchical decoding (dInfer) with low_threshold: like the threshold rule, it unmasks as the
  // confidences allow; without a threshold only its segment maxima and the top-1 are taken (no
  // confidence exceeds 1).
  plan.hierarchical = p.defined("hierarchical", k.lowThreshold);
  plan.confidenceDriven = p.either("confidenceDriven", thresholdOn, plan.hierarchical);
  plan.highThreshold = p.select("highThreshold", thresholdOn, k.threshold, p.real(1.0));
  checkCredit(p, k);
  // A row gains at most one credited token per step: the block's steps bound its credits.
  plan.creditCapacity = p.select("creditCapacity", k.credit, k.blockLength, p.integer(0));
  // Fixed count: at most the schedule's steps (the block is unmasked by then). Confidence-driven
  // rules: no cap but step_cap; the bound (block_length) never decides, as every step unmasks at
  // least one.
  Value thresholdCap = p.select("thresholdCap", plan.capOn, k.stepCap, p.integer(-1));
  plan.cap = p.select("cap", plan.confidenceDriven, thresholdCap, plan.stepsPerBlock);
  plan.lastStep = p.sub("lastStep", k.stepCap, p.integer(1));
  plan.total = p.add("total", p.fact("prompt_len"), k.genLength);
  return plan;
}

// The high threshold of global step s: with smoothing, max(1 - threshold_decay s, the high
// threshold), dInfer's iter_threshold.
Value stepThreshold(PolicyBuilder &p, const Knobs &k, const Plan &plan, Value s) {
  return p.ifElse(
      plan.smoothOn, p.f64(), {"stepThreshold"},
      [&]() -> SmallVector<Value> {
        Value decay = p.mul("decay", k.thresholdDecay, p.toReal("stepReal", s));
        Value decayed = p.sub("decayed", p.real(1.0), decay);
        Value higher = p.gt("decayedHigher", decayed, plan.highThreshold);
        return {p.select("stepThreshold", higher, decayed, plan.highThreshold)};
      },
      [&]() -> SmallVector<Value> { return {plan.highThreshold}; })[0];
}

// The positions a step unmasks, by the rule the knobs choose.
Value accepted(PolicyBuilder &p, const Knobs &k, const Plan &plan, Value step, Value s,
               Value schedule, Value confidence) {
  ImplicitLocOpBuilder &b = p.b();
  auto accept = [&](StringRef rule, Value count, Value threshold, Value low, Value depth) {
    return gen::AcceptOp::create(b, Type(), Type(), p.flags(), Type(), rule, "masked", confidence,
                                 count, threshold, Value(), low, depth, StringAttr(), StringAttr(),
                                 Value(), Value(), Value(), Value(), Value())
        .getKeep();
  };
  return p.ifElse(
      plan.confidenceDriven, p.flags(), {"accepted"},
      [&]() -> SmallVector<Value> {
        Value pastCap = p.ge("pastCap", step, plan.lastStep);
        Value takeAll = p.both("takeAll", plan.capOn, pastCap);
        return {p.ifElse(
            takeAll, p.flags(), {"accepted"},
            // The explicit step cap: every candidate left (k = block_length >= candidates).
            [&]() -> SmallVector<Value> {
              return {accept("top_k", k.blockLength, Value(), Value(), Value())};
            },
            [&]() -> SmallVector<Value> {
              // Step s's high threshold; without hierarchy the threshold is defined and is it.
              Value high = stepThreshold(p, k, plan, s);
              return {p.ifElse(
                  plan.hierarchical, p.flags(), {"accepted"},
                  [&]() -> SmallVector<Value> {
                    return {accept("hierarchical", Value(), high, k.lowThreshold, k.depth)};
                  },
                  [&]() -> SmallVector<Value> {
                    return {accept("threshold", Value(), high, Value(), Value())};
                  })[0]};
            })[0]};
      },
      [&]() -> SmallVector<Value> {
        Value take =
            p.value("take", gen::ListAtOp::create(b, p.i64(), schedule, step, p.integer(1)));
        return {accept("top_k", take, Value(), Value(), Value())};
      })[0];
}

// Where a step's forwards start and keep: the block's begin and end, the prefix cache's keep
// (cacheKeep), what a full forward keeps (fullKeep: cacheKeep with the prefix cache, else 0).
struct BlockSpan {
  Value begin, end, cacheKeep, fullKeep;
};

// Iteration smoothing's step s: a forward of the function `smooth` (full, or with the prefix
// cache `cached` over [cacheKeep, total)) over the last step's kept logits `last`, whose first
// row is position `lastAt` (none on the request's first step), at weight w_{s-1} =
// min(smoothing_init + smoothing_growth (s - 1), smoothing). Its rows from fullKeep on (every
// masked position's) are kept for the next step, the block's rows go to this one's sampler.
// Gives the kept logits and the position of their first row.
SmallVector<Value> smoothedForward(PolicyBuilder &p, const Knobs &k, const Plan &plan, Value s,
                                   Value cached, const BlockSpan &span, Value last, Value lastAt) {
  ImplicitLocOpBuilder &b = p.b();
  Value previous = p.toReal("previousStep", p.sub("previousIndex", s, p.integer(1)));
  Value growth = p.mul("growth", k.smoothingGrowth, previous);
  Value grown = p.add("grown", k.smoothingInit, growth);
  Value weight = p.select("weight", p.gt("weightCapped", grown, k.smoothing), k.smoothing, grown);
  // The rows the forward returns start at `from` (none: 0); the kept ones at fullKeep.
  auto smoothForward = [&](StringRef mode, Value keep, Value from) {
    auto fromFirstRow = [&](StringRef name, Value position) {
      return from ? p.sub(name, position, from) : position;
    };
    PolicyBuilder::Forward forward{mode, plan.total, keep, from ? from : p.integer(0), plan.total};
    forward.function = "smooth";
    forward.input = last;
    forward.inputScale = weight;
    forward.inputAt = lastAt;
    p.forward(forward);
    Value keptFrom = fromFirstRow("keptFrom", span.fullKeep);
    gen::NarrowLogitsOp::create(b, keptFrom, fromFirstRow("keptTo", plan.total));
    Value kept = p.value("smooth", gen::HoldLogitsOp::create(b, p.logits(), p.real(1.0)));
    Value blockFrom = fromFirstRow("blockFrom", span.begin);
    gen::NarrowLogitsOp::create(b, blockFrom, fromFirstRow("blockTo", span.end));
    return SmallVector<Value>{kept, p.set("smoothAt", span.fullKeep)};
  };
  return p.ifElse(
      cached, {p.logits(), p.i64()}, {"smooth", "smoothAt"},
      [&]() { return smoothForward("cached", span.cacheKeep, span.cacheKeep); },
      [&]() { return smoothForward("full", span.fullKeep, Value()); });
}

// The dual cache's window [begin, end) of a block's later steps, and what its first step keeps.
struct Window {
  Value begin, end, firstKeep;
};

// A step's forward without smoothing: cached (the prefix cache's later steps), a window (the dual
// cache's), or full.
void plainForward(PolicyBuilder &p, const Plan &plan, const BlockSpan &span, const Window &window,
                  Value cached, Value windowed) {
  p.ifThen(
      cached,
      [&] {
        p.forward({"cached", plan.total, span.cacheKeep, span.begin, span.end});
      },
      [&] {
        p.ifThen(
            windowed,
            [&] {
              p.forward({"window", plan.total, window.begin, span.begin, span.end, window.end});
            },
            [&] {
              p.forward({"full", plan.total, window.firstKeep, span.begin, span.end});
            });
      });
}

} // namespace

void buildLowConfidence(ModuleOp module) {
  PolicyBuilder p(module, "low-confidence");
  ImplicitLocOpBuilder &b = p.b();
  const Knobs k = declareKnobs(p);
  const Plan plan = ::dlm::programs::plan(p, k, checkRequest(p, k));
  Value zero = p.integer(0), one = p.integer(1), mask = p.fact("mask");
  // Smoothing's forwards return every fed row; the others the block's.
  Value logitRows = p.select("logitRows", plan.smoothOn, plan.total, k.blockLength);
  gen::ReserveOp::create(b, plan.total, logitRows);
  gen::SeqExtendOp::create(b, k.genLength, p.text("token"), mask, Value(), Value());
  Value firstStep = p.set("step", zero);
  // Iteration smoothing's input: the last forward's logits (none before the first).
  Value noSmoothing = p.value("smooth", gen::DropLogitsOp::create(b, p.logits()));
  Value smoothAt = p.set("smoothAt", zero);

  ValueRange carriedOut = p.blockLoop(
      "block", plan.blocks, {firstStep, noSmoothing, smoothAt}, {"b"},
      [&](Value block, ValueRange carried) {
        Value step = carried[0];
        Value offset = p.mul("offset", block, k.blockLength);
        Value begin = p.add("begin", p.fact("prompt_len"), offset);
        Value end = p.add("end", begin, k.blockLength);
        // The prefix cache keeps [0, begin), one position less for a logit shift, so that the
        // cached chunk's shifted row of `begin` is exact.
        Value cacheKeep = p.sub("cacheKeep", begin, p.fact("shift"));
        Value fullKeep = p.select("fullKeep", plan.prefix, cacheKeep, zero);
        // The dual cache: the block's first forward keeps the K/V of the whole sequence, later
        // ones feed only the window [windowBegin, windowEnd) over it (the window's K/V replace
        // their cached range): [cacheKeep, end) without a vicinity.
        Value firstKeep = p.select("firstKeep", plan.dual, plan.total, fullKeep);
        // Vicinity refresh: the window reaches prefix_look positions before the block (at least
        // to cacheKeep, for a logit shift's row) and after_look past it, within the sequence.
        Value lookBack = p.sub("lookBack", begin, k.prefixLook);
        Value nearBack =
            p.select("nearBack", p.le("lookBackNear", lookBack, cacheKeep), lookBack, cacheKeep);
        Value windowBegin =
            p.select("windowBegin", p.ge("nearBackInside", nearBack, zero), nearBack, zero);
        Value lookAhead = p.add("lookAhead", end, k.afterLook);
        Value windowEnd = p.select("windowEnd", p.le("lookAheadInside", lookAhead, plan.total),
                                   lookAhead, plan.total);
        const BlockSpan span{begin, end, cacheKeep, fullKeep};
        const Window window{windowBegin, windowEnd, firstKeep};
        gen::WindowOp::create(b, begin, end);
        Value masked = p.value("masked", gen::CountEqOp::create(b, p.i64(), mask));
        Value schedule = p.value(
            "schedule", gen::TransferScheduleOp::create(b, p.list(), masked, plan.stepsPerBlock));
        Value credit =
            p.value("credit", gen::CreditResetOp::create(b, p.credit(), plan.creditCapacity));
        PolicyBuilder::DenoiseLoop loop = p.denoiseLoop(
            "denoise_step", plan.cap, k.blockLength, step, {credit, carried[1], carried[2]},
            {"i", "s"}, "ran", [&](Value i, Value s, ValueRange held) {
              // A block's first step is a full forward, and so are the request's first
              // warmup_steps steps and the one after them: dInfer's warmup forwards keep no
              // cache, so the step that ends the warmup builds it.
              Value warming = p.gt("warming", plan.warmupEnd, s);
              Value first = p.either("first", p.eq("blockStart", i, zero), warming);
              Value later = p.negate("later", first);
              Value cached = p.both("cached", plan.prefix, later);
              Value windowed = p.both("windowed", plan.dual, later);
              ValueRange smoothed = p.ifElse(
                  plan.smoothOn, {p.logits(), p.i64()}, {"smooth", "smoothAt"},
                  [&]() { return smoothedForward(p, k, plan, s, cached, span, held[1], held[2]); },
                  [&]() -> SmallVector<Value> {
                    plainForward(p, plan, span, window, cached, windowed);
                    return {held[1], held[2]};
                  });
              Value updated = p.ifElse(
                  k.credit, held[0].getType(), {"credit"},
                  [&]() -> SmallVector<Value> {
                    return {gen::CreditOp::create(b, held[0].getType(), held[0], k.creditBeta,
                                                  k.creditGamma, k.creditAlpha, "masked")};
                  },
                  [&]() -> SmallVector<Value> { return {held[0]}; })[0];
              auto sample =
                  p.named({"proposal", "confidence"},
                          gen::SampleOp::create(b, p.tokens(), p.reals(), Type(), Type(), Type(),
                                                "gumbel_max", k.temperature, mask, s, "masked",
                                                StringAttr(), Value(), Value()));
              Value keep = accepted(p, k, plan, i, s, schedule, sample.getConfidence());
              auto gate = p.named({"accepted", "done"},
                                  gen::GateOp::create(b, p.flags(), Type(), p.i1(), "no_mask_left",
                                                      keep, Value(), Value(), Value(), Value()));
              gen::RenoiseOp::create(b, p.text("mask"), "masked_only", gate.getKeepOut(),
                                     sample.getToken(), s);
              return std::make_pair(gate.getDone(),
                                    SmallVector<Value>{updated, smoothed[0], smoothed[1]});
            });
        Value nextStep = p.add("step", step, loop.ran);
        Value lastBlock = p.eq("lastBlock", p.add("nextBlock", block, one), plan.blocks);
        Value eos = p.value("eos", gen::CommitOp::create(b, p.i1(), begin, end, block, lastBlock));
        gen::ExitIfOp::create(b, eos);
        return SmallVector<Value>{nextStep, loop.carried[1], loop.carried[2]};
      });
  gen::FinishOp::create(b, carriedOut[0]);
  p.finish();
}

} // namespace dlm::programs
