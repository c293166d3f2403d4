// Request bodies as dlm-serve parses them (tools/dlm-serve/RequestParser.h), for both endpoints,
// against two served models: the hand-made one of tests/serve/RequestParserTest.cpp (two
// policies, a byte "tokenizer", 128 positions) and one that encodes as a served artifact does,
// with the demo checkpoint's tokenizer and a ChatML template with tools (ChatPrompt).
#include "fuzz/FuzzSupport.h"
#include "runtime/chat/ChatPrompt.h"
#include "tools/dlm-serve/RequestParser.h"

#include <memory>

namespace {

using dlm::serve::Endpoint;
using dlm::serve::ServedModel;

// RequestParserTest.cpp's fakeModel(true): the policies' knobs, "<s>" as the one special token.
ServedModel handMadeModel() {
  ServedModel model;
  model.id = "demo";
  model.maxPositions = 128;
  model.vocabSize = 256;
  dlm::serve::ServedPolicy lowConfidence;
  lowConfidence.name = "low-confidence";
  lowConfidence.declared = {"gen_length", "block_length", "steps", "temperature", "threshold"};
  lowConfidence.defaults = {{"gen_length", int64_t{64}},
                            {"block_length", int64_t{32}},
                            {"steps", int64_t{64}},
                            {"temperature", 0.0}};
  dlm::serve::ServedPolicy autoregressive;
  autoregressive.name = "autoregressive";
  autoregressive.declared = {"max_new_tokens", "temperature", "top_p"};
  autoregressive.defaults = {{"max_new_tokens", int64_t{16}}};
  model.policies = {lowConfidence, autoregressive};
  model.encode = [](const std::string &text, bool parseSpecial) {
    std::vector<int32_t> ids;
    for (size_t i = 0; i < text.size(); ++i) {
      if (parseSpecial && text.compare(i, 3, "<s>") == 0) {
        ids.push_back(255);
        i += 2;
        continue;
      }
      ids.push_back(static_cast<unsigned char>(text[i]));
    }
    return ids;
  };
  // The parser hands over string contents only; anything else would be its bug, seen here as an
  // uncaught exception.
  model.encodeChat = [](const dlm::ChatRequest &request) -> dlm::StatusOr<std::vector<int32_t>> {
    std::vector<int32_t> ids;
    for (const auto &message : request.messages)
      for (char c : message["content"].get<std::string>())
        ids.push_back(static_cast<unsigned char>(c));
    return ids;
  };
  return model;
}

struct RealEncoding {
  std::unique_ptr<dlm::Tokenizer> tokenizer;
  std::unique_ptr<dlm::ChatPrompt> chat;
};
RealEncoding realEncoding;

// The hand-made model's policies with ServedModel::describeModel's encoders on a real tokenizer
// and chat template.
ServedModel tokenizingModel() {
  ServedModel model = handMadeModel();
  const dlm::Tokenizer *tokenizer = realEncoding.tokenizer.get();
  model.vocabSize = tokenizer->vocabSize();
  model.encode = [tokenizer](const std::string &text, bool parseSpecialTokens) {
    return tokenizer->encode(text, /*addSpecialTokens=*/true,
                             /*specialTokensAsText=*/!parseSpecialTokens);
  };
  const dlm::ChatPrompt *chat = realEncoding.chat.get();
  model.encodeChat = [chat](const dlm::ChatRequest &request) { return chat->encode(request); };
  return model;
}

template <typename T> T orExit(dlm::StatusOr<T> loaded, const char *what) {
  if (!loaded) {
    std::fprintf(stderr, "dlm fuzz: %s: %s\n", what, loaded.status().message().c_str());
    std::exit(1);
  }
  return std::move(*loaded);
}

std::vector<ServedModel> models;

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  realEncoding.tokenizer = std::make_unique<dlm::Tokenizer>(
      orExit(dlm::Tokenizer::fromJson(
                 dlm::fuzz::readFixture("tests/models/demo/checkpoint/tokenizer.json")),
             "demo tokenizer"));
  realEncoding.chat = std::make_unique<dlm::ChatPrompt>(orExit(
      dlm::ChatPrompt::create(
          dlm::fuzz::readFixture("tests/reference/chat_templates/templates/chatml_tools.jinja"),
          {{"eos_token", "<|endoftext|>"}}, realEncoding.tokenizer.get()),
      "chat template"));
  models = {handMadeModel(), tokenizingModel()};
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string body(dlm::fuzz::asText(data, size));
  dlm::GenerateRequest base;
  base.seed = 7;
  for (const ServedModel &model : models)
    for (Endpoint endpoint : {Endpoint::completions, Endpoint::chatCompletions}) {
      auto parsed = dlm::serve::parseRequest(endpoint, body, model, base);
      if (const auto *error = std::get_if<dlm::serve::ApiError>(&parsed))
        dlm::fuzz::trace("parseRequest", error->message);
      else
        dlm::fuzz::trace("parseRequest", "ok");
    }
  return 0;
}
