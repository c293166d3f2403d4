// An OpenAI error object and the HTTP status it goes with:
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// and how the engine's StatusCodes map onto them.
#pragma once

#include "support/Status.h"

#include <nlohmann/json.hpp>

#include <string>

namespace dlm::serve {

struct ApiError {
  int httpStatus = 400;
  std::string message;
  std::string type = "invalid_request_error";
  // The request field at fault; empty: null.
  std::string param;
  // A machine-readable code ("context_length_exceeded", "model_not_found"); empty: null.
  std::string code;
  // Seconds for the Retry-After header of a 429; 0: none.
  int retryAfterSeconds = 0;

  nlohmann::json toJson() const;
};

// 400 invalid_request_error about `param`.
ApiError badRequest(std::string message, std::string param = "", std::string code = "");
// 400 context_length_exceeded about `param` (the prompt or the messages).
ApiError contextLengthExceeded(std::string message, std::string param);
// 404 model_not_found for a `model` field naming another model.
ApiError modelNotFound(const std::string &requested);

// A failed Engine::generate as the client sees it: contextLengthExceeded 400, queueFull 429
// (Retry-After: 1), unavailable 503, cancelled 499 (the client is gone; nobody reads it), and any
// other failure 400: what fails after parsing is a request the model refuses (knob values out of
// range, gen_length not a multiple of block_length, ...), with the engine's message.
ApiError fromStatus(const Status &status);

} // namespace dlm::serve
