// The block-refinement policy: the decoding of block-causal dLLMs, LLaDA2.x's as diffusers 0.42.1's
// LLaDA2Pipeline with its BlockRefinementScheduler decodes it greedily (tests/reference/llada2;
// llada2_reference.py refine_generate) and SDAR's block_diffusion_generate (tests/reference/sdar:
// low_confidence_dynamic is `threshold`, low_confidence_static `threshold` 1, which no probability
// exceeds, and sequential `remasking` sequential). The model attends by blocks laid from position 0
// (@attention_block), so the blocks are those: the first holds the prompt's tail, and a block's
// forward feeds only the block over the K/V of the earlier ones, which is exact. A step takes each
// row's argmax and its probability; the block's masked positions above `threshold` are committed
// when they are at least the step's quota (block_length spread over steps_per_block), else the
// quota's most confident (sequential: the quota's leftmost); a quota above the masks left commits
// the masks only (SDAR's huggingface_bd3.py; its generate.py would overwrite prompt or committed
// tokens with their argmax). With editing_threshold (LLaDA2.1's token editing), every step also
// replaces the generated, decoded positions whose argmax differs with a probability above it, and
// a block without masks keeps refining while a step edits, at most max_post_steps + 1 steps. A
// step that writes an EOS with no mask before the first one ends the request (eos_early_stop).
// Unlike diffusers and SDAR, a block whose masks are gone ends at once when it does not edit
// (diffusers runs one more forward that changes nothing), and the last block's K/V is not stored
// (SDAR's loop stores it).
#include "compiler/programs/policies/Policies.h"
#include "compiler/programs/policies/PolicyBuilder.h"

