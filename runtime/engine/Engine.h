// The serving engine (docs/design/serving.md §5): one model on one backend, many requests at
// once. Each generate() call runs its request on the calling thread, as Session::generate does,
// over its own KV sequence; the BatchScheduler packs the running requests' forwards into shared
// runs. The backend is batch-invariant, so a request decodes the same alone or under load.
#pragma once

#include "runtime/engine/BatchScheduler.h"
#include "runtime/session/Session.h"

#include <memory>

namespace dlm::engine {

struct EngineOptions {
  // The backend's; batchInvariant is always on. kvPages sizes the pool every request shares
  // (0: room for eight of the longest sequence).
  SessionOptions session;
  // The most tokens one packed forward feeds, all requests together (a prompt's prefill must
  // fit alone).
  int64_t tokensPerForward = 2048;
};

class Engine {
public:
  // Errors: the backend's ("not supported yet: batched requests on the cuda backend", ...).
  static StatusOr<std::unique_ptr<Engine>> create(std::shared_ptr<const LoadedModel> model,
                                                  const EngineOptions &options = {});

  // Runs one request to completion with whatever else is running, calling onBlock for each
  // committed block on the calling thread. Thread-safe. Errors as Session::generate's.
  StatusOr<GenerateResult> generate(const GenerateRequest &request,
                                    const StreamCallback &onBlock = {});

  SchedulerStats stats() const { return scheduler_->stats(); }
  const LoadedModel &model() const { return session_->model(); }

private:
  Engine(std::unique_ptr<Session> session, std::unique_ptr<BatchScheduler> scheduler)
      : session_(std::move(session)), scheduler_(std::move(scheduler)) {}

  std::unique_ptr<Session> session_;
  std::unique_ptr<BatchScheduler> scheduler_;
};

} // namespace dlm::engine
