// What every backend's DecodeModel forwards share, whatever device runs the layers: the
// bookkeeping of the one paged-KV sequence a backend decodes (forwardFull forgets it and keeps
// `keep` tokens; forwardCached adds the fed tokens past `keep` and trims them again, leaving the
// cache as it was) and the checks of a forward's arguments against what reserve() sized.
//
// `run(tokens, count, first, rows)` is the backend's forward over tokens at positions first..:
// it appends `count` tokens to the sequence and returns the requested logit rows.
#pragma once

#include "runtime/kv/PagedKvCache.h"
#include "runtime/sampling/DecodeModel.h"
#include "support/Status.h"

#include <string>

namespace dlm {

inline Status checkForwardArguments(const int32_t *tokens, int64_t count, int64_t first,
                                    sampling::LogitRows rows, int64_t reservedTokens,
                                    int64_t reservedLogitRows, int64_t embeddingRows) {
  auto str = [](int64_t value) { return std::to_string(value); };
  if (rows.begin < 0 || rows.begin > rows.end || rows.end > count)
    return Status::error("forward: logit rows [" + str(rows.begin) + ", " + str(rows.end) +
                         ") are outside the " + str(count) + " tokens fed");
  if (first + count > reservedTokens)
    return Status::error("forward: positions up to " + str(first + count) +
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

template <typename Run>
StatusOr<sampling::LogitsView>
forwardFullOnSequence(kv::PagedKvCache &cache, kv::SequenceId sequence, const int32_t *tokens,
                      int64_t count, int64_t keep, sampling::LogitRows rows, Run &&run) {
  if (keep < 0 || keep > count)
    return Status::error("forward: keep " + std::to_string(keep) + " is outside [0, " +
                         std::to_string(count) + "]");
  DLM_RETURN_IF_ERROR(cache.trim(sequence, 0));
  StatusOr<sampling::LogitsView> logits = run(tokens, count, 0, rows);
  if (!logits) {
    (void)cache.trim(sequence, 0);
    return logits.status();
  }
  DLM_RETURN_IF_ERROR(cache.trim(sequence, keep));
  DLM_RETURN_IF_ERROR(cache.commit(sequence));
  return logits;
}

template <typename Run>
StatusOr<sampling::LogitsView>
forwardCachedOnSequence(kv::PagedKvCache &cache, kv::SequenceId sequence, const int32_t *tokens,
                        int64_t count, int64_t keep, sampling::LogitRows rows, Run &&run) {
  if (cache.length(sequence) != keep || keep > count)
    return Status::error("cached forward: the KV cache holds " +
                         std::to_string(cache.length(sequence)) + " tokens, the caller expected " +
                         std::to_string(keep) + " of " + std::to_string(count));
  // The fed tokens' K/V go to slots past `keep`, released again here.
  StatusOr<sampling::LogitsView> logits = run(tokens + keep, count - keep, keep, rows);
  DLM_RETURN_IF_ERROR(cache.trim(sequence, keep));
  return logits;
}

} // namespace dlm
