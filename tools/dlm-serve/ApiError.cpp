#include "tools/dlm-serve/ApiError.h"

namespace dlm::serve {

nlohmann::json ApiError::toJson() const {
  nlohmann::json error = {{"message", message}, {"type", type}};
  error["param"] = param.empty() ? nlohmann::json() : nlohmann::json(param);
  error["code"] = code.empty() ? nlohmann::json() : nlohmann::json(code);
  return {{"error", error}};
}

ApiError badRequest(std::string message, std::string param, std::string code) {
  ApiError error;
  error.message = std::move(message);
  error.param = std::move(param);
  error.code = std::move(code);
  return error;
}

ApiError contextLengthExceeded(std::string message, std::string param) {
  return badRequest(std::move(message), std::move(param), "context_length_exceeded");
}

ApiError modelNotFound(const std::string &requested) {
  ApiError error;
  error.httpStatus = 404;
  error.message = "The model '" + requested + "' does not exist";
  error.param = "model";
  error.code = "model_not_found";
  return error;
}

ApiError fromStatus(const Status &status) {
  ApiError error;
  error.message = status.message();
  switch (status.code()) {
  case StatusCode::contextLengthExceeded:
    error.code = "context_length_exceeded";
    break;
  case StatusCode::queueFull:
    error.httpStatus = 429;
    error.type = "rate_limit_error";
    error.code = "queue_full";
    error.retryAfterSeconds = 1;
    break;
  case StatusCode::unavailable:
    error.httpStatus = 503;
    error.type = "service_unavailable";
    error.code = "shutting_down";
    break;
  case StatusCode::cancelled:
    error.httpStatus = 499;
    error.type = "cancelled";
    break;
  case StatusCode::failed:
    break;
  }
  return error;
}

} // namespace dlm::serve
