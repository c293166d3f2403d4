#include "runtime/tokenizer/Decoder.h"

#include "runtime/tokenizer/ByteLevel.h"

#include <nlohmann/json.hpp>

namespace dlm::tokenizer {

StatusOr<Decoder> Decoder::fromJson(const nlohmann::json &config) {
  Decoder decoder;
  if (config.is_null())
    return decoder;
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string())
    return Status::error("decoder has no \"type\"");
  const std::string type = config["type"].get<std::string>();
  // Some exporters wrap the one decoder in a Sequence; that is the decoder itself.
  if (type == "Sequence" && config.contains("decoders") && config["decoders"].is_array() &&
      config["decoders"].size() == 1)
    return fromJson(config["decoders"][0]);
  if (type != "ByteLevel")
    return Status::error("not supported yet: decoder " + type);
  decoder.byteLevel_ = true;
  return decoder;
}

void Decoder::appendToken(std::string &out, std::string_view token, bool first) const {
  if (byteLevel_) {
    appendByteLevelDecoded(out, token);
    return;
  }
  if (!first)
    out += ' ';
  out.append(token);
}

} // namespace dlm::tokenizer
