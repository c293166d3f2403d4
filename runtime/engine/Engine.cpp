#include "runtime/engine/Engine.h"

namespace dlm::engine {

StatusOr<std::unique_ptr<Engine>> Engine::create(std::shared_ptr<const LoadedModel> model,
                                                 const EngineOptions &options) {
  SessionOptions sessionOptions = options.session;
  sessionOptions.sharePrefixes = true;
  if (sessionOptions.kvPageTokens <= 0)
    return Status::error("KV pages must hold at least one token, got " +
                         std::to_string(sessionOptions.kvPageTokens));
  // Requests share the pool: by default room for eight of the longest sequence.
  if (sessionOptions.kvPages == 0 && model) {
    const int64_t longest = sessionOptions.maxSequenceLength > 0 ? sessionOptions.maxSequenceLength
                            : model->config().maxPositions > 0   ? model->config().maxPositions
                                                                 : 4096;
    sessionOptions.kvPages = 8 * ((longest + sessionOptions.kvPageTokens - 1) /
                                  sessionOptions.kvPageTokens);
  }
  // Requests run on their own threads: the profiler is not shared between them.
  sessionOptions.profiler = nullptr;
  StatusOr<std::unique_ptr<Session>> session = Session::create(std::move(model), sessionOptions);
  if (!session)
    return session.status();
  SchedulerLimits limits;
  limits.tokensPerRun = options.tokensPerForward;
  limits.kvPages = sessionOptions.kvPages;
  limits.kvPageTokens = sessionOptions.kvPageTokens;
  limits.maxRunning = options.maxRunning;
  limits.maxWaiting = options.maxWaiting;
  StatusOr<std::unique_ptr<BatchScheduler>> scheduler =
      BatchScheduler::create((*session)->backend(), limits);
  if (!scheduler)
    return scheduler.status();
  return std::unique_ptr<Engine>(
      new Engine(std::move(*session), std::move(*scheduler), std::move(sessionOptions)));
}

StatusOr<GenerateResult> Engine::generate(const GenerateRequest &request,
                                          const StreamCallback &onBlock,
                                          const std::atomic<bool> *cancelled) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (shuttingDown_)
      return Status::error(StatusCode::unavailable, "the engine is shutting down");
    ++active_;
  }
  StatusOr<GenerateResult> result = [&]() -> StatusOr<GenerateResult> {
    StatusOr<std::unique_ptr<sampling::DecodeModel>> sequence = scheduler_->open(cancelled);
    if (!sequence)
      return sequence.status();
    // The request closes (its KV sequence and pages released) when `sequence` goes.
    return session_->generateOn(**sequence, request, onBlock);
  }();
  {
    // Notified under the mutex: once shutdown() sees no request active, the engine may be
    // destroyed, and nothing of it may be touched after.
    std::lock_guard<std::mutex> lock(mutex_);
    --active_;
    finished_.notify_all();
  }
  return result;
}

void Engine::shutdown() {
  std::unique_lock<std::mutex> lock(mutex_);
  shuttingDown_ = true;
  finished_.wait(lock, [&] { return active_ == 0; });
}

} // namespace dlm::engine
