// Request bodies as GenerateRequests or OpenAI errors (tools/dlm-serve/RequestParser.h), on a
// hand-made model description: two policies, a byte "tokenizer", 128 positions.
#include "tools/dlm-serve/RequestParser.h"

#include "tests/serve/HandMadeServedModel.h"

#include <gtest/gtest.h>

namespace dlm::serve {
namespace {

ServedModel fakeModel(bool chat = false) { return testing::handMadeServedModel(chat); }

ParsedRequest parsed(Endpoint endpoint, const std::string &body, const ServedModel &model) {
  auto result = parseRequest(endpoint, body, model);
  if (const ApiError *error = std::get_if<ApiError>(&result)) {
    ADD_FAILURE() << body << ": " << error->message;
    return {};
  }
  return std::get<ParsedRequest>(result);
}

ApiError refused(Endpoint endpoint, const std::string &body, const ServedModel &model) {
  auto result = parseRequest(endpoint, body, model);
  if (const ApiError *error = std::get_if<ApiError>(&result))
    return *error;
  ADD_FAILURE() << body << " was accepted";
  return {};
}

int64_t knob(const ParsedRequest &request, const std::string &name) {
  return std::get<int64_t>(request.request.knobs.at(name));
}

TEST(RequestParser, TextPromptWithoutSpecialTokensUnlessAsked) {
  ServedModel model = fakeModel();
  ParsedRequest plain = parsed(Endpoint::completions, R"({"prompt": "a<s>"})", model);
  EXPECT_EQ(plain.request.promptIds, (std::vector<int32_t>{'a', '<', 's', '>'}));
  ParsedRequest special = parsed(Endpoint::completions,
                                 R"({"prompt": "a<s>", "parse_special_tokens": true})", model);
  EXPECT_EQ(special.request.promptIds, (std::vector<int32_t>{'a', 255}));
  EXPECT_FALSE(plain.stream);
  EXPECT_EQ(plain.maxTokens, -1);
}

TEST(RequestParser, TokenIdPromptsAndOneElementLists) {
  ServedModel model = fakeModel();
  EXPECT_EQ(parsed(Endpoint::completions, R"({"prompt": [1, 2, 3]})", model).request.promptIds,
            (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(parsed(Endpoint::completions, R"({"prompt": ["ab"]})", model).request.promptIds,
            (std::vector<int32_t>{'a', 'b'}));
  EXPECT_EQ(parsed(Endpoint::completions, R"({"prompt": [[7]]})", model).request.promptIds,
            (std::vector<int32_t>{7}));
  EXPECT_EQ(refused(Endpoint::completions, R"({"prompt": ["a", "b"]})", model).param, "prompt");
  EXPECT_EQ(refused(Endpoint::completions, R"({"prompt": [999]})", model).param, "prompt");
  EXPECT_EQ(refused(Endpoint::completions, R"({"prompt": ""})", model).param, "prompt");
  EXPECT_EQ(refused(Endpoint::completions, R"({})", model).param, "prompt");
}

TEST(RequestParser, MaxTokensRoundsUpToWholeBlocksAndScalesSteps) {
  ServedModel model = fakeModel();
  ParsedRequest request = parsed(Endpoint::completions, R"({"prompt": "a", "max_tokens": 40})",
                                 model);
  EXPECT_EQ(request.maxTokens, 40);
  EXPECT_EQ(knob(request, "gen_length"), 64);
  EXPECT_EQ(knob(request, "steps"), 64); // 32 steps per block, 2 blocks
  request = parsed(Endpoint::completions, R"({"prompt": "a", "max_tokens": 96})", model);
  EXPECT_EQ(knob(request, "gen_length"), 96);
  EXPECT_EQ(knob(request, "steps"), 96);
  // Given steps and block_length are the request's.
  request = parsed(Endpoint::completions,
                   R"({"prompt": "a", "max_tokens": 20, "block_length": 8, "steps": 3})", model);
  EXPECT_EQ(knob(request, "gen_length"), 24);
  EXPECT_EQ(knob(request, "steps"), 3);
  // The autoregressive program's length knob.
  request = parsed(Endpoint::completions,
                   R"({"prompt": "a", "max_tokens": 5, "policy": "autoregressive"})", model);
  EXPECT_EQ(knob(request, "max_new_tokens"), 5);
  EXPECT_EQ(std::get<std::string>(request.request.knobs.at("policy")), "autoregressive");
  EXPECT_EQ(refused(Endpoint::completions, R"({"prompt": "a", "max_tokens": 0})", model).param,
            "max_tokens");
}

TEST(RequestParser, ContextLengthExceeded) {
  ServedModel model = fakeModel();
  ApiError error =
      refused(Endpoint::completions, R"({"prompt": "abc", "max_tokens": 126})", model);
  EXPECT_EQ(error.code, "context_length_exceeded");
  EXPECT_EQ(error.param, "prompt");
  EXPECT_EQ(error.httpStatus, 400);
  EXPECT_NE(error.message.find("maximum context length is 128"), std::string::npos);
  // 64 generated (the default) after a 65-token prompt.
  EXPECT_EQ(refused(Endpoint::completions,
                    R"({"prompt": ")" + std::string(65, 'x') + R"("})", model)
                .code,
            "context_length_exceeded");
}

// A body nested a million deep is refused before anything walks it (a recursive walk, or dump()
// for an error message, would overflow the stack).
TEST(RequestParser, DeeplyNestedBodyIsABadRequest) {
  ServedModel model = fakeModel();
  const std::string body =
      R"({"prompt": "abc", "x": )" + std::string(1000000, '[') + std::string(1000000, ']') + "}";
  ApiError error = refused(Endpoint::completions, body, model);
  EXPECT_EQ(error.httpStatus, 400);
  EXPECT_NE(error.message.find("the request body nests arrays or objects more than 64 deep"),
            std::string::npos)
      << error.message;
}

TEST(RequestParser, KnobsByNameAndUnknownFields) {
  ServedModel model = fakeModel();
  ParsedRequest request = parsed(
      Endpoint::completions,
      R"({"prompt": "a", "threshold": 0.9, "cache": "prefix", "seed": 7, "temperature": 0.5})",
      model);
  EXPECT_DOUBLE_EQ(std::get<double>(request.request.knobs.at("threshold")), 0.9);
  EXPECT_DOUBLE_EQ(std::get<double>(request.request.knobs.at("temperature")), 0.5);
  EXPECT_EQ(std::get<std::string>(request.request.knobs.at("cache")), "prefix");
  EXPECT_EQ(request.request.seed, 7u);
  // A knob of the other program is accepted (the engine ignores it for this one).
  EXPECT_TRUE(parsed(Endpoint::completions, R"({"prompt": "a", "max_new_tokens": 3})", model)
                  .request.knobs.count("max_new_tokens"));
  ApiError unknown = refused(Endpoint::completions, R"({"prompt": "a", "stepz": 3})", model);
  EXPECT_EQ(unknown.param, "stepz");
  EXPECT_NE(unknown.message.find("'stepz'"), std::string::npos);
  EXPECT_EQ(refused(Endpoint::completions, R"({"prompt": "a", "policy": "magic"})", model).param,
            "policy");
  EXPECT_EQ(refused(Endpoint::completions, R"({"prompt": "a", "cache": "all"})", model).param,
            "cache");
}

TEST(RequestParser, TopPOnlyWherePolicyHasIt) {
  ServedModel model = fakeModel();
  // Neutral top_p is accepted by a policy without the knob, anything else refused.
  EXPECT_FALSE(parsed(Endpoint::completions, R"({"prompt": "a", "top_p": 1})", model)
                   .request.knobs.count("top_p"));
  EXPECT_EQ(refused(Endpoint::completions, R"({"prompt": "a", "top_p": 0.5})", model).param,
            "top_p");
  ParsedRequest request = parsed(
      Endpoint::completions, R"({"prompt": "a", "top_p": 0.5, "policy": "autoregressive"})", model);
  EXPECT_DOUBLE_EQ(std::get<double>(request.request.knobs.at("top_p")), 0.5);
}

TEST(RequestParser, UnsupportedFieldsRefusedByName) {
  ServedModel model = fakeModel();
  for (const char *field : {R"("n": 2)", R"("best_of": 3)", R"("logprobs": 1)",
                            R"("echo": true)", R"("presence_penalty": 0.5)",
                            R"("logit_bias": {"1": 2})", R"("suffix": "x")"}) {
    ApiError error =
        refused(Endpoint::completions, std::string(R"({"prompt": "a", )") + field + "}", model);
    EXPECT_EQ(error.httpStatus, 400) << field;
    EXPECT_EQ(error.type, "invalid_request_error") << field;
    EXPECT_FALSE(error.param.empty()) << field;
  }
  // Their neutral values are fine.
  parsed(Endpoint::completions,
         R"({"prompt": "a", "n": 1, "logprobs": null, "presence_penalty": 0, "user": "u"})",
         model);
}

TEST(RequestParser, ModelFieldAndBadJson) {
  ServedModel model = fakeModel();
  parsed(Endpoint::completions, R"({"prompt": "a", "model": "demo"})", model);
  ApiError other = refused(Endpoint::completions, R"({"prompt": "a", "model": "gpt-4"})", model);
  EXPECT_EQ(other.httpStatus, 404);
  EXPECT_EQ(other.code, "model_not_found");
  EXPECT_EQ(refused(Endpoint::completions, "{nope", model).type, "invalid_request_error");
  EXPECT_EQ(refused(Endpoint::completions, "[1]", model).httpStatus, 400);
  EXPECT_EQ(refused(Endpoint::completions, R"({"prompt": "a", "max_tokens": "x"})", model).param,
            "max_tokens");
}

TEST(RequestParser, StreamAndStop) {
  ServedModel model = fakeModel();
  ParsedRequest request = parsed(
      Endpoint::completions,
      R"({"prompt": "a", "stream": true, "stream_options": {"include_usage": true}, "stop": ["x", "yz"]})",
      model);
  EXPECT_TRUE(request.stream);
  EXPECT_TRUE(request.includeUsage);
  EXPECT_EQ(request.stop, (std::vector<std::string>{"x", "yz"}));
  EXPECT_EQ(parsed(Endpoint::completions, R"({"prompt": "a", "stop": "q"})", model).stop,
            (std::vector<std::string>{"q"}));
  EXPECT_EQ(refused(Endpoint::completions, R"({"prompt": "a", "stop": 3})", model).param, "stop");
  EXPECT_EQ(refused(Endpoint::completions,
                    R"({"prompt": "a", "stream_options": {"include_usage": true}})", model)
                .param,
            "stream_options");
}

TEST(RequestParser, ChatNeedsTemplate) {
  ApiError error = refused(Endpoint::chatCompletions,
                           R"({"messages": [{"role": "user", "content": "hi"}]})", fakeModel());
  EXPECT_EQ(error.param, "messages");
  EXPECT_NE(error.message.find("no chat template"), std::string::npos);
  ServedModel chat = fakeModel(true);
  ParsedRequest request = parsed(
      Endpoint::chatCompletions,
      R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}], "max_completion_tokens": 8})",
      chat);
  EXPECT_EQ(request.request.promptIds, (std::vector<int32_t>{'s', 'h', 'i'}));
  EXPECT_EQ(request.maxTokens, 8);
  EXPECT_EQ(refused(Endpoint::chatCompletions, R"({"messages": []})", chat).param, "messages");
  EXPECT_EQ(refused(Endpoint::chatCompletions, R"({"messages": [{"content": "x"}]})", chat).param,
            "messages");
  // A completions field is unknown to chat.
  EXPECT_EQ(refused(Endpoint::chatCompletions,
                    R"({"messages": [{"role": "user", "content": "x"}], "prompt": "a"})", chat)
                .param,
            "prompt");
}

