// What several policies declare, check and run alike, written once: the block lengths of the
// block-diffusion policies, the sampling knobs of the left-to-right ones, and the entropy-bound
// family's knobs and accept step (entropy-bound and diffusion-gemma).
#pragma once

#include "compiler/programs/policies/PolicyBuilder.h"

namespace dlm::programs {

// gen_length a positive multiple of block_length, and temperature >= 0, with validateRequest's
// messages (runtime/sampling/Decoding.cpp) in its order.
void checkBlockLengths(PolicyBuilder &p, mlir::Value genLength, mlir::Value blockLength,
                       mlir::Value temperature);

// The model is not block-causal: a block-causal one (LLaDA2, SDAR) attends by blocks laid from
// position 0, and `policy` lays its blocks from the prompt's end.
void checkNotBlockCausal(PolicyBuilder &p, llvm::StringRef policy);

// max_new_tokens > 0.
void checkNewTokens(PolicyBuilder &p, mlir::Value maxNewTokens);

// The sampling knobs of the left-to-right policies (autoregressive, dflash,
// introspective-strided): temperature (0: greedy), top_k (0: no limit) and top_p, as a causal
// LM samples.
struct SamplingKnobs {
  mlir::Value temperature, topK, topP;
};
SamplingKnobs declareSamplingKnobs(PolicyBuilder &p);
// temperature >= 0, top_k >= 0 (0: no limit), top_p in (0, 1].
void checkSampling(PolicyBuilder &p, const SamplingKnobs &k);
// Every fed row sampled at `step` by Gumbel-max under `k`, named {token, "confidence"}.
generate::SampleOp sampleRows(PolicyBuilder &p, const SamplingKnobs &k, mlir::Value step,
                              llvm::StringRef token);

// A speculative decoder's first round after the prompt's forward: the token at `start` sampled
// from the prompt's last row at step 0 (named `token`) and committed, done at EOS or `limit`.
struct FirstToken {
  mlir::Value step, done, committed, blocks;
};
FirstToken commitFirstToken(PolicyBuilder &p, const SamplingKnobs &k, mlir::Value start,
                            mlir::Value limit, llvm::StringRef token);

// The knobs of the entropy-bound stop rule, with transformers' DiffusionGemma defaults.
struct EntropyBoundKnobs {
  mlir::Value maxSteps, tMin, tMax, entropyBound, stabilityThreshold, confidenceThreshold;
};
EntropyBoundKnobs declareEntropyBoundKnobs(PolicyBuilder &p);

// A step of the entropy-bound family after its sample: accept by ascending entropy within the
// bound (the canvas converges when its argmax is stable and confident), gate on convergence or
// the last step `n`, renoise the rejected positions with `noise`. `held` are the carried argmax
// history and run; gives the gate's done and their next values.
struct EntropyStep {
  mlir::Value done, prev, run;
};
EntropyStep entropyBoundStep(PolicyBuilder &p, const EntropyBoundKnobs &k,
                             generate::SampleOp sample, mlir::ValueRange held, mlir::Value n,
                             mlir::Value s, mlir::Value lastIndex, mlir::Value noise,
                             llvm::StringRef precision);

} // namespace dlm::programs
