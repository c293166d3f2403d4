// What the C API's handles hold (runtime/include/dlm/dlm.h), shared by the session's C API
// (CApi.cpp) and the engine's (runtime/engine/EngineCApi.cpp).
#pragma once

#include "dlm/dlm.h"

#include "runtime/session/Session.h"

#include <memory>
#include <string>

struct dlm_status_t {
  std::string message;
  dlm::StatusCode code;
};

struct dlm_model {
  std::shared_ptr<dlm::LoadedModel> model;
};

struct dlm_session {
  std::unique_ptr<dlm::Session> session;
};

struct dlm_request {
  dlm::GenerateRequest request;
};

struct dlm_result {
  dlm::GenerateResult result;
};

namespace dlm::capi {

// NULL for ok.
dlm_status makeStatus(const Status &status);
dlm_status makeError(const char *message);
// The C callback as the C++ API's (empty when `onBlock` is NULL).
StreamCallback blockCallback(dlm_block_callback onBlock, void *userData);
// The C options as the C++ ones (the defaults when NULL).
SessionOptions sessionOptions(const dlm_session_options *options);

} // namespace dlm::capi
