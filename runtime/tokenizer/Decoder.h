// The "decoder" stage of tokenizer.json: turns token strings back into text. ByteLevel maps the
// byte-level alphabet back to bytes; null joins tokens with spaces (Hugging Face's fallback).
#pragma once

#include "support/Status.h"

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <string_view>

namespace dlm::tokenizer {

class Decoder {
public:
  // `config` is the "decoder" value.
  static StatusOr<Decoder> fromJson(const nlohmann::json &config);

  // Appends the bytes of the next token; `first` is true for the first token of a decode call.
  void appendToken(std::string &out, std::string_view token, bool first) const;

private:
  bool byteLevel_ = false;
};

} // namespace dlm::tokenizer
