// The serving engine (docs/design/serving.md §5): one model on one backend, many requests at
// once. Each generate() call runs its request on the calling thread, as Session::generate does,
// over its own KV sequence; the BatchScheduler packs the running requests' forwards into shared
// runs. With session.batchInvariant a request decodes the same alone or under load; without it
// the packed forwards take the single-request fast path and a request's low bits depend on its
// company.
#pragma once

#include "runtime/engine/BatchScheduler.h"
#include "runtime/session/Session.h"

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>

namespace dlm::engine {

struct EngineOptions {
  // The backend's. batchInvariant (off by default, as in vLLM and SGLang): a request's
  // temperature-0 output is the same alone or under load, at a cost on the CPU (README,
  // "Serving"). kvPages sizes the pool every request shares (0: room for eight of the longest
  // sequence).
  SessionOptions session;
  // The most tokens one packed forward feeds, all requests together (a prompt's prefill must
  // fit alone).
  int64_t tokensPerForward = 2048;
  // The most requests running at once (0: as many as the KV pool admits) and waiting for
  // admission (0: no limit; BatchScheduler.h's SchedulerLimits).
  int64_t maxRunning = 0;
  int64_t maxWaiting = 0;
};

class Engine {
public:
  // Errors: the backend's ("CUDA driver not available: ...", ...).
  static StatusOr<std::unique_ptr<Engine>> create(std::shared_ptr<const LoadedModel> model,
                                                  const EngineOptions &options = {});

  // Runs one request to completion with whatever else is running, calling onBlock for each
  // committed block on the calling thread. The request first waits for admission (the KV pages
  // its program reserves). Thread-safe. Errors as Session::generate's, and by StatusCode:
  // contextLengthExceeded (the prompt and generation pass the model's or the pool's size),
  // queueFull (maxWaiting requests already wait), cancelled (`*cancelled` became true: the
  // request stops at its next forward and frees its pages), unavailable (after shutdown()).
  StatusOr<GenerateResult> generate(const GenerateRequest &request,
                                    const StreamCallback &onBlock = {},
                                    const std::atomic<bool> *cancelled = nullptr);

  // Refuses new requests (StatusCode::unavailable) and returns once every request already
  // submitted, running or waiting, has finished. Thread-safe; idempotent.
  void shutdown();

  SchedulerStats stats() const { return scheduler_->stats(); }
  const LoadedModel &model() const { return session_->model(); }
  // The backend options the engine runs with (the KV pool's size among them).
  const SessionOptions &sessionOptions() const { return sessionOptions_; }

private:
  Engine(std::unique_ptr<Session> session, std::unique_ptr<BatchScheduler> scheduler,
         SessionOptions sessionOptions)
      : session_(std::move(session)), scheduler_(std::move(scheduler)),
        sessionOptions_(std::move(sessionOptions)) {}

  std::unique_ptr<Session> session_;
  std::unique_ptr<BatchScheduler> scheduler_;
  const SessionOptions sessionOptions_;
  std::mutex mutex_;
  std::condition_variable finished_;
  int64_t active_ = 0;
  bool shuttingDown_ = false;
};

} // namespace dlm::engine