namespace dlm::programs {
namespace {

using namespace mlir;
namespace gen = generate;

struct Knobs {
  Value genLength, blockLength, stepsPerBlock, remasking, threshold, editingThreshold, maxPostSteps,
      minimalTopk, eosEarlyStop, temperature;
};

// diffusers' LLaDA2Pipeline.__call__ defaults, but editing_threshold: unset as the scheduler's is
// (no editing unless a request or dlmc --knob asks for it; the pipeline's call passes 0.5).
Knobs declareKnobs(PolicyBuilder &p) {
  Builder &b = p.b();
  Knobs k;
  k.genLength = p.intKnob("gen_length", 2048, 1);
  k.blockLength = p.intKnob("block_length", 32, 1);
  k.stepsPerBlock = p.intKnob("steps_per_block", 32, 1, 65536);
  // SDAR's remasking strategies: low_confidence (its static and dynamic ones, by threshold) or
  // sequential (the quota's leftmost masks, whatever their confidence).
  k.remasking = p.textKnob(
      "remasking", StringRef("low_confidence"), "low_confidence,sequential",
      "the block-refinement policy has no remasking '{}' (expected low_confidence or sequential)");
  // Above 1 is allowed: every step then takes its quota's most confident.
  k.threshold =
      p.knob("threshold", p.f64(), {b.getF64FloatAttr(0.7), false, {}, {}, b.getI64IntegerAttr(0)});
  k.editingThreshold =
      p.knob("editing_threshold", p.f64(), {Attribute(), true, {}, {}, b.getI64IntegerAttr(0)});
  k.maxPostSteps = p.intKnob("max_post_steps", 16, 0, 65536);
  // 0: no bound on a block's steps (SDAR's loop has none).
  k.minimalTopk = p.intKnob("minimal_topk", 1, 0);
  k.eosEarlyStop = p.boolKnob("eos_early_stop", true);
  k.temperature = p.realKnob("temperature", 0.0);
  return k;
}

// Gives the steps a block may take: min(steps_per_block, gen_length // minimal_topk), diffusers'
// bound, or steps_per_block when minimal_topk is 0.
Value checkRequest(PolicyBuilder &p, const Knobs &k) {
  Value zero = p.integer(0), attentionBlock = p.fact("attention_block");
  p.check(
      p.gt("blockCausal", attentionBlock, zero),
      "the block-refinement policy decodes a block-causal model (LLaDA2, SDAR); this one is not");
  p.check(p.eq("blockIsAttention", k.blockLength, attentionBlock),
          "block_length {} is not the block the model attends by ({})", k.blockLength,
          attentionBlock);
  p.check(p.ge("hasMask", p.fact("mask"), zero),
          "the block-refinement policy needs a mask token; the model has none");
  p.check(p.eq("noShift", p.fact("shift"), zero),
          "the block-refinement policy decodes a model without a logit shift");
  p.check(p.eq("greedy", k.temperature, p.real(0.0)),
          "not supported yet: temperature {} in the block-refinement policy (it decodes greedily)",
          k.temperature);
  // One record a statement: the order of a call's arguments is the compiler's.
  Value bounded = p.gt("topkBounds", k.minimalTopk, zero);
  Value divisor = p.select("topkDivisor", bounded, k.minimalTopk, p.integer(1));
  Value perTopk = p.div("genPerTopk", k.genLength, divisor);
  Value unbounded = p.negate("unbounded", bounded);
  Value within = p.le("stepsWithin", k.stepsPerBlock, perTopk);
  Value stepsFit = p.either("stepsFit", unbounded, within);
  Value blockSteps = p.select("blockSteps", stepsFit, k.stepsPerBlock, perTopk);
  p.check(p.gt("blockStepsPositive", blockSteps, zero),
          "gen_length {} is shorter than minimal_topk {}", k.genLength, k.minimalTopk);
  return blockSteps;
}

// The block [begin, end), its steps' quotas, the steps it may take, whether it commits by position
// (sequential remasking), whether it edits and the threshold an edit needs (above every
// probability when it does not).
struct Block {
  Value begin, end, schedule, blockSteps, sequential, editing, editThreshold;
};

// One step: the block's forward over the cache of the earlier blocks, every row's argmax and its
// probability, the commits and edits decided on the canvas as it stands, then written; `held`
// are the mask steps so far and the post-mask steps. Gives whether the block ends and the next
// counters.
std::pair<Value, SmallVector<Value>> refineStep(PolicyBuilder &p, const Knobs &k, const Block &blk,
                                                Value s, ValueRange held) {
  ImplicitLocOpBuilder &b = p.b();
  Value zero = p.integer(0), one = p.integer(1);
  Value masked = p.value("blockMasks", gen::CountEqOp::create(b, p.i64(), p.fact("mask")));
  Value masksLeft = p.gt("masksLeft", masked, zero);
  Value noMasks = p.negate("noMasks", masksLeft);
  Value postSteps = p.add("postSteps", held[1], p.select("postStep", noMasks, one, zero));
  p.forward({"cached", blk.end, blk.begin, blk.begin, blk.end});
  auto sample = p.named({"token", "confidence"},
                        gen::SampleOp::create(b, p.tokens(), p.reals(), Type(), Type(), Type(),
                                              "gumbel_max", p.real(0.0), p.integer(-1), s, "all",
                                              StringAttr(), Value(), Value()));
  Value quota = p.value("quota", gen::ListAtOp::create(b, p.i64(), blk.schedule, held[0], zero));
  Value commits = p.ifElse(
      blk.sequential, p.flags(), {"commits"},
      [&]() -> SmallVector<Value> {
        return {gen::AcceptOp::create(b, Type(), Type(), p.flags(), Type(), "leftmost", "masked",
                                      sample.getConfidence(), quota, Value(), Value(), Value(),
                                      Value(), StringAttr(), StringAttr(), Value(), Value(),
                                      Value(), Value(), Value())
                    .getKeep()};
      },
      [&]() -> SmallVector<Value> {
        return {gen::AcceptOp::create(b, Type(), Type(), p.flags(), Type(), "threshold_quota",
                                      "masked", sample.getConfidence(), quota, k.threshold, Value(),
                                      Value(), Value(), StringAttr(), b.getStringAttr("f32"),
                                      Value(), Value(), Value(), Value(), Value())
                    .getKeep()};
      })[0];
  auto edit =
      p.named({"edited", "edits"},
              gen::EditOp::create(b, p.flags(), p.i64(), sample.getConfidence(), sample.getToken(),
                                  blk.editThreshold, b.getStringAttr("f32")));
  gen::RenoiseOp::create(b, p.text("mask"), "masked_only", commits, sample.getToken(), s);
  Value eos = p.value(
      "eosStop", gen::EosStopOp::create(b, p.i1(), commits, edit.getEdited(), sample.getToken()));
  Value finished = p.both("finished", k.eosEarlyStop, eos);
  Value maskSteps = p.add("maskSteps", held[0], p.select("maskStep", masksLeft, one, zero));
  // diffusers' check_block_should_continue: the steps with masks are spent, or a step without
  // masks edits nothing or passes max_post_steps; without editing, no mask left ends it at once.
  Value stepsSpent = p.both("stepsSpent", masksLeft, p.ge("stepsUsed", maskSteps, blk.blockSteps));
  Value settled = p.either("settled", p.eq("noEdits", edit.getCount(), zero),
                           p.gt("pastPostSteps", postSteps, k.maxPostSteps));
  Value refined = p.both("refined", noMasks, settled);
  Value masksAfter = p.value("masksAfter", gen::CountEqOp::create(b, p.i64(), p.fact("mask")));
  Value decoded =
      p.both("decoded", p.negate("notEditing", blk.editing), p.eq("noMaskAfter", masksAfter, zero));
  Value ends = p.either("blockEnds", p.either("spentOrRefined", stepsSpent, refined), decoded);
  return {p.either("done", finished, ends), {maskSteps, postSteps}};
}

} // namespace

void buildBlockRefinement(ModuleOp module) {
  PolicyBuilder p(module, "block-refinement");
  ImplicitLocOpBuilder &b = p.b();
  const Knobs k = declareKnobs(p);
  Value blockSteps = checkRequest(p, k);
  Value zero = p.integer(0), one = p.integer(1), mask = p.fact("mask");
  Value promptLength = p.fact("prompt_len"), B = k.blockLength;
  Value total = p.add("total", promptLength, k.genLength);
  // Blocks [firstBlock, numBlocks) of B from position 0; the first holds the prompt's tail.
  Value roundedUp = p.add("roundedUp", total, p.sub("blockLess", B, one));
  Value numBlocks = p.div("numBlocks", roundedUp, B);
  Value firstBlock = p.div("firstBlock", promptLength, B);
  Value blocks = p.sub("blocks", numBlocks, firstBlock);
  Value prefill = p.mul("prefill", firstBlock, B);
  gen::ReserveOp::create(b, p.mul("aligned", numBlocks, B), B);
  // block_length spread over the steps, the first ones taking the remainder (independent of how
  // many masks the block holds).
  Value schedule = p.value("schedule", gen::TransferScheduleOp::create(b, p.list(), B, blockSteps));
  Value sequential = p.eq("sequential", k.remasking, p.text("sequential"));
  Value editing = p.gt("editing", k.editingThreshold, p.real(0.0));
  Value editThreshold = p.select("editThreshold", editing, k.editingThreshold, p.real(2.0));
  Value limit = p.add("stepLimit", blockSteps, p.add("postLimit", k.maxPostSteps, one));
  Value firstStep = p.set("step", zero);
  // The prompt's whole blocks: their K/V, which no later block changes.
  p.ifThen(p.gt("hasPrefill", prefill, zero), [&] {
    p.forward({"full", prefill, prefill, zero, zero, {}, false});
  });
  ValueRange steps =
      p.blockLoop("block", blocks, firstStep, {"k"}, [&](Value index, ValueRange carried) {
        Value step = carried[0];
        Value begin = p.mul("begin", p.add("blockIndex", firstBlock, index), B);
        Value end = p.add("end", begin, B);
        gen::SeqExtendOp::create(b, p.sub("grow", end, p.fact("seq_len")), p.text("token"), mask,
                                 Value(), Value());
        gen::WindowOp::create(b, begin, end);
        const Block blk{begin, end, schedule, blockSteps, sequential, editing, editThreshold};
        PolicyBuilder::DenoiseLoop loop = p.denoiseLoop(
            "refine_step", limit, limit, step, {zero, zero}, {"i", "s", "maskSteps", "postSteps"},
            "ran", [&](Value, Value s, ValueRange held) { return refineStep(p, k, blk, s, held); });
        Value nextStep = p.add("step", step, loop.ran);
        Value lastBlock = p.eq("lastBlock", p.add("nextBlock", index, one), blocks);
        // The output is the generated part: from the prompt's end to gen_length.
        Value from = p.select("from", p.gt("pastPrompt", begin, promptLength), begin, promptLength);
        Value to = p.select("to", p.le("withinOutput", end, total), end, total);
        Value eos = p.value("eos", gen::CommitOp::create(b, p.i1(), from, to, index, lastBlock));
        gen::ExitIfOp::create(b, eos);
        // The block's final K/V, which the later blocks attend to.
        p.ifThen(p.negate("moreBlocks", lastBlock), [&] {
          p.forward({"append", end, begin, end, end, {}, false});
        });
        return SmallVector<Value>{nextStep};
      });
  Value length =
      p.select("length", p.le("shorter", p.fact("seq_len"), total), p.fact("seq_len"), total);
  gen::SeqTruncateOp::create(b, length);
  gen::FinishOp::create(b, steps[0]);
  p.finish();
}

} // namespace dlm::programs
