// The OpenAI response objects dlm-serve sends: completions and chat completions whole, their
// stream chunks (`text_completion` / `chat.completion.chunk` with a `delta`), the usage object,
// the model list, and server-sent-event framing.
#pragma once

#include "tools/dlm-run/OutputText.h"
#include "tools/dlm-serve/RequestParser.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace dlm::serve {

struct ResponseIdentity {
  Endpoint endpoint = Endpoint::completions;
  std::string id;      // "cmpl-7" / "chatcmpl-7"
  int64_t created = 0; // Unix seconds
  std::string model;
};

struct Usage {
  int64_t promptTokens = 0;
  int64_t completionTokens = 0;
};

nlohmann::json usageJson(const Usage &usage);

// The whole response of a non-streaming request.
nlohmann::json completionJson(const ResponseIdentity &identity, const std::string &text,
                              tools::FinishReason reason, const Usage &usage);

// One stream chunk: `text` as the delta (chat: the first chunk, `first`, also carries the
// role), `reason` none until the last. With include_usage every chunk has "usage": null.
nlohmann::json chunkJson(const ResponseIdentity &identity, const std::string &text, bool first,
                         tools::FinishReason reason, bool includeUsage);
// The chunk after the last when include_usage: no choices, the usage.
nlohmann::json usageChunkJson(const ResponseIdentity &identity, const Usage &usage);

// GET /v1/models.
nlohmann::json modelListJson(const std::string &modelId, int64_t created);

// "data: <json>\n\n"; invalid UTF-8 is replaced, never fatal.
std::string sseEvent(const nlohmann::json &data);
inline const char *kSseDone = "data: [DONE]\n\n";

// JSON text with invalid UTF-8 replaced.
std::string dumpJson(const nlohmann::json &value);

} // namespace dlm::serve
