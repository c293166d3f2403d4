// The OpenAI objects dlm-serve sends (tools/dlm-serve/ResponseJson.h).
#include "tools/dlm-serve/ResponseJson.h"

#include <gtest/gtest.h>

namespace dlm::serve {
namespace {

ResponseIdentity identity(Endpoint endpoint) {
  return {endpoint, endpoint == Endpoint::chatCompletions ? "chatcmpl-1" : "cmpl-1", 100, "demo"};
}

TEST(ResponseJson, Completion) {
  nlohmann::json json = completionJson(identity(Endpoint::completions), "hi",
                                       tools::FinishReason::length, {3, 2});
  EXPECT_EQ(json["object"], "text_completion");
  EXPECT_EQ(json["model"], "demo");
  EXPECT_EQ(json["choices"][0]["text"], "hi");
  EXPECT_EQ(json["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(json["usage"]["total_tokens"], 5);
}

TEST(ResponseJson, ChatCompletion) {
  nlohmann::json json = completionJson(identity(Endpoint::chatCompletions), "hi",
                                       tools::FinishReason::stop, {3, 2});
  EXPECT_EQ(json["object"], "chat.completion");
  EXPECT_EQ(json["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(json["choices"][0]["message"]["content"], "hi");
  EXPECT_EQ(json["choices"][0]["finish_reason"], "stop");
}

TEST(ResponseJson, Chunks) {
  nlohmann::json chunk =
      chunkJson(identity(Endpoint::completions), "a", false, tools::FinishReason::none, false);
  EXPECT_EQ(chunk["object"], "text_completion");
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(chunk.contains("usage"));
  nlohmann::json first =
      chunkJson(identity(Endpoint::chatCompletions), "", true, tools::FinishReason::none, true);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["usage"].is_null());
  nlohmann::json last =
      chunkJson(identity(Endpoint::chatCompletions), "", false, tools::FinishReason::stop, false);
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  nlohmann::json usage = usageChunkJson(identity(Endpoint::chatCompletions), {4, 6});
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 6);
}

TEST(ResponseJson, SseAndInvalidUtf8) {
  EXPECT_EQ(sseEvent(nlohmann::json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(std::string(kSseDone), "data: [DONE]\n\n");
  // Invalid UTF-8 never throws.
  EXPECT_EQ(dumpJson(nlohmann::json("a\xFF")), "\"a\xEF\xBF\xBD\"");
}

TEST(ResponseJson, Models) {
  nlohmann::json json = modelListJson("demo", 5);
  EXPECT_EQ(json["object"], "list");
  EXPECT_EQ(json["data"][0]["id"], "demo");
}

} // namespace
} // namespace dlm::serve
