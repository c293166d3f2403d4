// Request bodies as dlm-serve parses them (tools/dlm-serve/RequestParser.h), for both endpoints,
// against two served models: the hand-made one of tests/serve/RequestParserTest.cpp (two
// policies, a byte "tokenizer", 128 positions) and one that encodes as a served artifact does,
// with the demo checkpoint's tokenizer and a ChatML template with tools (ChatPrompt).
#include "fuzz/FuzzSupport.h"
#include "runtime/chat/ChatPrompt.h"
#include "tests/serve/HandMadeServedModel.h"
#include "tools/dlm-serve/RequestParser.h"

#include <memory>

namespace {

using dlm::serve::Endpoint;
using dlm::serve::ServedModel;

struct RealEncoding {
  std::unique_ptr<dlm::Tokenizer> tokenizer;
  std::unique_ptr<dlm::ChatPrompt> chat;
};
RealEncoding realEncoding;

// The hand-made model's policies with ServedModel::describeModel's encoders on a real tokenizer
// and chat template.
ServedModel tokenizingModel() {
  ServedModel model = dlm::serve::testing::handMadeServedModel(/*chat=*/true);
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
  models = {dlm::serve::testing::handMadeServedModel(/*chat=*/true), tokenizingModel()};
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
