// What a decoding policy needs from a model: forwards over a token sequence, with or without the
// K/V of a prefix kept from an earlier forward, returning only the logit rows it will decode.
// Backends implement it; tests implement it with a fake model.
#pragma once

#include "runtime/sampling/DecodingKnobs.h"
#include "support/Status.h"

#include <cstdint>
#include <vector>

namespace dlm::sampling {

// Rows [begin, end) of the tokens a forward is fed, after the logit shift (Dream), which a
// backend applies itself: row r of a shifting model is the prediction made at fed row r - 1 and
// row 0 keeps its own.
struct LogitRows {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t count() const { return end - begin; }
};

// float32 logits [rows, vocab], owned by the model and valid until its next forward.
struct LogitsView {
  const float *data = nullptr;
  int64_t rows = 0;
  int64_t vocab = 0;
  const float *row(int64_t r) const { return data + r * vocab; }
};

// One block's (low-confidence) or canvas's (entropy-bound) denoising steps, handed whole to a
// model that can run them without returning to the host between steps (DecodeModel::
// denoiseBlock). Everything the host loop would decide per step is here, so that the device
// makes exactly its decisions; the policies (LowConfidence.cpp, EntropyBound.cpp) fill it.
struct BlockLoopRequest {
  Policy policy = Policy::lowConfidence;
  const DecodingKnobs *knobs = nullptr;
  // Prefix cache: K/V of [0, keep) is reused between steps (entropy-bound: the caller has run the
  // prefix forward; low-confidence: the block's first step is the full forward that keeps it).
  // Without it every step is a full forward over sequence[0, total).
  bool prefixCache = false;
  int64_t keep = 0;
  // sequence[0, total) as a full forward feeds it; the block is [begin, end) and holds the
  // block's initial canvas (masks, or the entropy-bound initial noise).
  const int32_t *sequence = nullptr;
  int64_t total = 0;
  int64_t begin = 0;
  int64_t end = 0;
  int32_t maskToken = -1;
  // The sampler's excluded token (the mask under mask noise; -1: none) and, entropy-bound, the
  // renoise noise.
  int64_t excludedToken = -1;
  bool maskNoise = true;
  // Counter RNG keys; firstStep is the request's decoded-forward count before this block.
  uint64_t seed = 0;
  uint64_t request = 0;
  int64_t firstStep = 0;
  // The step cap: steps per block (low-confidence) or max_steps (entropy-bound).
  int64_t stepCap = 0;
  // Low-confidence with a fixed count: tokens unmasked at step i (numTransferTokens).
  std::vector<int64_t> transferSchedule;
};

struct BlockLoopResult {
  // Steps run = forwards whose logits were decoded (each one forward).
  int64_t steps = 0;
};

class DecodeModel {
public:
  virtual ~DecodeModel() = default;

  // Logits width (the model's vocab_size).
  virtual int64_t vocabSize() const = 0;

  // Sizes every buffer for forwards of up to `tokens` tokens returning up to `logitRows` rows;
  // called before a request's first forward so that no forward allocates.
  virtual Status reserve(int64_t tokens, int64_t logitRows) = 0;

  // Forgets every cached K/V, runs tokens[0, count) at positions 0..count-1, then keeps the K/V
  // of [0, keep) (0 <= keep <= count) for later forwardCached calls.
  virtual StatusOr<LogitsView> forwardFull(const int32_t *tokens, int64_t count, int64_t keep,
                                           LogitRows rows) = 0;

  // Runs tokens[keep, count) at positions keep..count-1, attending to the cached K/V of
  // [0, keep) (which must be exactly what the cache holds) and to each other; the cache is left
  // as it was. `rows` index the fed tokens, i.e. row 0 is position keep.
  virtual StatusOr<LogitsView> forwardCached(const int32_t *tokens, int64_t count, int64_t keep,
                                             LogitRows rows) = 0;

  // Optional: whether denoiseBlock serves `request` (the kernels it needs exist, the loop is on).
  virtual bool denoisesBlock(const BlockLoopRequest & /*request*/) const { return false; }

  // Optional: runs the block's steps until it converges or reaches the step cap, exactly as the
  // policy's host loop would (same tokens, same forwards, same RNG steps), and writes the final
  // block into canvas[0, end - begin). The K/V cache is left as the host loop leaves it: [0,
  // keep) with the prefix cache, empty without.
  virtual StatusOr<BlockLoopResult> denoiseBlock(const BlockLoopRequest & /*request*/,
                                                 int32_t * /*canvas*/) {
    return Status::error("not supported yet: denoising a block on this model's device");
  }
};

} // namespace dlm::sampling
