// I-DLM's introspective strided decoding (seed 003; docs/design/speculative-decoding.md, the
// authors' IDLMBlockN), for a causal model with a mask token (SDARForCausalLM): every forward
// feeds 2N-1 positions (N = stride) over the K/V cache under the model's plain causal mask,
// verifies the previous round's N-1 drafts and proposes the next ones, so one forward gives 1..N
// tokens.
//
//   prefill   the prompt, its K/V kept; t0 = a draw from its last logits (argmax at T = 0),
//             emitted.
//   cold      [t0, mask x 2(N-1)] after the cache: clean = a draw from row 0, drafts d_j =
//             argmax(row 1+j), q_j = softmax(row 1+j / T); emit clean; the cache keeps t0.
//   verify    [pending, d_0..d_{N-2}, mask x (N-1)]: spec_verify holds d_j to row j with alpha =
//             verify_alpha and p, q plain temperature softmaxes (no top-k / top-p); at the first
//             rejection (row a) emit d_0..d_{a-1} and the correction, keep the K/V of pending and
//             the passed drafts, and cold-start from the correction; when all pass, clean = a
//             draw from row N-1, the next drafts come from rows N.., emit the drafts and clean,
//             and the cache keeps pending and the drafts.
//
// Greedy (temperature 0) accepts a draft only when it is the target's argmax, so the output is
// the model's greedy autoregressive output. Sampled, the drafts are argmaxes while q is the
// softmax (the authors' choice), so the scheme is not strictly lossless. The authors' relaxations
// (lossy): verify_num_specs = k > 0 tests only the first k drafts and accepts the rest untested;
// fast_verify accepts a draft whose logit is among the fast_verify_topk largest of its row and
// corrects with the argmax. Not supported yet: confidence_accept_threshold, output_correction.
#include "compiler/programs/policies/Policies.h"
#include "compiler/programs/policies/PolicyBuilder.h"
#include "compiler/programs/policies/Shared.h"