TEST(RequestParser, ServerDefaultsUnderRequestFields) {
  ServedModel model = fakeModel();
  GenerateRequest base;
  base.knobs["threshold"] = 0.8;
  base.seed = 5;
  auto result = parseRequest(Endpoint::completions, R"({"prompt": "a", "seed": 6})", model, base);
  ASSERT_TRUE(std::holds_alternative<ParsedRequest>(result));
  const ParsedRequest &request = std::get<ParsedRequest>(result);
  EXPECT_DOUBLE_EQ(std::get<double>(request.request.knobs.at("threshold")), 0.8);
  EXPECT_EQ(request.request.seed, 6u);
}

// Found by fuzz/request: lengths near 2^63 overflowed int64 (rounding max_tokens up to whole
// blocks, scaling the steps, adding the prompt) and a whole real knob past 2^63 was cast to int64.
TEST(RequestParser, HugeLengthsAreRefusedWithoutOverflow) {
  ServedModel model = fakeModel();
  EXPECT_EQ(refused(Endpoint::completions,
                    R"({"prompt": "a", "max_tokens": 9223372036854775807})", model)
                .param,
            "max_tokens");
  EXPECT_EQ(refused(Endpoint::completions,
                    R"({"prompt": "a", "max_tokens": 9223372036854775000, "block_length": 1})",
                    model)
                .param,
            "max_tokens");
  ApiError tooLong = refused(Endpoint::completions,
                             R"({"prompt": "ab", "gen_length": 9223372036854775807})", model);
  EXPECT_EQ(tooLong.code, "context_length_exceeded");
  EXPECT_NE(tooLong.message.find("you requested 9223372036854775807 tokens"), std::string::npos);
  // 1e300 is a whole number but no int64, so max_tokens rounds to the default block (the engine
  // refuses the knob's value).
  ParsedRequest request = parsed(
      Endpoint::completions, R"({"prompt": "a", "max_tokens": 5, "block_length": 1e300})", model);
  EXPECT_EQ(knob(request, "gen_length"), 32);
}

TEST(ApiError, StatusCodesMapToHttp) {
  EXPECT_EQ(fromStatus(Status::error(StatusCode::queueFull, "full")).httpStatus, 429);
  EXPECT_EQ(fromStatus(Status::error(StatusCode::queueFull, "full")).retryAfterSeconds, 1);
  EXPECT_EQ(fromStatus(Status::error(StatusCode::unavailable, "bye")).httpStatus, 503);
  ApiError context = fromStatus(Status::error(StatusCode::contextLengthExceeded, "long"));
  EXPECT_EQ(context.httpStatus, 400);
  EXPECT_EQ(context.code, "context_length_exceeded");
  EXPECT_EQ(fromStatus(Status::error("bad knob")).httpStatus, 400);
  nlohmann::json json = badRequest("m", "p").toJson();
  EXPECT_EQ(json["error"]["message"], "m");
  EXPECT_EQ(json["error"]["param"], "p");
  EXPECT_TRUE(json["error"]["code"].is_null());
  EXPECT_EQ(json["error"]["type"], "invalid_request_error");
}

} // namespace
} // namespace dlm::serve
