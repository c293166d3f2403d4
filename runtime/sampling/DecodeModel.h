// What a decoding policy needs from a model: forwards over a token sequence, with or without the
// K/V of a prefix (or of the whole sequence, around a fed window) kept from an earlier forward,
// returning only the logit rows it will decode.
// Backends implement it; tests implement it with a fake model.
#pragma once

#include "runtime/sampling/LoopPlan.h"
#include "support/Status.h"

#include <cstdint>
#include <string_view>
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

// One forward of one of the artifact's forward functions (its kernel records' `function`).
// DiffusionGemma's encoder and decoder are two functions over the same weights and K/V cache.
struct ForwardSpec {
  enum class Mode {
    full,   // forwardFull: forget the cache, feed [0, count), keep the K/V of [0, keep)
    cached, // forwardCached: feed [keep, count) over the cached [0, keep); the cache is unchanged
    // Feed [keep, count) at positions keep.. over the cached [0, keep) (which must be exactly what
    // the cache holds), under the function's masks; afterwards the cache holds [0, count), all of
    // it final (a commit).
    append,
    // Feed [first, count) at positions first.. over the cached [0, keep) (exactly what the cache
    // holds; first <= keep <= count): the fed rows [first, keep) rewrite their slots for the
    // function's layers (a DFlash drafter's K/V of the context the target accepted), [keep,
    // count) attend but are dropped again; afterwards the cache holds [0, keep), final.
    extend,
    // The dual cache: feed [first, end) at positions first.. over a cache that holds the K/V of
    // every position [0, count) (0 <= first <= end <= count). The fed tokens attend, with the
    // function's masks over absolute positions, to the cached K/V of [0, first) and [end, count)
    // and to their own fresh K/V, which replace [first, end) in the cache: it still holds
    // [0, count) afterwards, pending from `first` on, and a later window over the same range
    // overwrites what this one wrote before reading it. `keep` is not read. After a failure that
    // may have written K/V the cache is empty, as after a failed full forward; a window refused
    // before (its arguments, or another part of its packed run) leaves it as it was.
    window,
  };
  Mode mode = Mode::full;
  std::string_view function; // empty: the default function ("forward")
  const int32_t *tokens = nullptr;
  int64_t count = 0;
  int64_t keep = 0;
  int64_t first = 0; // Mode::extend and Mode::window
  int64_t end = 0;   // Mode::window only
  LogitRows rows; // as in forwardFull / forwardCached: they index the fed tokens
  // Float rows for the fed tokens, [fed, inputWidth] with row 0 the first fed token, which the
  // function's soft_embedding records read; null: the forward has no input.
  const float *input = nullptr;
  int64_t inputWidth = 0;
  // How many fed rows (from inputFirst) `input` holds; -1: every fed row from there. The records
  // read zero rows past them (forward_input) or take another operand's (select_input_rows).
  int64_t inputRows = -1;
  // The fed row `input`'s row 0 belongs to; the soft_embedding records read no input (zero rows)
  // for the fed rows before it.
  int64_t inputFirst = 0;
  // The factor the soft_embedding records' rows take at run time, on top of their own scale.
  float inputScale = 1.0f;

  // The first fed token: 0 in full mode, `first` in extend and window mode, else `keep`.
  int64_t fedBegin() const {
    return mode == Mode::full ? 0 : mode == Mode::extend || mode == Mode::window ? first : keep;
  }
  // How many tokens it feeds: up to `end` in window mode, else up to `count`.
  int64_t fed() const { return (mode == Mode::window ? end : count) - fedBegin(); }

  // A window forward of the default function without input.
  static ForwardSpec window(const int32_t *tokens, int64_t count, int64_t first, int64_t end,
                            LogitRows rows) {
    ForwardSpec spec = of(Mode::window, tokens, count, 0, rows);
    spec.first = first;
    spec.end = end;
    return spec;
  }

  // A forward of the default function without input.
  static ForwardSpec of(Mode mode, const int32_t *tokens, int64_t count, int64_t keep,
                        LogitRows rows) {
    ForwardSpec spec;
    spec.mode = mode;
    spec.tokens = tokens;
    spec.count = count;
    spec.keep = keep;
    spec.rows = rows;
    return spec;
  }
};

