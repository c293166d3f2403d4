/* dlm runtime, C API: load a compiled diffusion language model (.dlm artifact), create a session
 * on a backend, generate text with committed blocks streamed to a callback.
 *
 *   dlm_model *model;            dlm_status s = dlm_model_open("model.dlm", &model);
 *   dlm_session_options opts;    dlm_session_options_init(&opts);
 *   dlm_session *session;        s = dlm_session_create(model, &opts, &session);
 *   dlm_request *req;            s = dlm_request_create(&req);
 *   dlm_request_set_prompt_text(req, "Hello");
 *   dlm_request_set_knob_int(req, "gen_length", 64);
 *   dlm_result *res;             s = dlm_session_generate(session, req, on_block, user, &res);
 *   ... dlm_result_text(res), dlm_result_stats(res, &stats) ...
 *   dlm_result_destroy(res); dlm_request_destroy(req); dlm_session_destroy(session);
 *   dlm_model_close(model);
 *
 * Errors: every fallible call returns a dlm_status, NULL on success; otherwise it carries a
 * message naming the problem and must be freed with dlm_status_free. No global state; a session
 * runs one request at a time (use one session per thread). A dlm_engine serves many requests at
 * once from many threads, packing their forwards (see "Engine" below; link DlmEngine). Knobs are
 * what the artifact's decode programs declare (`dlmc inspect` lists them with their types and
 * defaults): policy (selects the program), gen_length, block_length, steps, threshold, cache
 * ("none", "prefix": Fast-dLLM's prefix cache, "dual": the dual cache), temperature, ... */
#ifndef DLM_DLM_H
#define DLM_DLM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DLM_API_VERSION 3 /* 3: dlm_engine_options.batch_invariant */

int dlm_api_version(void);

/* ---- Status --------------------------------------------------------------------------------- */
typedef struct dlm_status_t *dlm_status; /* NULL = success */
const char *dlm_status_message(dlm_status status);
/* What kind of failure, where a caller acts on it. */
typedef enum dlm_status_code {
  DLM_STATUS_OK = 0,
  DLM_STATUS_FAILED = 1,                  /* the message says what */
  DLM_STATUS_CONTEXT_LENGTH_EXCEEDED = 2, /* more positions than the model or KV pool hold */
  DLM_STATUS_QUEUE_FULL = 3,              /* the engine's waiting queue is full: retry later */
  DLM_STATUS_CANCELLED = 4,               /* the request's cancel token fired */
  DLM_STATUS_UNAVAILABLE = 5              /* the engine is shutting down */
} dlm_status_code;
dlm_status_code dlm_status_get_code(dlm_status status);
void dlm_status_free(dlm_status status);

/* ---- Model ---------------------------------------------------------------------------------- */
typedef struct dlm_model dlm_model;
dlm_status dlm_model_open(const char *path, dlm_model **out_model);
/* A model must outlive its sessions. */
void dlm_model_close(dlm_model *model);
int64_t dlm_model_vocab_size(const dlm_model *model);
/* -1 when the model has none. */
int64_t dlm_model_mask_token_id(const dlm_model *model);

/* ---- Session -------------------------------------------------------------------------------- */
typedef struct dlm_session_options {
  const char *backend;         /* "cpu" (default), "cuda" or "cuda-emu" */
  int32_t threads;             /* 0 = one per hardware thread */
  int32_t kv_page_tokens;      /* token slots per KV page, default 16 */
  int64_t max_sequence_length; /* 0 = the model's maximum positions */
  int64_t kv_pages;            /* 0 = enough for one sequence of max_sequence_length */
} dlm_session_options;

void dlm_session_options_init(dlm_session_options *options);
typedef struct dlm_session dlm_session;
dlm_status dlm_session_create(dlm_model *model, const dlm_session_options *options,
                              dlm_session **out_session);
void dlm_session_destroy(dlm_session *session);

/* ---- Request -------------------------------------------------------------------------------- */
typedef struct dlm_request dlm_request;
dlm_status dlm_request_create(dlm_request **out_request);
void dlm_request_destroy(dlm_request *request);
void dlm_request_set_prompt_ids(dlm_request *request, const int32_t *ids, size_t count);
/* Encoded with the artifact's tokenizer; replaces prompt ids. */
void dlm_request_set_prompt_text(dlm_request *request, const char *text);
void dlm_request_set_seed(dlm_request *request, uint64_t seed);
void dlm_request_set_request_id(dlm_request *request, uint64_t request_id);
/* Knob overrides; names, types, ranges and choices are checked when the request runs. The cache
 * mode is one: dlm_request_set_knob_string(req, "cache", "prefix"). The string "none" removes the
 * artifact's threshold (fixed-count unmasking). */
