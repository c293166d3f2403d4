// The autoregressive policy: one token per forward, left to right over a causal model's plain
// forward, sampled as a causal LM samples (temperature, top-k, top-p, Gumbel-max).
#include "compiler/programs/policies/Policies.h"
#include "compiler/programs/policies/PolicyBuilder.h"
#include "compiler/programs/policies/Shared.h"

namespace dlm::programs {

using namespace mlir;
namespace gen = generate;

void buildAutoregressive(ModuleOp module) {
  PolicyBuilder p(module, "autoregressive");
  ImplicitLocOpBuilder &b = p.b();
  Value maxNewTokens = p.intKnob("max_new_tokens", 64);
  const SamplingKnobs sampling = declareSamplingKnobs(p);

  Value zero = p.integer(0), one = p.integer(1);
  checkNewTokens(p, maxNewTokens);
  checkSampling(p, sampling);

  Value promptLength = p.fact("prompt_len");
  Value total =
      p.value("total", gen::AddOp::create(b, p.i64(), promptLength, maxNewTokens, StringAttr()));
  gen::ReserveOp::create(b, total, one);
  // The prompt but its last token fills the cache; each step feeds the last token.
  Value promptKeep =
      p.value("promptKeep", gen::SubOp::create(b, p.i64(), promptLength, one, StringAttr()));
  p.forward({"full", promptKeep, promptKeep, zero, zero, {}, false});
  Value lastIndex =
      p.value("lastIndex", gen::SubOp::create(b, p.i64(), maxNewTokens, one, StringAttr()));
  Value firstStep = p.value("step", gen::SetOp::create(b, p.i64(), zero));

  ValueRange steps =
      p.blockLoop("token", maxNewTokens, firstStep, {"t"}, [&](Value t, ValueRange carried) {
        Value step = carried[0];
        Value next = p.value("next", gen::SetOp::create(b, p.i64(), p.fact("seq_len")));
        Value last = p.value("last", gen::SubOp::create(b, p.i64(), next, one, StringAttr()));
        Value end = p.value("end", gen::AddOp::create(b, p.i64(), next, one, StringAttr()));
        // The last token through the model, appended to the cache; its logits predict `next`.
        p.forward({"append", next, last, last, next});
        gen::SeqExtendOp::create(b, one, p.text("token"), zero, Value(), Value());
        gen::WindowOp::create(b, next, end);
        gen::SampleOp sample = sampleRows(p, sampling, step, "token");
        Value kept =
            p.named({"kept"},
                    gen::AcceptOp::create(b, Type(), Type(), p.flags(), Type(), "top_k", "all",
                                          sample.getConfidence(), one, Value(), Value(), Value(),
                                          Value(), StringAttr(), StringAttr(), Value(), Value(),
                                          Value(), Value(), Value()))
                .getKeep();
        gen::RenoiseOp::create(b, p.text("uniform"), "every_rejected", kept, sample.getToken(),
                               step);
        Value nextStep = p.value("step", gen::AddOp::create(b, p.i64(), step, one, StringAttr()));
        Value lastToken = p.value("lastToken", gen::EqOp::create(b, p.i1(), t, lastIndex));
        Value eos = p.value("eos", gen::CommitOp::create(b, p.i1(), next, end, t, lastToken));
        gen::ExitIfOp::create(b, eos);
        return SmallVector<Value>{nextStep};
      });
  gen::FinishOp::create(b, steps[0]);
  p.finish();
}

} // namespace dlm::programs
