// The C API (runtime/include/dlm/dlm.h) over the C++ Session API. Nothing here may throw across
// the boundary: allocation failures end the process as they would in C.
#include "runtime/session/CApiTypes.h"

#include <memory>
#include <string>

namespace dlm::capi {

dlm_status makeStatus(const Status &status) {
  if (status.isOk())
    return nullptr;
  return new dlm_status_t{status.message(), status.code()};
}

dlm_status makeError(const char *message) {
  return new dlm_status_t{message, StatusCode::failed};
}

StreamCallback blockCallback(dlm_block_callback onBlock, void *userData) {
  if (!onBlock)
    return {};
  return [onBlock, userData](const StreamedBlock &block) {
    onBlock(userData, block.index, block.ids, static_cast<size_t>(block.count),
            block.text.data(), block.text.size());
  };
}

dlm::SessionOptions sessionOptions(const dlm_session_options *options) {
  dlm::SessionOptions sessionOptions;
  if (options) {
    if (options->backend)
      sessionOptions.backend = options->backend;
    sessionOptions.threads = options->threads;
    sessionOptions.kvPageTokens = options->kv_page_tokens;
    sessionOptions.maxSequenceLength = options->max_sequence_length;
    sessionOptions.kvPages = options->kv_pages;
  }
  return sessionOptions;
}

} // namespace dlm::capi

using dlm::capi::makeError;
using dlm::capi::makeStatus;

extern "C" {

int dlm_api_version(void) { return DLM_API_VERSION; }

const char *dlm_status_message(dlm_status status) {
  return status ? status->message.c_str() : "ok";
}

dlm_status_code dlm_status_get_code(dlm_status status) {
  if (!status)
    return DLM_STATUS_OK;
  switch (status->code) {
  case dlm::StatusCode::failed:
    return DLM_STATUS_FAILED;
  case dlm::StatusCode::contextLengthExceeded:
    return DLM_STATUS_CONTEXT_LENGTH_EXCEEDED;
  case dlm::StatusCode::queueFull:
    return DLM_STATUS_QUEUE_FULL;
  case dlm::StatusCode::cancelled:
    return DLM_STATUS_CANCELLED;
  case dlm::StatusCode::unavailable:
    return DLM_STATUS_UNAVAILABLE;
  }
  return DLM_STATUS_FAILED;
}

void dlm_status_free(dlm_status status) { delete status; }

dlm_status dlm_model_open(const char *path, dlm_model **out_model) {
  if (!path || !out_model)
    return makeError("dlm_model_open: path and out_model must not be null");
  *out_model = nullptr;
  dlm::StatusOr<std::shared_ptr<dlm::LoadedModel>> model = dlm::LoadedModel::open(path);
  if (!model)
    return makeStatus(model.status());
  *out_model = new dlm_model{std::move(*model)};
  return nullptr;
}

void dlm_model_close(dlm_model *model) { delete model; }

int64_t dlm_model_vocab_size(const dlm_model *model) {
  return model ? model->model->config().vocabSize : 0;
}

int64_t dlm_model_mask_token_id(const dlm_model *model) {
  return model ? model->model->config().maskTokenId : -1;
}

void dlm_session_options_init(dlm_session_options *options) {
  if (!options)
    return;
  dlm::SessionOptions defaults;
  options->backend = "cpu";
  options->threads = defaults.threads;
  options->kv_page_tokens = defaults.kvPageTokens;
  options->max_sequence_length = defaults.maxSequenceLength;
  options->kv_pages = defaults.kvPages;
}

dlm_status dlm_session_create(dlm_model *model, const dlm_session_options *options,
                              dlm_session **out_session) {
  if (!model || !out_session)
    return makeError("dlm_session_create: model and out_session must not be null");
  *out_session = nullptr;
  dlm::StatusOr<std::unique_ptr<dlm::Session>> session =
      dlm::Session::create(model->model, dlm::capi::sessionOptions(options));
  if (!session)
    return makeStatus(session.status());
  *out_session = new dlm_session{std::move(*session)};
  return nullptr;
}

void dlm_session_destroy(dlm_session *session) { delete session; }

dlm_status dlm_request_create(dlm_request **out_request) {
  if (!out_request)
    return makeError("dlm_request_create: out_request must not be null");
  *out_request = new dlm_request{};
  return nullptr;
}

void dlm_request_destroy(dlm_request *request) { delete request; }

void dlm_request_set_prompt_ids(dlm_request *request, const int32_t *ids, size_t count) {
  if (!request)
    return;
  request->request.promptIds.assign(ids, ids + (ids ? count : 0));
  request->request.promptText.reset();
}

void dlm_request_set_prompt_text(dlm_request *request, const char *text) {
  if (request)
    request->request.promptText = std::string(text ? text : "");
}

void dlm_request_set_seed(dlm_request *request, uint64_t seed) {
  if (request)
    request->request.seed = seed;
}

void dlm_request_set_request_id(dlm_request *request, uint64_t request_id) {
  if (request)
    request->request.requestId = request_id;
}

void dlm_request_set_knob_int(dlm_request *request, const char *name, int64_t value) {
  if (request && name)
    request->request.knobs[name] = value;
}

void dlm_request_set_knob_double(dlm_request *request, const char *name, double value) {
  if (request && name)
    request->request.knobs[name] = value;
}

void dlm_request_set_knob_string(dlm_request *request, const char *name, const char *value) {
  if (request && name)
    request->request.knobs[name] = std::string(value ? value : "");
}

dlm_status dlm_session_generate(dlm_session *session, const dlm_request *request,
                                dlm_block_callback on_block, void *user_data,
                                dlm_result **out_result) {
  if (!session || !request || !out_result)
    return makeError("dlm_session_generate: session, request and out_result must not be null");
  *out_result = nullptr;
  dlm::StatusOr<dlm::GenerateResult> result = session->session->generate(
      request->request, dlm::capi::blockCallback(on_block, user_data));
  if (!result)
    return makeStatus(result.status());
  *out_result = new dlm_result{std::move(*result)};
  return nullptr;
}

size_t dlm_result_output_ids(const dlm_result *result, const int32_t **out_ids) {
  if (!result) {
    if (out_ids)
      *out_ids = nullptr;
    return 0;
  }
  if (out_ids)
    *out_ids = result->result.outputIds.data();
  return result->result.outputIds.size();
}

size_t dlm_result_prompt_ids(const dlm_result *result, const int32_t **out_ids) {
  if (!result) {
    if (out_ids)
      *out_ids = nullptr;
    return 0;
  }
  if (out_ids)
    *out_ids = result->result.promptIds.data();
  return result->result.promptIds.size();
}

const char *dlm_result_text(const dlm_result *result) {
  return result ? result->result.text.c_str() : "";
}

void dlm_result_stats(const dlm_result *result, dlm_stats *out_stats) {
  if (!out_stats)
    return;
  *out_stats = dlm_stats{};
  if (!result)
    return;
  const dlm::GenerationStats &stats = result->result.stats;
  out_stats->forwards = stats.forwards;
  out_stats->decode_steps = stats.decodeSteps;
  out_stats->blocks = stats.blocks;
  out_stats->generated_tokens = stats.generatedTokens;
  out_stats->seconds = stats.seconds;
}

void dlm_result_destroy(dlm_result *result) { delete result; }

} // extern "C"
