// What every backend's packed forward (Backend::forwardBatch, docs/design/serving.md §2) shares,
// whatever device runs it: each SequenceForward's input rows checked and its sequence prepared
// (SequenceForwards.h's first half), the parts laid out one after another in the packed rows and
// logits, one run of the backend over all of them, and every prepared sequence finished again
// (the second half), whatever happened to the others.
#pragma once

#include "runtime/backend/SequenceForwards.h"

#include <string>
#include <vector>

namespace dlm {

// A forward's float input rows (ForwardSpec::input), for its soft_embedding and forward_input
// records: `count` rows (ForwardSpec::inputRows) of the fed ones, `width` values each. No rows:
// the records read zeros.
struct ForwardInput {
  const float *rows = nullptr;
  int64_t width = 0;
  int64_t count = 0;
  float scale = 1.0f; // ForwardSpec::inputScale
  int64_t first = 0;  // ForwardSpec::inputFirst: the fed row of rows[0]
};

// One sequence's share of a packed forward: its fed tokens at positions span.first.. of its KV
// sequence, the logit rows it wants and its input rows; and where its rows start in the packed
// activations and in the logits (layOutParts).
struct PackedPart {
  kv::SequenceId sequence = 0;
  const int32_t *tokens = nullptr;
  ForwardSpan span;
  sampling::LogitRows rows;
  ForwardInput input;
  int64_t offset = 0;
  int64_t logitOffset = 0;
};

// A packed run's fed rows and logit rows, all parts together.
struct PackedSize {
  int64_t tokens = 0;
  int64_t logitRows = 0;
};

// Checks each part's arguments against what the backend reserved (checkForwardArguments) and
// sets its offsets: the parts' rows, and their logit rows, follow each other in order.
inline StatusOr<PackedSize> layOutParts(std::vector<PackedPart> &parts, int64_t reservedTokens,
                                        int64_t reservedLogitRows, int64_t embeddingRows) {
  PackedSize size;
  for (PackedPart &part : parts) {
    DLM_RETURN_IF_ERROR(checkForwardArguments(part.tokens, part.span, part.rows, reservedTokens,
                                              reservedLogitRows, embeddingRows));
    part.offset = size.tokens;
    part.logitOffset = size.logitRows;
    size.tokens += part.span.count;
    size.logitRows += part.rows.count();
  }
  if (size.tokens > reservedTokens || size.logitRows > reservedLogitRows)
    return Status::error("forward: " + std::to_string(size.tokens) + " packed tokens and " +
                         std::to_string(size.logitRows) + " logit rows exceed the reserved " +
                         std::to_string(reservedTokens) + " and " +
                         std::to_string(reservedLogitRows));
  return size;
}

// One forward's part: its input rows checked against `program`, its sequence prepared for its
// mode (prepareForwardOnSequence; `sharePrefix` as it says).
inline StatusOr<PackedPart> preparePart(kv::PagedKvCache &cache,
                                        const program::KernelProgram &program,
                                        const SequenceForward &forward, bool sharePrefix) {
  const sampling::ForwardSpec &spec = forward.spec;
  ForwardInput input{spec.input, spec.inputWidth, 0, spec.inputScale, spec.inputFirst};
  if (spec.input) {
    DLM_ASSIGN_OR_RETURN(input.count, forwardInputRows(spec));
    DLM_RETURN_IF_ERROR(checkForwardInput(program, spec, input.count));
  }
  DLM_ASSIGN_OR_RETURN(PreparedForward prepared,
                       prepareForwardOnSequence(cache, forward.sequence, spec, sharePrefix));
  return PackedPart{forward.sequence, prepared.fed, prepared.span, prepared.rows, input};
}

// Backend::forwardBatch around the backend's run: prepares every forward's part, calls
// `run(parts, &wrote)` once (the backend lays the parts out, grows their sequences, runs its
// records and sets `wrote` once it got as far as writing K/V), then finishes every prepared
// sequence (finishForwardOnSequence), also when a later part fails to prepare or the run fails.
// `sharePrefix`: the function adopts and publishes prefix pages (SequenceForwards.h).
template <typename Run>
StatusOr<sampling::LogitsView> forwardPacked(kv::PagedKvCache &cache,
                                             const program::KernelProgram &program,
                                             const std::vector<SequenceForward> &forwards,
                                             Run &&run, bool sharePrefix = false) {
  std::vector<PackedPart> parts;
  parts.reserve(forwards.size());
  auto finishAll = [&](bool ran, bool wrote) {
    Status first = Status::ok();
    for (size_t i = 0; i < parts.size(); ++i) {
      Status finished =
          finishForwardOnSequence(cache, forwards[i].sequence, forwards[i].spec, ran, wrote,
                                  sharePrefix);
      if (first.isOk() && !finished.isOk())
        first = finished;
    }
    return first;
  };
  for (const SequenceForward &forward : forwards) {
    StatusOr<PackedPart> part = preparePart(cache, program, forward, sharePrefix);
    if (!part) {
      (void)finishAll(false, false);
      return part.status();
    }
    parts.push_back(*part);
  }
  bool wrote = false;
  StatusOr<sampling::LogitsView> logits = run(parts, &wrote);
  Status finished = finishAll(logits.isOk(), wrote);
  if (!logits)
    return logits.status();
  if (!finished)
    return finished;
  return logits;
}

// The rows a packed forward feeds, all forwards together (capturedRows() holds as many).
inline int64_t packedFedTokens(const std::vector<SequenceForward> &forwards) {
  int64_t fed = 0;
  for (const SequenceForward &forward : forwards)
    fed += forward.spec.fed();
  return fed;
}

} // namespace dlm
