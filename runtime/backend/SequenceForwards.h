// What every backend's DecodeModel forwards share, whatever device runs the layers: the
// bookkeeping of the one paged-KV sequence a backend decodes (forwardFull forgets it and keeps
// `keep` tokens; forwardCached adds the fed tokens past `keep` and trims them again, leaving the
// cache as it was; an append forward adds them past `keep` and commits them; a window forward
// rewrites the fed window's slots inside the sequence in place; an extend forward rewrites
// [first, keep) and drops what it fed past `keep`)
// and the checks of a forward's arguments against what reserve() sized. A backend's packed run
// (PackedForwards.h) sits between a sequence's prepare and finish: it grows the sequence to
// span.keys slots, writes the fed tokens' K/V to slots span.first.. and lets them attend to
// slots [0, span.keys).
#pragma once

#include "runtime/kv/PagedKvCache.h"
#include "runtime/program/KernelProgram.h"
#include "runtime/sampling/DecodeModel.h"
#include "support/Status.h"

#include <algorithm>
#include <string>
#include <vector>

namespace dlm {

// One backend forward: `count` tokens at positions (and K/V slots) first.., attending to the
// slots [0, keys) of the sequence (first + count <= keys: past the fed tokens only for a window).
struct ForwardSpan {
  int64_t first = 0;
  int64_t count = 0;
  int64_t keys = 0;
};

inline Status checkForwardArguments(const int32_t *tokens, const ForwardSpan &span,
                                    sampling::LogitRows rows, int64_t reservedTokens,
                                    int64_t reservedLogitRows, int64_t embeddingRows) {
  auto str = [](int64_t value) { return std::to_string(value); };
  const int64_t count = span.count;
  if (span.first < 0 || count < 0 || span.first + count > span.keys)
    return Status::error("forward: " + str(count) + " tokens at " + str(span.first) +
                         " do not fit in " + str(span.keys) + " key slots");
  if (rows.begin < 0 || rows.begin > rows.end || rows.end > count)
    return Status::error("forward: logit rows [" + str(rows.begin) + ", " + str(rows.end) +
                         ") are outside the " + str(count) + " tokens fed");
  if (span.keys > reservedTokens)
    return Status::error("forward: positions up to " + str(span.keys) +
                         " exceed the reserved " + str(reservedTokens));
  if (rows.count() > reservedLogitRows)
    return Status::error("forward: " + str(rows.count()) + " logit rows exceed the reserved " +
                         str(reservedLogitRows));
  for (int64_t i = 0; i < count; ++i)
    if (tokens[i] < 0 || tokens[i] >= embeddingRows)
      return Status::error("forward: token id " + str(tokens[i]) + " is outside [0, " +
                           str(embeddingRows) + ")");
  return Status::ok();
}

// The input rows a ForwardSpec gives (ForwardSpec::inputRows, -1: every fed row from
// inputFirst), checked against the fed tokens.
inline StatusOr<int64_t> forwardInputRows(const sampling::ForwardSpec &spec) {
  const int64_t fed = spec.fed();
  const int64_t given = spec.inputRows < 0 ? fed - spec.inputFirst : spec.inputRows;
  if (spec.inputRows < -1 || spec.inputFirst < 0 || spec.inputFirst > fed ||
      given > fed - spec.inputFirst)
    return Status::error(
        "forward: " + std::to_string(spec.inputRows) + " input rows" +
        (spec.inputFirst ? " from fed row " + std::to_string(spec.inputFirst) : std::string()) +
        " for " + std::to_string(fed) + " fed tokens");
  return given;
}

// A forward's input rows (`inputRows` of them, forwardInputRows) against the function's records:
// some record reads them, in the width it reads.
inline Status checkForwardInput(const program::KernelProgram &program,
                                const sampling::ForwardSpec &spec, int64_t inputRows) {
  using program::KernelKind;
  auto str = [](int64_t value) { return std::to_string(value); };
  if (!program.readsInput())
    return Status::error(
        "forward: function '" + program.function +
        "' reads no input rows (it has no soft_embedding or forward_input record)");
  // forward_input and select_input_rows count input rows from the first fed row.
  const bool countsFromFirstRow =
      std::any_of(program.kernels.begin(), program.kernels.end(), [](const auto &k) {
        return k.kind() == KernelKind::forwardInput || k.kind() == KernelKind::selectInputRows;
      });
  if (spec.inputFirst != 0 && countsFromFirstRow)
    return Status::error("not supported yet: input rows from a later fed row than the first "
                         "with forward_input or select_input_rows records (function '" +
                         program.function + "')");
  for (const program::ProgramRecord &k : program.kernels) {
    if (k.kind() == KernelKind::forwardInput && spec.inputWidth != program.forwardInputWidth)
      return Status::error("forward: input rows of " + str(spec.inputWidth) +
                           " values do not fit record '" + k.fullName + "', which reads " +
                           str(program.forwardInputWidth));
    if (k.kind() != KernelKind::softEmbedding)
      continue;
    if (spec.inputWidth < 1 || spec.inputWidth > k.weight()->rows)
      return Status::error("forward: input rows of " + str(spec.inputWidth) +
                           " values do not fit record '" + k.fullName + "', whose table has " +
                           str(k.weight()->rows) + " rows");
    // A soft embedding reads a row for every fed token from inputFirst.
    if (inputRows != spec.fed() - spec.inputFirst)
      return Status::error("forward: record '" + k.fullName + "' reads an input row for each of " +
                           str(spec.fed() - spec.inputFirst) + " fed tokens, the input holds " +
                           str(inputRows));
  }
  return Status::ok();
}

// Whether the K/V `program` writes for a slot depend on the tokens up to that slot alone, so that
// pages of equal token prefixes hold equal K/V (BackendOptions::sharePrefixes): every attention is
// causal (a window too), the function reads no input rows and captures none, and no other of the
// artifact's functions (`all`, `program` among them) writes K/V into the same pages.
inline bool kvDependsOnPrefixOnly(const program::KernelProgram &program,
                                  const std::vector<const program::KernelProgram *> &all) {
  using program::KernelKind;
  auto writesKv = [](const program::KernelProgram &p) {
    return std::any_of(p.kernels.begin(), p.kernels.end(),
                       [](const auto &k) { return k.kind() == KernelKind::kvStore; });
  };
  if (program.readsInput() || program.captureWidth > 0 || !writesKv(program))
    return false;
  for (const program::ProgramRecord &k : program.kernels)
    if (k.kind() == KernelKind::attention &&
        k.as<spec::kernels::AttentionParams>().mask != spec::kernels::AttentionMask::causal)
      return false;
  return std::none_of(all.begin(), all.end(), [&](const program::KernelProgram *other) {
    return other != &program && writesKv(*other);
  });
}

// The KV pool's pages, for serving metrics.
struct KvPoolStats {
  int64_t pages = 0;
  int64_t inUse = 0;        // held by a sequence or the prefix index
  int64_t cached = 0;       // held by the prefix index alone (free on demand)
  int64_t adoptedTokens = 0; // prefill tokens taken from published pages, so far
};

// Backend::kvPoolStats of a backend's pool.
inline KvPoolStats poolStatsOf(const kv::PagedKvCache &cache) {
  KvPoolStats stats;
  stats.pages = cache.pageCount();
  stats.cached = cache.cachedPages();
  stats.inUse = cache.pageCount() - (cache.freePages() - stats.cached);
  stats.adoptedTokens = cache.adoptedTokens();
  return stats;
}

// DecodeModel::trimCache: the sequence keeps its first `length` slots.
inline Status trimSequence(kv::PagedKvCache &cache, kv::SequenceId sequence, int64_t length) {
  if (length < 0 || length > cache.length(sequence))
    return Status::error("cannot trim the KV cache of " + std::to_string(cache.length(sequence)) +
                         " tokens to " + std::to_string(length));
  return cache.trim(sequence, length);
}

// A ForwardSpec's mode on its KV sequence, in two halves around the backend's run, so that a
// packed forward (docs/design/serving.md §2) prepares every sequence, runs once and finishes
// each:
//   full    forget the sequence, feed [0, count); afterwards keep [0, keep), committed
//   cached  feed [keep, count) over exactly [0, keep); afterwards the cache is as it was
//   append  feed [keep, count) over exactly [0, keep); afterwards [0, count), committed
//   extend  feed [first, count) over exactly [0, keep), rewriting [first, keep) (only the
//           function's layers: its kv_store records are all that write); afterwards [0, keep),
//           committed
//   window  feed [first, end) over exactly [0, count), rewriting [first, end); afterwards
//           [0, count), pending from first on
// After a failed run: full, and extend and window once it wrote K/V, forget the sequence
// (half-written K/V); cached and append are back to [0, keep), a window refused before its
// kernels to [0, count).
//
// `sharePrefix` (the function's K/V of a slot depend on the tokens up to it alone, and the cache
// shares prefixes): a full forward first adopts the published pages of its longest published
// prefix and feeds only the rest (never a requested logit row's token, never every token), and
// every forward that commits publishes its full committed pages (PagedKvCache.h).
struct PreparedForward {
  const int32_t *fed = nullptr; // the first fed token
  ForwardSpan span;
  sampling::LogitRows rows;     // the requested rows among the fed tokens
};

// A window forward: the fed tokens' K/V overwrite their slots in place, so the slots become
// pending again (only the prefix before the window stays final) and a page a fork shares is
// copied first.
inline StatusOr<PreparedForward> prepareWindowOnSequence(kv::PagedKvCache &cache,
                                                         kv::SequenceId sequence,
                                                         const sampling::ForwardSpec &spec) {
  auto str = [](int64_t value) { return std::to_string(value); };
  const int64_t count = spec.count;
  if (cache.length(sequence) != count)
    return Status::error("window forward: the KV cache holds " + str(cache.length(sequence)) +
                         " tokens, the caller expected all " + str(count));
  if (spec.first < 0 || spec.first > spec.end || spec.end > count)
    return Status::error("window forward: the fed window [" + str(spec.first) + ", " +
                         str(spec.end) + ") is outside the " + str(count) + " cached tokens");
  DLM_RETURN_IF_ERROR(cache.rewrite(sequence, spec.first, spec.end));
  return PreparedForward{spec.tokens + spec.first,
                         ForwardSpan{spec.first, spec.end - spec.first, count}, spec.rows};
}

inline StatusOr<PreparedForward> prepareForwardOnSequence(kv::PagedKvCache &cache,
                                                          kv::SequenceId sequence,
                                                          const sampling::ForwardSpec &spec,
                                                          bool sharePrefix = false) {
  using Mode = sampling::ForwardSpec::Mode;
  auto str = [](int64_t value) { return std::to_string(value); };
  const int64_t count = spec.count, keep = spec.keep;
  if (spec.mode == Mode::full) {
    if (keep < 0 || keep > count)
      return Status::error("forward: keep " + str(keep) + " is outside [0, " + str(count) + "]");
    DLM_RETURN_IF_ERROR(cache.trim(sequence, 0));
    int64_t shared = 0;
    if (sharePrefix && !spec.input) {
      const int64_t most = std::min(spec.rows.count() > 0 ? spec.rows.begin : count, count - 1);
      DLM_ASSIGN_OR_RETURN(shared, cache.adoptPrefix(sequence, spec.tokens, most));
    }
    const sampling::LogitRows rows = spec.rows.count() > 0
                                         ? sampling::LogitRows{spec.rows.begin - shared,
                                                               spec.rows.end - shared}
                                         : sampling::LogitRows{0, 0};
    return PreparedForward{spec.tokens + shared, ForwardSpan{shared, count - shared, count},
                           rows};
  }
  if (spec.mode == Mode::window)
    return prepareWindowOnSequence(cache, sequence, spec);
  const int64_t first = spec.mode == Mode::extend ? spec.first : keep;
  if (cache.length(sequence) != keep || keep < 0 || keep > count || first < 0 || first > keep) {
    const std::string holds =
        " forward: the KV cache holds " + str(cache.length(sequence)) + " tokens, the caller expected ";
    if (spec.mode == Mode::extend)
      return Status::error("extend" + holds + str(keep) + ", feeding [" + str(first) + ", " +
                           str(count) + ")");
    return Status::error((spec.mode == Mode::cached ? "cached" : "append") + holds + str(keep) +
                         " of " + str(count));
  }
  // Slots a fork shares are copied before the rewrite writes them.
  if (spec.mode == Mode::extend)
    DLM_RETURN_IF_ERROR(cache.rewrite(sequence, first, keep));
  return PreparedForward{spec.tokens + first, ForwardSpan{first, count - first, count},
                         spec.rows};
}

// `wrote`: the run got as far as writing K/V (a packed run refused before its first kernel did
// not: an extend's rewritten slots still hold their K/V and are committed again).
inline Status finishForwardOnSequence(kv::PagedKvCache &cache, kv::SequenceId sequence,
                                      const sampling::ForwardSpec &spec, bool ran,
                                      bool wrote = true, bool sharePrefix = false) {
  using Mode = sampling::ForwardSpec::Mode;
  switch (spec.mode) {
  case Mode::full:
  case Mode::extend:
    if (!ran && (wrote || spec.mode == Mode::full))
      return cache.trim(sequence, 0);
    DLM_RETURN_IF_ERROR(cache.trim(sequence, spec.keep));
    break;
  case Mode::cached:
    return cache.trim(sequence, spec.keep);
  case Mode::append:
    if (!ran)
      return cache.trim(sequence, spec.keep);
    break;
  case Mode::window:
    // A failed window that got as far as its kernels may have written part of its range: forget
    // the sequence, as a failed full forward does, so that nothing runs on half-written K/V. One
    // refused before (another part of its packed run failed) keeps [0, count). The slots from
    // `first` on stay pending.
    return !ran && wrote ? cache.trim(sequence, 0) : Status::ok();
  }
  DLM_RETURN_IF_ERROR(cache.commit(sequence));
  return sharePrefix && ran ? cache.publishPrefix(sequence, spec.tokens) : Status::ok();
}

// One sequence's forward in a packed batch (docs/design/serving.md §2).
struct SequenceForward {
  kv::SequenceId sequence = 0;
  sampling::ForwardSpec spec;
};

} // namespace dlm