namespace dlm::programs {
namespace {

using namespace mlir;
namespace gen = generate;

struct Knobs {
  Value maxNewTokens, stride;
  SamplingKnobs sampling;
  Value verifyAlpha, verifyNumSpecs, fastVerify, fastVerifyTopK;
};

Knobs declareKnobs(PolicyBuilder &p) {
  Knobs k;
  k.maxNewTokens = p.intKnob("max_new_tokens", 64);
  k.stride = p.intKnob("stride", 4);
  k.sampling = declareSamplingKnobs(p);
  k.verifyAlpha = p.realKnob("verify_alpha", 1.0);
  k.verifyNumSpecs = p.intKnob("verify_num_specs", 0);
  k.fastVerify = p.boolKnob("fast_verify", false);
  k.fastVerifyTopK = p.intKnob("fast_verify_topk", 5);
  return k;
}

// Checks the request; gives whether it samples (temperature > 0).
Value checkRequest(PolicyBuilder &p, const Knobs &k) {
  Value zero = p.integer(0);
  checkNewTokens(p, k.maxNewTokens);
  p.check(p.ge("strideValid", k.stride, p.integer(2)),
          "stride must be >= 2 (1 is autoregressive decoding), got {}", k.stride);
  p.check(p.ge("hasMask", p.fact("mask"), zero),
          "introspective strided decoding needs a model with a mask token");
  checkSampling(p, k.sampling);
  Value sampled = p.gt("sampled", k.sampling.temperature, p.real(0.0));
  p.check(p.ge("verifyNumValid", k.verifyNumSpecs, zero),
          "verify_num_specs must be >= 0 (0: every draft), got {}", k.verifyNumSpecs);
  p.check(p.ge("fastTopKValid", k.fastVerifyTopK, p.integer(1)),
          "fast_verify_topk must be >= 1, got {}", k.fastVerifyTopK);
  return sampled;
}

// What every round reads.
struct Shape {
  Value sampled, drafts, width, coldMasks, verifyCount, limit;
};

// The values a round carries to the next.
struct Round {
  Value done, c, step, committed, blocks, cold, q;
  SmallVector<Value> values() const { return {done, c, step, committed, blocks, cold, q}; }
};

// Verifies the previous round's drafts: gives keep (the cache's new length), whether every draft
// passed, the row clean is drawn from, and the correction at the first rejection.
SmallVector<Value> verifyDrafts(PolicyBuilder &p, const Knobs &k, const Shape &s, const Round &in) {
  ImplicitLocOpBuilder &b = p.b();
  Value firstDraft = p.add("firstDraft", in.c, p.integer(1));
  Value afterDrafts = p.add("afterDrafts", in.c, k.stride);
  gen::WindowOp::create(b, firstDraft, afterDrafts);
  gen::NarrowLogitsOp::create(b, p.integer(0), k.stride);
  auto verify = [&](Value draftLogits, Value alpha, StringRef rule,
                    Value topLogits) -> SmallVector<Value> {
    auto verdict =
        p.named({"accepted", "token"},
                gen::SpecVerifyOp::create(b, p.i64(), p.i64(), k.sampling.temperature, in.step,
                                          draftLogits, alpha, Value(), Value(),
                                          rule.empty() ? StringAttr() : b.getStringAttr(rule),
                                          topLogits, s.verifyCount));
    return {verdict.getAccepted(), verdict.getToken()};
  };
  ValueRange verdict = p.ifElse(
      k.fastVerify, {p.i64(), p.i64()}, {"accepted", "token"},
      [&]() -> SmallVector<Value> {
        return verify(Value(), Value(), "top_logits", k.fastVerifyTopK);
      },
      [&]() -> SmallVector<Value> { return verify(in.q, k.verifyAlpha, {}, Value()); });
  Value keep = p.add("keep", firstDraft, verdict[0]);
  gen::KvTrimOp::create(b, keep);
  Value propose = p.eq("propose", verdict[0], s.drafts);
  Value cleanRow = p.set("cleanRow", s.drafts);
  return {keep, propose, cleanRow, verdict[1]};
}

// Draws clean from row cleanRow at keep and the next drafts from the rows after it: gives
// afterClean, q, c and cold.
SmallVector<Value> propose(PolicyBuilder &p, const Knobs &k, const Shape &s, const Round &in,
                           Value keep, Value cleanRow) {
  ImplicitLocOpBuilder &b = p.b();
  Value one = p.integer(1), zero = p.integer(0);
  gen::SeqTruncateOp::create(b, keep);
  Value afterClean = p.add("afterClean", keep, one);
  gen::SeqExtendOp::create(b, one, p.text("token"), zero, Value(), Value());
  gen::WindowOp::create(b, keep, afterClean);
  Value draftRow = p.add("draftRow", cleanRow, one);
  gen::NarrowLogitsOp::create(b, cleanRow, draftRow);
  gen::SeqWriteOp::create(b, sampleRows(p, k.sampling, in.step, "clean").getToken());
  gen::SeqExtendOp::create(b, s.drafts, p.text("token"), zero, Value(), Value());
  Value draftsEnd = p.add("draftsEnd", afterClean, s.drafts);
  gen::WindowOp::create(b, afterClean, draftsEnd);
  Value draftRowsEnd = p.add("draftRowsEnd", draftRow, s.drafts);
  gen::NarrowLogitsOp::create(b, draftRow, draftRowsEnd);
  // The drafts are proposed greedily whatever the request samples with.
  const SamplingKnobs greedy{p.real(0.0), {}, {}};
  gen::SeqWriteOp::create(b, sampleRows(p, greedy, in.step, "proposed").getToken());
  Value q = p.ifElse(
      s.sampled, p.logits(), {"q"},
      [&]() -> SmallVector<Value> {
        return {p.value("q", gen::HoldLogitsOp::create(b, p.logits(), k.sampling.temperature))};
      },
      [&]() -> SmallVector<Value> { return {in.q}; })[0];
  Value c = p.set("c", keep);
  Value cold = p.set("cold", p.boolean(false));
  return {afterClean, q, c, cold};
}

Round round(PolicyBuilder &p, const Knobs &k, const Shape &s, const Round &in) {
  ImplicitLocOpBuilder &b = p.b();
  Value one = p.integer(1), zero = p.integer(0);
  gen::ExitIfOp::create(b, in.done);
  // seq ends at the pending token c (its K/V not cached), or at its drafts after it.
  Value masks = p.select("masks", in.cold, s.coldMasks, s.drafts);
  gen::SeqExtendOp::create(b, masks, p.text("token"), p.fact("mask"), Value(), Value());
  Value end = p.add("end", in.c, s.width);
  p.forward({"append", end, in.c, in.c, end});
  Value noCleanRow = p.set("cleanRow", zero);
  Value proposing = p.set("propose", p.boolean(true));
  Value noToken = p.set("token", zero);
  ValueRange verified = p.ifElse(
      in.cold, {p.i64(), p.i1(), p.i64(), p.i64()}, {"keep", "propose", "cleanRow", "token"},
      [&]() -> SmallVector<Value> {
        Value keep = p.add("keep", in.c, one);
        gen::KvTrimOp::create(b, keep);
        return {keep, proposing, noCleanRow, noToken};
      },
      [&]() -> SmallVector<Value> { return verifyDrafts(p, k, s, in); });
  Value keep = verified[0];
  ValueRange next = p.ifElse(
      verified[1], {p.i64(), p.logits(), p.i64(), p.i1()}, {"afterClean", "q", "c", "cold"},
      [&]() -> SmallVector<Value> { return propose(p, k, s, in, keep, verified[2]); },
      // The correction replaces the first rejected draft and starts the next round cold.
      [&]() -> SmallVector<Value> {
        Value afterClean = p.add("afterClean", keep, one);
        gen::SeqTruncateOp::create(b, keep);
        gen::SeqExtendOp::create(b, one, p.text("token"), verified[3], Value(), Value());
        Value c = p.set("c", keep);
        Value cold = p.set("cold", p.boolean(true));
        return {afterClean, in.q, c, cold};
      });
  Round out;
  out.q = next[1];
  out.c = next[2];
  out.cold = next[3];
  out.step = p.add("step", in.step, one);
  // Emit [committed, afterClean), at most up to the limit.
  Value emitEnd =
      p.value("emitEnd", gen::MinOp::create(b, p.i64(), next[0], s.limit, StringAttr()));
  Value atLimit = p.ge("atLimit", emitEnd, s.limit);
  Value eos =
      p.value("eos", gen::CommitOp::create(b, p.i1(), in.committed, emitEnd, in.blocks, atLimit));
  out.committed = p.set("committed", emitEnd);
  out.blocks = p.add("blocks", in.blocks, one);
  out.done = p.either("done", eos, atLimit);
  return out;
}

} // namespace

void buildIntrospectiveStrided(ModuleOp module) {
  PolicyBuilder p(module, "introspective-strided");
  ImplicitLocOpBuilder &b = p.b();
  const Knobs k = declareKnobs(p);
  Shape s;
  s.sampled = checkRequest(p, k);
  Value zero = p.integer(0), one = p.integer(1);
  s.drafts = p.sub("drafts", k.stride, one);
  s.width = p.add("width", k.stride, s.drafts);
  s.coldMasks = p.mul("coldMasks", s.drafts, p.integer(2));
  Value limitVerify = p.gt("limitVerify", k.verifyNumSpecs, zero);
  Value verifyLimit = p.value(
      "verifyLimit", gen::MinOp::create(b, p.i64(), k.verifyNumSpecs, s.drafts, StringAttr()));
  s.verifyCount = p.select("verifyCount", limitVerify, verifyLimit, s.drafts);
  s.limit = p.add("limit", p.fact("prompt_len"), k.maxNewTokens);
  Value reserved = p.add("reserved", s.limit, s.width);
  gen::ReserveOp::create(b, reserved, s.width);

  // Prefill, then t0.
  Round first;
  first.c = p.set("c", p.fact("prompt_len"));
  Value last = p.sub("last", first.c, one);
  p.forward({"full", first.c, first.c, last, first.c});
  const FirstToken token = commitFirstToken(p, k.sampling, first.c, s.limit, "t0");
  first.step = token.step;
  first.done = token.done;
  first.committed = token.committed;
  first.blocks = token.blocks;
  first.cold = p.set("cold", p.boolean(true));
  // The draft's distributions of the drafts awaiting verification (sampled decoding only).
  first.q = p.value("q", gen::DropLogitsOp::create(b, p.logits()));

  ValueRange rounds =
      p.blockLoop("round", k.maxNewTokens, first.values(),
                  {"round", "done", "c", "step", "committed", "blocks", "cold", "q"},
                  [&](Value, ValueRange carried) {
                    Round in{carried[0], carried[1], carried[2], carried[3],
                             carried[4], carried[5], carried[6]};
                    return round(p, k, s, in).values();
                  });
  // Drop the drafts proposed past the last emitted token.
  gen::SeqTruncateOp::create(b, rounds[3]);
  gen::FinishOp::create(b, rounds[2]);
  p.finish();
}

} // namespace dlm::programs
