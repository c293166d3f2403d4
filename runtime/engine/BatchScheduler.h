// Continuous batching of decode programs (docs/design/serving.md §1): every request runs its own
// decode interpreter on its own thread over a SequenceModel, a DecodeModel whose forwards do not
// run but wait for the scheduler; once every open request waits in a forward (or has closed),
// the scheduler packs their forwards, one run per forward function, through
// Backend::forwardBatch and wakes them with their rows. Requests join and leave between runs.
// The scheduler knows sequences, forwards and rows, never a policy.
#pragma once

#include "runtime/backend/Backend.h"

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace dlm::engine {

struct SchedulerStats {
  int64_t runs = 0;          // packed backend forwards
  int64_t forwards = 0;      // request forwards they served
  int64_t mostPerRun = 0;    // the most request forwards one run packed
};

class BatchScheduler {
public:
  // `backend` (batchesSequences()) must outlive the scheduler. `maxTokens`: the most fed tokens
  // (and logit rows) one packed run may take; the backend is reserved for it once.
  static StatusOr<std::unique_ptr<BatchScheduler>> create(Backend &backend, int64_t maxTokens);
  ~BatchScheduler();

  // A model for one request, on a fresh KV sequence of the backend; the request runs from its
  // first reserve or forward until the model is destroyed (then its sequence is released), and
  // every packed run waits for it to reach its next forward: a block callback must not block or
  // start another request. Thread-safe. The models must not outlive the scheduler.
  StatusOr<std::unique_ptr<sampling::DecodeModel>> open();

  SchedulerStats stats() const;

private:
  class SequenceModel;
  struct Waiting;

  BatchScheduler(Backend &backend, int64_t maxTokens);
  void loop();
  // Runs the waiting forwards (lock held): one packed run per function and per maxTokens worth.
  void runWaiting();
  void runGroup(const std::vector<Waiting *> &group);
  void close(SequenceModel *model);

  Backend &backend_;
  const int64_t maxTokens_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  int64_t open_ = 0;
  std::vector<Waiting *> waiting_;
  bool stopping_ = false;
  SchedulerStats stats_;
  std::thread thread_;
};

} // namespace dlm::engine
