// Continuous batching of decode programs (docs/design/serving.md §1): every request runs its own
// decode interpreter on its own thread over a SequenceModel, a DecodeModel whose forwards do not
// run but wait for the scheduler; once every open request waits in a forward (or has closed),
// the scheduler packs their forwards, one run per forward function, through
// Backend::forwardBatch and wakes them with their rows. Requests join and leave between runs.
// The scheduler knows sequences, forwards and rows, never a policy.
#pragma once

#include "runtime/backend/Backend.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace dlm::engine {

// Admission control (docs/design/serving.md §4): a request is admitted when the KV pool can hold
// the worst case its program reserves, and waits in a FIFO queue until then; requests are never
// preempted, so an admitted request always finishes.
struct SchedulerLimits {
  // The most fed tokens (and logit rows) one packed run may take.
  int64_t tokensPerRun = 2048;
  // The pool every request shares, in pages of kvPageTokens slots (the backend's).
  int64_t kvPages = 0;
  int64_t kvPageTokens = 16;
  // The most requests admitted at once (0: as many as the pool holds).
  int64_t maxRunning = 0;
  // The most requests waiting for admission; one more is refused at once with
  // StatusCode::queueFull (0: no limit).
  int64_t maxWaiting = 0;
};

struct SchedulerStats {
  int64_t runs = 0;          // packed backend forwards
  int64_t forwards = 0;      // request forwards they served
  int64_t mostPerRun = 0;    // the most request forwards one run packed
  int64_t fedTokens = 0;     // tokens the runs fed, all requests together
  int64_t logitRows = 0;     // logit rows the runs returned, all requests together
  int64_t admitted = 0;      // requests admitted so far
  int64_t refused = 0;       // refused for a full queue or a request larger than the pool
  int64_t cancelled = 0;     // forwards or admissions refused because the caller cancelled
  // Now:
  int64_t waiting = 0;       // requests waiting for admission
  int64_t running = 0;       // admitted requests
  int64_t kvPages = 0;       // the pool
  int64_t kvPagesReserved = 0;  // held for the admitted requests' worst cases
  int64_t kvPagesInUse = 0;     // holding K/V now, published pages included (the backend's)
  int64_t kvPagesCached = 0;    // published pages no request holds (free on demand)
  int64_t prefixTokensReused = 0; // prefill tokens taken from published pages, so far
};

class BatchScheduler {
public:
  // `backend` (batchesSequences()) must outlive the scheduler; it is reserved for
  // limits.tokensPerRun once.
  static StatusOr<std::unique_ptr<BatchScheduler>> create(Backend &backend,
                                                          const SchedulerLimits &limits);
  ~BatchScheduler();

  // A model for one request, on a fresh KV sequence of the backend. Its program's reserve is the
  // admission: it waits until the pool holds the reserved tokens' pages (errors: larger than the
  // pool, StatusCode::contextLengthExceeded; queue full, StatusCode::queueFull). From then until
  // the model is destroyed (its sequence and pages are released) the request runs and every
  // packed run waits for it to reach its next forward: a block callback must not block or start
  // another request. Once `*cancelled` is true, admission and forwards fail with
  // StatusCode::cancelled. Thread-safe. The models must not outlive the scheduler.
  StatusOr<std::unique_ptr<sampling::DecodeModel>>
  open(const std::atomic<bool> *cancelled = nullptr);

  SchedulerStats stats() const;

private:
  class SequenceModel;
  struct Waiting;

  BatchScheduler(Backend &backend, const SchedulerLimits &limits);
  // Waits (lock held) until `model` holds the pages of `tokens` slots; it does not count as
  // running while it waits. A running request that asks for more gets it only if it is free now.
  Status admit(SequenceModel &model, int64_t tokens, std::unique_lock<std::mutex> &lock);
  // Counts a refusal for cancellation and says so.
  Status cancelledError();
  void loop();
  // Runs the waiting forwards (lock held): one packed run per function and per maxTokens worth.
  void runWaiting();
  void runGroup(const std::vector<Waiting *> &group);
  void close(SequenceModel *model);

  Backend &backend_;
  const SchedulerLimits limits_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  // Admitted requests, and the pages they hold.
  int64_t open_ = 0;
  int64_t reservedPages_ = 0;
  // Requests waiting for admission, first come first served.
  std::deque<SequenceModel *> admissions_;
  std::vector<Waiting *> waiting_;
  bool stopping_ = false;
  SchedulerStats stats_;
  std::thread thread_;
};

} // namespace dlm::engine
