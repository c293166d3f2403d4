#include "tools/dlm-serve/ResponseJson.h"

namespace dlm::serve {

using Json = nlohmann::json;

namespace {

Json finishJson(tools::FinishReason reason) {
  return reason == tools::FinishReason::none ? Json() : Json(tools::finishReasonName(reason));
}

Json header(const ResponseIdentity &identity, const char *object) {
  return {{"id", identity.id},
          {"object", object},
          {"created", identity.created},
          {"model", identity.model}};
}

} // namespace

Json usageJson(const Usage &usage) {
  return {{"prompt_tokens", usage.promptTokens},
          {"completion_tokens", usage.completionTokens},
          {"total_tokens", usage.promptTokens + usage.completionTokens}};
}

Json completionJson(const ResponseIdentity &identity, const std::string &text,
                    tools::FinishReason reason, const Usage &usage) {
  const bool chat = identity.endpoint == Endpoint::chatCompletions;
  Json response = header(identity, chat ? "chat.completion" : "text_completion");
  Json choice = {{"index", 0}};
  if (chat)
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  else
    choice["text"] = text;
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finishJson(reason);
  response["choices"] = Json::array({choice});
  response["usage"] = usageJson(usage);
  return response;
}

Json chunkJson(const ResponseIdentity &identity, const std::string &text, bool first,
               tools::FinishReason reason, bool includeUsage) {
  const bool chat = identity.endpoint == Endpoint::chatCompletions;
  Json chunk = header(identity, chat ? "chat.completion.chunk" : "text_completion");
  Json choice = {{"index", 0}};
  if (chat) {
    Json delta = Json::object();
    if (first)
      delta["role"] = "assistant";
    if (!text.empty() || first)
      delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finishJson(reason);
  chunk["choices"] = Json::array({choice});
  if (includeUsage)
    chunk["usage"] = nullptr;
  return chunk;
}

Json usageChunkJson(const ResponseIdentity &identity, const Usage &usage) {
  Json chunk = header(identity, identity.endpoint == Endpoint::chatCompletions
                                    ? "chat.completion.chunk"
                                    : "text_completion");
  chunk["choices"] = Json::array();
  chunk["usage"] = usageJson(usage);
  return chunk;
}

Json modelListJson(const std::string &modelId, int64_t created) {
  return {{"object", "list"},
          {"data", Json::array({{{"id", modelId},
                                 {"object", "model"},
                                 {"created", created},
                                 {"owned_by", "dlm"}}})}};
}

std::string dumpJson(const Json &value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string sseEvent(const Json &data) { return "data: " + dumpJson(data) + "\n\n"; }

} // namespace dlm::serve
