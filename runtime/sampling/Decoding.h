// What decoding on a DecodeModel shares, whichever decode program runs (runtime/program/
// DecodeInterpreter.h): the model's token facts, the cache modes, committed blocks and the outcome,
// and the forward runner that counts forwards and captures the first decoded logits. All
// randomness comes from CounterRng.h keyed by (seed, request, stream, step, position); `step`
// counts the forwards whose logits are decoded, over the whole request.
#pragma once

#include "runtime/profile/Profiler.h"
#include "runtime/sampling/DecodeModel.h"
#include "support/Status.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

namespace dlm::sampling {

// What decoding needs to know about the model's vocabulary.
struct TokenFacts {
  int64_t maskTokenId = -1; // -1: none
  std::vector<int64_t> eosTokenIds;
  bool logitShift = false; // Dream: the cached chunk starts one position early
  int64_t attentionBlock = 0; // a block-causal model's block (LLaDA2); 0: none

  bool isEos(int64_t token) const;
};


// A block (a canvas) whose tokens are final. Ids stop after the
// first EOS of the output; nothing follows a block that contains one.
struct CommittedBlock {
  int64_t index = 0;
  const int32_t *ids = nullptr;
  int64_t count = 0;
  // Nothing follows it: the request's last block, or one that holds an EOS.
  bool last = false;
};
using BlockCallback = std::function<void(const CommittedBlock &)>;

struct DecodeOutcome {
  // Generated ids, prompt excluded, up to and including the first EOS.
  std::vector<int32_t> outputIds;
  int64_t forwards = 0;
  // Forwards whose logits were decoded (the counter-RNG step count).
  int64_t decodeSteps = 0;
  int64_t blocks = 0;
  // [firstLogitRows, vocab] when captured.
  std::vector<float> firstLogits;
  int64_t firstLogitRows = 0;
};

// Runs forwards, counts them, and keeps the first decoded forward's logits when asked.
class ForwardRunner {
public:
  ForwardRunner(DecodeModel &model, bool captureFirstLogits, DecodeOutcome &outcome,
                profile::Profiler *profiler = nullptr, uint64_t request = 0)
      : model_(model), capture_(captureFirstLogits), outcome_(outcome), profiler_(profiler),
        request_(request) {}

  // A timer on the request's track (nothing without a profiler).
  profile::Scope scope(profile::Category category, const char *name, int64_t index = -1) const {
    return profile::Scope(profiler_, category, name, profile::TrackKind::request, request_, -1,
                          -1, index);
  }

  // A full forward (see DecodeModel::forwardFull); `decoded` is false for passes that only fill
  // the cache, whose logits are never looked at.
  StatusOr<LogitsView> full(const std::vector<int32_t> &tokens, int64_t count, int64_t keep,
                            LogitRows rows, bool decoded = true);
  StatusOr<LogitsView> cached(const std::vector<int32_t> &tokens, int64_t count, int64_t keep,
                              LogitRows rows);
  // A window forward (ForwardSpec::Mode::window): `rows` index the fed tokens
  // [feedBegin, feedEnd).
  StatusOr<LogitsView> window(const std::vector<int32_t> &tokens, int64_t count, int64_t feedBegin,
                              int64_t feedEnd, LogitRows rows);

  // A forward through DecodeModel::forward (a named function, an input, or append mode);
  // `decoded` as for full().
  StatusOr<LogitsView> forward(const ForwardSpec &spec, bool decoded);

  // Runs `plan` on the model's device when it serves it and no first-logits capture is pending
  // (a device loop never brings logits to the host), writing the block into `canvas` and
  // counting its forwards. Returns what ran, or nullopt when the caller must run the block on
  // the host.
  StatusOr<std::optional<BlockLoopResult>> runOnDevice(const LoopPlan &plan, int32_t *canvas);
  // runOnDevice for the policies' loops, which always finish within their plan: the steps run.
  StatusOr<std::optional<int64_t>> denoiseBlockOnDevice(const LoopPlan &plan, int32_t *canvas);

private:
  StatusOr<LogitsView> finish(StatusOr<LogitsView> logits, LogitRows wanted, bool captured);

  DecodeModel &model_;
  bool capture_;
  DecodeOutcome &outcome_;
  profile::Profiler *profiler_;
  uint64_t request_;
};

// Ends the outcome: output = sequence[promptLength:] cut after its first EOS.
void finishOutput(const std::vector<int32_t> &sequence, size_t promptLength,
                  const TokenFacts &facts, DecodeOutcome &outcome);

// Reports sequence[begin, end) as committed block `index`, cut after the first EOS; returns true
// when the block holds an EOS (generation stops after it).
// `last`: the request has no block after this one (an EOS makes any block last).
bool reportBlock(const std::vector<int32_t> &sequence, int64_t begin, int64_t end, int64_t index,
                 bool last, const TokenFacts &facts, const BlockCallback &onBlock);

} // namespace dlm::sampling
