// DFlash speculative decoding (seed 004; docs/design/speculative-decoding.md; the authors'
// dflash_generate, as tests/reference/dflash/README.md reads it), for an artifact compiled with
// `dlmc compile TARGET --draft DRAFT`: @forward is the target, which also captures its hidden
// states after the drafter's chosen layers; @draft is the drafter, which reads them.
//
//   prefill  the prompt through the target, its K/V kept, every position's features captured;
//            the first token from its last row (argmax at T = 0), the first anchor.
//   round    vs = min(block_size, tokens left); the drafter runs over the context rows it has
//            not seen (the features of the tokens accepted since its last round, written into its
//            own K/V layers) and the block [anchor, mask x (vs-1)] (mode=extend: the block's K/V
//            are dropped again); drafts d_j are drawn from its rows (q; argmax at T = 0); the
//            target verifies [anchor, d_1..d_{vs-1}] in one appending forward, capturing
//            features; spec_verify accepts a prefix (greedy: the drafts equal to the target's
//            argmax; sampled: u q < p, the residual max(0, p - q) at the first rejection) and
//            gives the bonus or the correction, the next anchor; the target's K/V are trimmed to
//            the anchor and the accepted drafts, whose features are the drafter's next context.
//
// Greedy output equals the target's greedy autoregressive output; sampled output has the target's
// distribution (the drafts are drawn from q, not taken as its argmax).
#include "compiler/programs/policies/Policies.h"
#include "compiler/programs/policies/PolicyBuilder.h"
#include "compiler/programs/policies/Shared.h"

