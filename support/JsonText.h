// JSON that other people wrote (config.json, tokenizer.json, safetensors headers, HTTP bodies),
// parsed with named limits. nlohmann's parser is iterative, but dump() and every loader that walks
// a value recurse, so a file of a million '[' would overflow the stack of whoever walks it: the
// nesting depth is checked before the parse. Error messages quote values through jsonExcerpt, so
// a huge value never becomes a huge message.
#pragma once

#include "support/Status.h"

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace dlm {

// Deeper than any real config, tokenizer or request (tokenizer.json nests about 8 levels).
inline constexpr int kMaxJsonDepth = 64;
inline constexpr size_t kJsonExcerptChars = 80;

// Ok when no array or object in `text` nests deeper than kMaxJsonDepth; else names `what` and the
// byte offset. Brackets inside strings do not count; malformed text is left to the parser.
inline Status checkJsonDepth(std::string_view text, const std::string &what) {
  int depth = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        return Status::error(what + " nests arrays or objects more than " +
                             std::to_string(kMaxJsonDepth) + " deep (at byte " +
                             std::to_string(i) + ")");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return Status::ok();
}

// Parses `text` as `what` ("tokenizer.json", "the request body"): a nesting deeper than
// kMaxJsonDepth or invalid JSON is an error naming `what` (and nlohmann's line and column).
template <typename Json = nlohmann::json>
StatusOr<Json> parseJsonText(std::string_view text, const std::string &what) {
  DLM_RETURN_IF_ERROR(checkJsonDepth(text, what));
  Json value = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!value.is_discarded())
    return value;
  std::string detail;
  try {
    (void)Json::parse(text.begin(), text.end());
  } catch (const typename Json::exception &error) {
    detail = std::string(": ") + error.what();
  }
  return Status::error(what + " is not valid JSON" + detail);
}

// `value` as JSON text for an error message, cut to kJsonExcerptChars with "..." after.
template <typename Json> std::string jsonExcerpt(const Json &value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > kJsonExcerptChars)
    text = text.substr(0, kJsonExcerptChars) + "...";
  return text;
}

} // namespace dlm
