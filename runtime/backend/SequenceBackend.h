// What every backend that decodes on a paged KV cache shares, whatever device runs its records:
// the pool of sequences, the session's own sequence among them, every single-sequence forward
// run as a packed batch of one (so the input checks, the mode bookkeeping of
// SequenceForwards.h and the captured rows have one path), and the sequence operations the
// serving scheduler calls. A backend adds the device: reserve, the packed run (forwardBatch)
// and what it holds.
#pragma once

#include "runtime/backend/Backend.h"
#include "runtime/kv/PagedKvCache.h"
#include "runtime/model/KernelProgram.h"

#include <memory>
#include <string>
#include <string_view>

namespace dlm {

class SequenceBackend : public Backend {
public:
  int64_t maxSequenceLength() const override { return maxSequenceLength_; }

  // Any function by name, in any ForwardSpec mode (full, cached, append, extend, window), with
  // or without input rows: the session's own sequence as a batch of one.
  StatusOr<sampling::LogitsView> forward(const sampling::ForwardSpec &spec) final {
    return forwardBatch(spec.function, {SequenceForward{sequence_, spec}});
  }
  sampling::LogitsView capturedRows() const final { return captured_; }
  Status trimCache(int64_t length) final { return dlm::trimSequence(*kv_, sequence_, length); }

  bool batchesSequences() const final { return true; }
  StatusOr<kv::SequenceId> createSequence() final { return kv_->create(); }
  Status removeSequence(kv::SequenceId sequence) final { return kv_->remove(sequence); }
  Status trimSequence(kv::SequenceId sequence, int64_t length) final {
    return dlm::trimSequence(*kv_, sequence, length);
  }
  KvPoolStats kvPoolStats() const final { return kv_ ? poolStatsOf(*kv_) : KvPoolStats{}; }

  // The KV cache, for inspection (tests, statistics).
  const kv::PagedKvCache &kvCache() const { return *kv_; }

protected:
  explicit SequenceBackend(int64_t maxSequenceLength = 0)
      : maxSequenceLength_(maxSequenceLength) {}

  int64_t maxSequenceLength_ = 0;
  std::unique_ptr<kv::PagedKvCache> kv_;
  kv::SequenceId sequence_ = 0;
  // The rows the last forward captured (none when it failed or its function captures none).
  sampling::LogitsView captured_;
};

// The function called `name` among a backend's `functions` (a map by name; empty: the default),
// else an error listing them.
template <typename Functions>
StatusOr<const typename Functions::mapped_type *> findFunction(const Functions &functions,
                                                               std::string_view name) {
  if (name.empty())
    name = spec::kernels::kDefaultFunction;
  auto it = functions.find(name);
  if (it != functions.end())
    return &it->second;
  std::string names;
  for (const auto &entry : functions)
    names += (names.empty() ? "'" : ", '") + entry.first + "'";
  return Status::error("forward: the kernel program has no function '" + std::string(name) +
                       "' (it has " + names + ")");
}

} // namespace dlm