struct BlockLoopResult {
  // Steps run = forwards whose logits were decoded (each one forward).
  int64_t steps = 0;
  // Whether a step's gate finished the loop; false when it ran every step of the plan without
  // (the caller decides whether that is the loop's cap or an error).
  bool finished = true;
};

// body(j) for a row j: a non-owning callable, as ThreadPool::parallelFor's body (a decode step
// must not allocate for it).
class RowBody {
public:
  template <typename F>
  RowBody(F &body) // NOLINT: made where it is passed
      : context_(&body), call_([](void *context, int64_t j) { (*static_cast<F *>(context))(j); }) {}
  void operator()(int64_t j) const { call_(context_, j); }

private:
  void *context_;
  void (*call_)(void *, int64_t);
};

class DecodeModel {
public:
  virtual ~DecodeModel() = default;

  // Logits width (the model's vocab_size).
  virtual int64_t vocabSize() const = 0;

  // Sizes every buffer for forwards of up to `tokens` tokens returning up to `logitRows` rows;
  // called before a request's first forward so that no forward allocates.
  virtual Status reserve(int64_t tokens, int64_t logitRows) = 0;

  // The forward: one of the artifact's forward functions over the sequence in one of the
  // ForwardSpec modes (full, cached, append, extend, window), with or without input rows. A
  // model serves the modes it can and refuses the others by name ("not supported yet: ...").
  virtual StatusOr<LogitsView> forward(const ForwardSpec &spec) = 0;

  // The default function without input, in full mode: forgets every cached K/V, runs
  // tokens[0, count) at positions 0..count-1, then keeps the K/V of [0, keep) (0 <= keep <= count)
  // for later cached forwards.
  StatusOr<LogitsView> forwardFull(const int32_t *tokens, int64_t count, int64_t keep,
                                   LogitRows rows) {
    return forward(ForwardSpec::of(ForwardSpec::Mode::full, tokens, count, keep, rows));
  }
  // The same in cached mode: runs tokens[keep, count) at positions keep..count-1, attending to the
  // cached K/V of [0, keep) (which must be exactly what the cache holds) and to each other; the
  // cache is left as it was. `rows` index the fed tokens, i.e. row 0 is position keep.
  StatusOr<LogitsView> forwardCached(const int32_t *tokens, int64_t count, int64_t keep,
                                     LogitRows rows) {
    return forward(ForwardSpec::of(ForwardSpec::Mode::cached, tokens, count, keep, rows));
  }

  // The last forward's captured rows ([fed tokens, width], `vocab` holding the width), written by
  // its function's `capture` record; empty when it has none. Valid until the next forward.
  virtual LogitsView capturedRows() const { return {}; }

  // Keeps the first `length` positions of the K/V cache (at most what it holds) and drops the
  // rest: what a speculative round does with the K/V of the drafts it rejected.
  virtual Status trimCache(int64_t /*length*/) {
    return Status::error("not supported yet: trimming the K/V cache of this model");
  }

  // body(j) for every j < rows, between forwards: a decode step's work per row (the sample
  // record's rows), which gives each row the same result on any thread and touches only that
  // row's outputs. A model with threads of its own may spread the rows over them (the CPU
  // backend's pool, whose threads wait between forwards); by default they run on the calling
  // thread, in order.
  virtual void forEachRow(int64_t rows, RowBody body) {
    for (int64_t j = 0; j < rows; ++j)
      body(j);
  }

  // Optional: whether denoiseBlock serves `plan` (the kernels it needs exist, the loop is on).
  virtual bool denoisesBlock(const LoopPlan & /*plan*/) const { return false; }

  // Optional: runs the plan's steps until a step's gate finishes the loop or the steps run out,
  // exactly as the host would run the records (same tokens, same forwards, same RNG steps), and
  // writes the final canvas into canvas[0, end - begin). The K/V cache is left as the host's
  // forwards leave it: [0, keep) of the last cached or keeping forward ([0, count) after window
  // forwards), else empty.
  virtual StatusOr<BlockLoopResult> denoiseBlock(const LoopPlan & /*plan*/, int32_t * /*canvas*/) {
    return Status::error("not supported yet: denoising a block on this model's device");
  }
};

} // namespace dlm::sampling
