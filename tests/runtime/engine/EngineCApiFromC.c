/* Compiled as C: the engine's part of the header must be valid C99 too. Called by
 * EngineCApiTest.cpp. Generates one request through an engine; returns the number of generated
 * ids, or -1 with the message in `error`. */
#include "dlm/dlm.h"

#include <stdio.h>

long dlm_test_engine_generate_from_c(const char *artifact, char *error, size_t error_size) {
  dlm_model *model = NULL;
  dlm_engine *engine = NULL;
  dlm_request *request = NULL;
  dlm_result *result = NULL;
  dlm_engine_options options;
  long generated = -1;
  const int32_t prompt[] = {3, 4, 5};
  dlm_status status = dlm_model_open(artifact, &model);
  if (!status) {
    dlm_engine_options_init(&options);
    options.session.threads = 2;
    options.max_waiting = 4;
    status = dlm_engine_create(model, &options, &engine);
  }
  if (!status)
    status = dlm_request_create(&request);
  if (!status) {
    dlm_request_set_prompt_ids(request, prompt, 3);
    dlm_request_set_knob_int(request, "gen_length", 8);
    dlm_request_set_knob_int(request, "block_length", 8);
    dlm_request_set_knob_int(request, "steps", 8);
    status = dlm_engine_generate(engine, request, NULL, NULL, NULL, &result);
  }
  if (status) {
    snprintf(error, error_size, "%s", dlm_status_message(status));
    dlm_status_free(status);
  } else {
    generated = (long)dlm_result_output_ids(result, NULL);
  }
  dlm_result_destroy(result);
  dlm_request_destroy(request);
  dlm_engine_destroy(engine);
  dlm_model_close(model);
  return generated;
}