void dlm_request_set_knob_int(dlm_request *request, const char *name, int64_t value);
void dlm_request_set_knob_double(dlm_request *request, const char *name, double value);
void dlm_request_set_knob_string(dlm_request *request, const char *name, const char *value);

/* ---- Generation ----------------------------------------------------------------------------- */
/* Called once per committed block, in order. `text` (text_size bytes, not NUL-terminated) is the
 * text that became complete with this block. Pointers are valid during the call only. */
typedef void (*dlm_block_callback)(void *user_data, int64_t block_index, const int32_t *ids,
                                   size_t count, const char *text, size_t text_size);

typedef struct dlm_result dlm_result;
dlm_status dlm_session_generate(dlm_session *session, const dlm_request *request,
                                dlm_block_callback on_block, void *user_data,
                                dlm_result **out_result);

typedef struct dlm_stats {
  int64_t forwards;         /* model forward passes */
  int64_t decode_steps;     /* forwards whose logits were decoded */
  int64_t blocks;           /* committed blocks */
  int64_t generated_tokens; /* output ids, up to and including the first EOS */
  double seconds;           /* wall time of the decoding loop */
} dlm_stats;

/* Generated ids (prompt excluded, up to and including the first EOS); returns the count. */
size_t dlm_result_output_ids(const dlm_result *result, const int32_t **out_ids);
size_t dlm_result_prompt_ids(const dlm_result *result, const int32_t **out_ids);
/* NUL-terminated; special tokens skipped; "" without a tokenizer. */
const char *dlm_result_text(const dlm_result *result);
void dlm_result_stats(const dlm_result *result, dlm_stats *out_stats);
void dlm_result_destroy(dlm_result *result);

/* ---- Engine: many requests at once ---------------------------------------------------------- */
/* One model on one backend; every dlm_engine_generate call (from any thread) runs its request on
 * the calling thread, its forwards packed with the other running requests'. A request waits for
 * admission until the KV pool holds its worst case; with batch_invariant its temperature-0
 * output is the same alone or under load. */
typedef struct dlm_engine_options {
  dlm_session_options session; /* kv_pages 0: room for eight of the longest sequence */
  int64_t tokens_per_forward;  /* the most tokens one packed forward feeds, default 2048 */
  int64_t max_running;         /* the most requests admitted at once, 0 = as the pool allows */
  int64_t max_waiting;         /* the most requests waiting; more get DLM_STATUS_QUEUE_FULL */
  int32_t batch_invariant;     /* 1: a request's output is the same alone or under load (slower
                                  on the CPU: weights read as float32); default 0 */
} dlm_engine_options;
void dlm_engine_options_init(dlm_engine_options *options);

typedef struct dlm_engine dlm_engine;
dlm_status dlm_engine_create(dlm_model *model, const dlm_engine_options *options,
                             dlm_engine **out_engine);
/* Shuts the engine down first (see dlm_engine_shutdown). */
void dlm_engine_destroy(dlm_engine *engine);

/* Cancels a request from another thread: the request stops at its next forward, or while it
 * waits for admission, with DLM_STATUS_CANCELLED, and frees its KV pages. */
typedef struct dlm_cancel_token dlm_cancel_token;
dlm_cancel_token *dlm_cancel_token_create(void);
void dlm_cancel_token_cancel(dlm_cancel_token *token);
void dlm_cancel_token_destroy(dlm_cancel_token *token);

/* Thread-safe; `cancel` may be NULL. on_block must not block: the other requests' forwards wait
 * for this one's. */
dlm_status dlm_engine_generate(dlm_engine *engine, const dlm_request *request,
                               dlm_block_callback on_block, void *user_data,
                               dlm_cancel_token *cancel, dlm_result **out_result);
/* New requests fail with DLM_STATUS_UNAVAILABLE; returns once the submitted ones finished. */
void dlm_engine_shutdown(dlm_engine *engine);

typedef struct dlm_engine_stats {
  int64_t waiting;            /* requests waiting for admission now */
  int64_t running;            /* admitted requests now */
  int64_t kv_pages;           /* the pool */
  int64_t kv_pages_reserved;  /* held for the running requests' worst cases */
  int64_t kv_pages_in_use;    /* holding K/V now */
  int64_t admitted;           /* requests admitted so far */
  int64_t refused;            /* refused: queue full or larger than the pool */
  int64_t cancelled;
  int64_t runs;               /* packed forwards */
  int64_t forwards;           /* request forwards they served */
  int64_t fed_tokens;         /* tokens the packed forwards fed */
} dlm_engine_stats;
void dlm_engine_get_stats(const dlm_engine *engine, dlm_engine_stats *out_stats);

#ifdef __cplusplus
}
#endif

#endif /* DLM_DLM_H */
