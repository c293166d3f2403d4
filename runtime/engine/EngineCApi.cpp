// The C API's engine (runtime/include/dlm/dlm.h) over runtime/engine/Engine.h.
#include "runtime/engine/Engine.h"
#include "runtime/session/CApiTypes.h"

#include <atomic>

struct dlm_engine {
  std::unique_ptr<dlm::engine::Engine> engine;
};

struct dlm_cancel_token {
  std::atomic<bool> cancelled{false};
};

using dlm::capi::makeError;
using dlm::capi::makeStatus;

extern "C" {

void dlm_engine_options_init(dlm_engine_options *options) {
  if (!options)
    return;
  dlm_session_options_init(&options->session);
  dlm::engine::EngineOptions defaults;
  options->tokens_per_forward = defaults.tokensPerForward;
  options->max_running = defaults.maxRunning;
  options->max_waiting = defaults.maxWaiting;
  options->batch_invariant = defaults.session.batchInvariant ? 1 : 0;
}

dlm_status dlm_engine_create(dlm_model *model, const dlm_engine_options *options,
                             dlm_engine **out_engine) {
  if (!model || !out_engine)
    return makeError("dlm_engine_create: model and out_engine must not be null");
  *out_engine = nullptr;
  dlm::engine::EngineOptions engineOptions;
  if (options) {
    engineOptions.session = dlm::capi::sessionOptions(&options->session);
    engineOptions.tokensPerForward = options->tokens_per_forward;
    engineOptions.maxRunning = options->max_running;
    engineOptions.maxWaiting = options->max_waiting;
    engineOptions.session.batchInvariant = options->batch_invariant != 0;
  }
  dlm::StatusOr<std::unique_ptr<dlm::engine::Engine>> engine =
      dlm::engine::Engine::create(model->model, engineOptions);
  if (!engine)
    return makeStatus(engine.status());
  *out_engine = new dlm_engine{std::move(*engine)};
  return nullptr;
}

void dlm_engine_destroy(dlm_engine *engine) {
  if (!engine)
    return;
  engine->engine->shutdown();
  delete engine;
}

dlm_cancel_token *dlm_cancel_token_create(void) { return new dlm_cancel_token; }

void dlm_cancel_token_cancel(dlm_cancel_token *token) {
  if (token)
    token->cancelled.store(true);
}

void dlm_cancel_token_destroy(dlm_cancel_token *token) { delete token; }

dlm_status dlm_engine_generate(dlm_engine *engine, const dlm_request *request,
                               dlm_block_callback on_block, void *user_data,
                               dlm_cancel_token *cancel, dlm_result **out_result) {
  if (!engine || !request || !out_result)
    return makeError("dlm_engine_generate: engine, request and out_result must not be null");
  *out_result = nullptr;
  dlm::StatusOr<dlm::GenerateResult> result =
      engine->engine->generate(request->request, dlm::capi::blockCallback(on_block, user_data),
                               cancel ? &cancel->cancelled : nullptr);
  if (!result)
    return makeStatus(result.status());
  *out_result = new dlm_result{std::move(*result)};
  return nullptr;
}

void dlm_engine_shutdown(dlm_engine *engine) {
  if (engine)
    engine->engine->shutdown();
}

void dlm_engine_get_stats(const dlm_engine *engine, dlm_engine_stats *out_stats) {
  if (!out_stats)
    return;
  *out_stats = dlm_engine_stats{};
  if (!engine)
    return;
  const dlm::engine::SchedulerStats stats = engine->engine->stats();
  out_stats->waiting = stats.waiting;
  out_stats->running = stats.running;
  out_stats->kv_pages = stats.kvPages;
  out_stats->kv_pages_reserved = stats.kvPagesReserved;
  out_stats->kv_pages_in_use = stats.kvPagesInUse;
  out_stats->admitted = stats.admitted;
  out_stats->refused = stats.refused;
  out_stats->cancelled = stats.cancelled;
  out_stats->runs = stats.runs;
  out_stats->forwards = stats.forwards;
  out_stats->fed_tokens = stats.fedTokens;
}

} // extern "C"
