// A hand-made served model for the request parser (RequestParserTest, fuzz/request.cpp): two
// policies with their knobs, a byte "tokenizer" with "<s>" as the one special token, 128
// positions, and with `chat` a chat encoding of the messages' contents.
#pragma once

#include "tools/dlm-serve/RequestParser.h"

namespace dlm::serve::testing {

inline ServedModel handMadeServedModel(bool chat) {
  ServedModel model;
  model.id = "demo";
  model.maxPositions = 128;
  model.vocabSize = 256;
  ServedPolicy lowConfidence;
  lowConfidence.name = "low-confidence";
  lowConfidence.knobs.names = {"gen_length", "block_length", "steps",
                               "temperature", "threshold",    "cache"};
  lowConfidence.knobs.values = {{"gen_length", int64_t{64}},
                                {"block_length", int64_t{32}},
                                {"steps", int64_t{64}},
                                {"temperature", 0.0},
                                {"cache", std::string("none")}};
  // The declaration's check of the one knob with choices here, as a program's loader has it.
  lowConfidence.checkKnob = [](const std::string &name, const artifact::AttributeValue &value) {
    const std::string *text = std::get_if<std::string>(&value);
    if (name == "cache" && (!text || (*text != "none" && *text != "prefix" && *text != "dual")))
      return Status::error("unknown cache mode (expected none, prefix or dual)");
    return Status::ok();
  };
  ServedPolicy autoregressive;
  autoregressive.name = "autoregressive";
  autoregressive.knobs.names = {"max_new_tokens", "temperature", "top_p"};
  autoregressive.knobs.values = {{"max_new_tokens", int64_t{16}}};
  model.policies = {lowConfidence, autoregressive};
  model.encode = [](const std::string &text, bool parseSpecial) {
    std::vector<int32_t> ids;
    // "<s>" is the one special token.
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
  if (chat)
    model.encodeChat = [](const ChatRequest &request) -> StatusOr<std::vector<int32_t>> {
      std::vector<int32_t> ids;
      for (const auto &message : request.messages)
        for (char c : message["content"].get<std::string>())
          ids.push_back(static_cast<unsigned char>(c));
      return ids;
    };
  return model;
}

} // namespace dlm::serve::testing
