#include "runtime/engine/Engine.h"

namespace dlm::engine {

StatusOr<std::unique_ptr<Engine>> Engine::create(std::shared_ptr<const LoadedModel> model,
                                                 const EngineOptions &options) {
  SessionOptions sessionOptions = options.session;
  sessionOptions.batchInvariant = true;
  // Requests share the pool: by default room for eight of the longest sequence (there is no
  // admission control yet, docs/design/serving.md §4).
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
  StatusOr<std::unique_ptr<BatchScheduler>> scheduler =
      BatchScheduler::create((*session)->backend(), options.tokensPerForward);
  if (!scheduler)
    return scheduler.status();
  return std::unique_ptr<Engine>(new Engine(std::move(*session), std::move(*scheduler)));
}

StatusOr<GenerateResult> Engine::generate(const GenerateRequest &request,
                                          const StreamCallback &onBlock) {
  StatusOr<std::unique_ptr<sampling::DecodeModel>> sequence = scheduler_->open();
  if (!sequence)
    return sequence.status();
  // The request closes (its KV sequence released) when `sequence` goes, on every path.
  return session_->generateOn(**sequence, request, onBlock);
}

} // namespace dlm::engine
