// The decoding policies as they were written before decode programs: one C++ loop per policy on a
// DecodeModel, exactly as tests/reference/samplers.py runs them:
//
//   low-confidence  LLaDA / Fast-dLLM blocks with fixed-count or confidence-threshold unmasking
//                   (LowConfidence.cpp);
//   entropy-bound   DiffusionGemma's entropy-bound canvas on a mask-absorbing model
//                   (EntropyBound.cpp).
//
// No request runs them any more: sessions run the artifact's decode programs. They stay here, in
// the tests, as the oracle the interpreter is held to (tests/runtime/program/DifferentialDecodeTest,
// DeviceLoopPlanTest) and the subject of the hand-predicted call sequences of DecodingTest, until
// the programs are lowered from @generate and checked against the PyTorch references alone.
#pragma once

#include "runtime/sampling/Decoding.h"
#include "tests/runtime/sampling/legacy/DecodingKnobs.h"

namespace dlm::sampling {

// The cache mode, a request field of the legacy decoders (a knob of the decode programs).
enum class CacheMode {
  // Every forward recomputes the whole sequence: the reference semantics.
  none,
  // Fast-dLLM prefix cache: K/V of the committed prefix is kept between the steps of a block.
  prefix,
  // Fast-dLLM / dInfer dual cache: the K/V of the whole sequence (prefix and suffix) from a
  // block's first forward; later steps feed only the block (ForwardSpec::Mode::window).
  dual,
};

StatusOr<CacheMode> parseCacheMode(std::string_view name);
const char *cacheModeName(CacheMode mode);

struct DecodeRequest {
  std::vector<int32_t> prompt;
  DecodingKnobs knobs;
  uint64_t seed = 0;
  uint64_t request = 0;
  CacheMode cache = CacheMode::none;
  // Keep the logits of the first forward whose logits are decoded, every row of it.
  bool captureFirstLogits = false;
  // Times the request, its blocks, steps and forwards on the track of `request` (null: off).
  profile::Profiler *profiler = nullptr;
};

// Checks a request against the knobs and the model: empty prompt, ids outside the vocabulary,
// gen_length not a multiple of block_length, steps not divisible by the number of blocks, a
// policy that needs a mask token the model lacks, out-of-range temperatures and bounds.
Status validateRequest(const DecodeRequest &request, const TokenFacts &facts, int64_t vocab);

// Tokens and logit rows the request's forwards need at most (for DecodeModel::reserve).
int64_t maxSequenceTokens(const DecodeRequest &request);
int64_t maxLogitRows(const DecodeRequest &request);

// Validates, reserves and runs `request` on `model`.
StatusOr<DecodeOutcome> decode(DecodeModel &model, const TokenFacts &facts,
                               const DecodeRequest &request, const BlockCallback &onBlock);

Status runLowConfidence(ForwardRunner &runner, DecodeModel &model, const TokenFacts &facts,
                        const DecodeRequest &request, const BlockCallback &onBlock,
                        DecodeOutcome &outcome);
Status runEntropyBound(ForwardRunner &runner, DecodeModel &model, const TokenFacts &facts,
                       const DecodeRequest &request, const BlockCallback &onBlock,
                       DecodeOutcome &outcome);

} // namespace dlm::sampling