namespace dlm::programs {
namespace {

using namespace mlir;
namespace gen = generate;

struct Knobs {
  Value maxNewTokens, blockSize;
  SamplingKnobs sampling;
};

void checkRequest(PolicyBuilder &p, const Knobs &k) {
  checkNewTokens(p, k.maxNewTokens);
  p.check(p.ge("blockValid", k.blockSize, p.integer(2)), "block_size must be >= 2, got {}",
          k.blockSize);
  p.check(p.ge("hasMask", p.fact("mask"), p.integer(0)),
          "DFlash decoding needs the drafter's mask token (dlmc compile TARGET --draft DRAFT)");
  checkSampling(p, k.sampling);
}

// The values a round carries to the next.
struct Round {
  Value done, start, step, committed, blocks, contextFrom, q, context;
  SmallVector<Value> values() const {
    return {done, start, step, committed, blocks, contextFrom, q, context};
  }
};

// One round: draft, verify, accept, emit.
Round round(PolicyBuilder &p, const Knobs &k, Value limit, Value sampled, const Round &in) {
  ImplicitLocOpBuilder &b = p.b();
  Value one = p.integer(1);
  gen::ExitIfOp::create(b, in.done);
  // The block [anchor, mask x drafts] at [start, end): no longer than what is left to generate.
  Value left = p.sub("left", limit, in.start);
  Value width = p.value("width", gen::MinOp::create(b, p.i64(), k.blockSize, left, StringAttr()));
  Value drafts = p.sub("drafts", width, one);
  Value end = p.add("end", in.start, width);
  Value firstDraft = p.add("firstDraft", in.start, one);
  Value drafting = p.gt("drafting", drafts, p.integer(0));
  Value q = p.ifElse(
      drafting, p.logits(), {"q"},
      [&]() -> SmallVector<Value> {
        gen::SeqExtendOp::create(b, drafts, p.text("token"), p.fact("mask"), Value(), Value());
        p.forward({"extend",
                   end,
                   in.start,
                   firstDraft,
                   end,
                   {},
                   std::nullopt,
                   "draft",
                   in.context,
                   in.contextFrom});
        gen::WindowOp::create(b, firstDraft, end);
        gen::SeqWriteOp::create(b, sampleRows(p, k.sampling, in.step, "proposed").getToken());
        return {p.ifElse(
            sampled, p.logits(), {"q"},
            [&]() -> SmallVector<Value> {
              return {
                  p.value("q", gen::HoldLogitsOp::create(b, p.logits(), k.sampling.temperature))};
            },
            [&]() -> SmallVector<Value> { return {in.q}; })[0]};
      },
      [&]() -> SmallVector<Value> { return {in.q}; })[0];
  // The target verifies the anchor and the drafts.
  Value context = p.value("context", p.forward({"append", end, in.start, in.start, end, {},
                                                std::nullopt, {}, {}, {}, p.logits()}));
  gen::WindowOp::create(b, firstDraft, end);
  auto verify = p.named({"accepted", "token"},
                        gen::SpecVerifyOp::create(b, p.i64(), p.i64(), k.sampling.temperature,
                                                  in.step, q, Value(), k.sampling.topK,
                                                  k.sampling.topP, StringAttr(), Value(), Value()));
  Value anchor = p.add("anchor", firstDraft, verify.getAccepted());
  gen::KvTrimOp::create(b, anchor);
  gen::SeqTruncateOp::create(b, anchor);
  gen::SeqExtendOp::create(b, one, p.text("token"), verify.getToken(), Value(), Value());
  Value produced = p.add("produced", verify.getAccepted(), one);
  Round out;
  out.context = gen::TakeRowsOp::create(b, p.logits(), produced, context);
  out.q = q;
  out.step = p.add("step", in.step, one);
  // Emit the accepted drafts and the new anchor, at most up to the limit.
  Value afterAnchor = p.add("afterAnchor", anchor, one);
  Value emitEnd =
      p.value("emitEnd", gen::MinOp::create(b, p.i64(), afterAnchor, limit, StringAttr()));
  Value atLimit = p.ge("atLimit", emitEnd, limit);
  Value eos =
      p.value("eos", gen::CommitOp::create(b, p.i1(), in.committed, emitEnd, in.blocks, atLimit));
  out.committed = p.set("committed", emitEnd);
  out.blocks = p.add("blocks", in.blocks, one);
  out.done = p.either("done", eos, atLimit);
  out.contextFrom = p.set("contextFrom", in.start);
  out.start = p.set("start", anchor);
  return out;
}

} // namespace

void buildDFlash(ModuleOp module) {
  PolicyBuilder p(module, "dflash");
  ImplicitLocOpBuilder &b = p.b();
  Knobs k;
  k.maxNewTokens = p.intKnob("max_new_tokens", 64);
  k.blockSize = p.intKnob("block_size", 16);
  k.sampling = declareSamplingKnobs(p);
  checkRequest(p, k);
  Value sampled = p.gt("sampled", k.sampling.temperature, p.real(0.0));
  Value zero = p.integer(0), one = p.integer(1);
  Value limit = p.add("limit", p.fact("prompt_len"), k.maxNewTokens);
  Value reserved = p.add("reserved", limit, k.blockSize);
  gen::ReserveOp::create(b, reserved, k.blockSize);

  // Prefill: the prompt's K/V and features; the first token, which is the first anchor.
  Round first;
  first.start = p.set("start", p.fact("prompt_len"));
  Value last = p.sub("last", first.start, one);
  first.context = p.value("context", p.forward({"full", first.start, first.start, last,
                                                  first.start, {}, std::nullopt, {}, {}, {},
                                                  p.logits()}));
  const FirstToken token = commitFirstToken(p, k.sampling, first.start, limit, "first");
  first.step = token.step;
  first.done = token.done;
  first.committed = token.committed;
  first.blocks = token.blocks;
  // The first position of the context rows the drafter has not seen.
  first.contextFrom = p.set("contextFrom", zero);
  first.q = p.value("q", gen::DropLogitsOp::create(b, p.logits()));

  ValueRange rounds = p.blockLoop(
      "round", k.maxNewTokens, first.values(),
      {"round", "done", "start", "step", "committed", "blocks", "contextFrom", "q", "context"},
      [&](Value, ValueRange carried) {
        Round in{carried[0], carried[1], carried[2], carried[3],
                 carried[4], carried[5], carried[6], carried[7]};
        return round(p, k, limit, sampled, in).values();
      });
  gen::SeqTruncateOp::create(b, rounds[3]);
  gen::FinishOp::create(b, rounds[2]);
  p.finish();
}

} // namespace dlm::programs
