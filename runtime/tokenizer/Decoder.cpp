#include "runtime/tokenizer/Decoder.h"

#include "runtime/tokenizer/ByteLevel.h"
#include "runtime/tokenizer/SequenceDepth.h"
#include "runtime/tokenizer/Utf8.h"

#include <nlohmann/json.hpp>

#include <string_view>
#include <utility>

namespace dlm::tokenizer {
namespace {

using Json = nlohmann::json;

const std::string kReplacementCharacter = "\xEF\xBF\xBD";

int hexDigitValue(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

// The byte a "<0xNN>" token stands for. Hugging Face checks the length (6 bytes), "<0x" and ">",
// then parses the two characters with Rust's u8::from_str_radix, which takes either case and a
// '+' sign: "<0x+A>" is byte 0x0A too.
std::optional<unsigned char> byteOfToken(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>')
    return std::nullopt;
  std::string_view digits = token.substr(3, 2);
  if (digits.front() == '+')
    digits.remove_prefix(1);
  int value = 0;
  for (const char c : digits) {
    const int digit = hexDigitValue(c);
    if (digit < 0)
      return std::nullopt;
    value = value * 16 + digit;
  }
  return static_cast<unsigned char>(value);
}

// A JSON value that must be a string of exactly one character.
StatusOr<std::string> oneCharacter(const Json &config, const char *key, const std::string &where) {
  const auto it = config.find(key);
  if (it == config.end() || !it->is_string())
    return Status::error(where + " has no \"" + key + "\" string");
  std::string text = it->get<std::string>();
  if (text.empty() || utf8CharLength(text, 0) != text.size())
    return Status::error(where + ": \"" + key + "\" must be one character, not '" + text + "'");
  return text;
}

StatusOr<size_t> count(const Json &config, const char *key, const std::string &where) {
  const auto it = config.find(key);
  if (it == config.end() || !it->is_number_integer() || it->get<int64_t>() < 0)
    return Status::error(where + " has no non-negative integer \"" + key + "\"");
  return static_cast<size_t>(it->get<int64_t>());
}

// Every occurrence of `from` in `text` (non-overlapping, left to right) replaced by `to`, as Rust's
// str::replace does.
void replaceAll(std::string &text, std::string_view from, std::string_view to) {
  size_t at = text.find(from);
  if (at == std::string::npos)
    return;
  std::string out;
  size_t done = 0;
  for (; at != std::string::npos; at = text.find(from, done)) {
    out.append(text, done, at - done).append(to);
    done = at + from.size();
  }
  out.append(text, done, std::string::npos);
  text = std::move(out);
}

// Hugging Face's decoders::wordpiece::cleanup, applied to each token on its own.
void wordPieceCleanup(std::string &token) {
  static constexpr std::pair<std::string_view, std::string_view> kReplacements[] = {
      {" .", "."},      {" ?", "?"},     {" !", "!"},   {" ,", ","},
      {" ' ", "'"},     {" n't", "n't"}, {" 'm", "'m"}, {" do not", " don't"},
      {" 's", "'s"},    {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto &[from, to] : kReplacements)
    replaceAll(token, from, to);
}

} // namespace

// The token list between steps. With keepCutCharacter, `cutCharacter` holds the raw bytes of a
// character cut short that belong after the last token.
struct Decoder::Tokens {
  std::vector<std::string> list;
  std::string cutCharacter;
};

Status Decoder::append(const Json &config, int depth) {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string())
    return Status::error("decoder has no \"type\"");
  const std::string type = config["type"].get<std::string>();
  if (type == "Sequence") {
    if (!config.contains("decoders") || !config["decoders"].is_array())
      return Status::error("decoder Sequence has no \"decoders\" list");
    DLM_RETURN_IF_ERROR(checkSequenceDepth("decoder", depth));
    for (const Json &inner : config["decoders"])
      DLM_RETURN_IF_ERROR(append(inner, depth + 1));
    return Status::ok();
  }

  Step step;
  if (type == "ByteLevel") {
    step.kind = Step::Kind::ByteLevel;
  } else if (type == "ByteFallback") {
    step.kind = Step::Kind::ByteFallback;
  } else if (type == "Fuse") {
    step.kind = Step::Kind::Fuse;
  } else if (type == "Replace") {
    StatusOr<Replace> replace = Replace::fromJson(config, "decoder");
    if (!replace)
      return replace.status();
    step.kind = Step::Kind::Replace;
    step.replace = std::move(*replace);
  } else if (type == "Metaspace") {
    StatusOr<Metaspace> metaspace = Metaspace::fromJson(config, "decoder");
    if (!metaspace)
      return metaspace.status();
    step.kind = Step::Kind::Metaspace;
    step.metaspace = std::move(*metaspace);
  } else if (type == "Strip") {
    step.kind = Step::Kind::Strip;
    DLM_ASSIGN_OR_RETURN(step.stripContent, oneCharacter(config, "content", "decoder Strip"));
    DLM_ASSIGN_OR_RETURN(step.stripStart, count(config, "start", "decoder Strip"));
    DLM_ASSIGN_OR_RETURN(step.stripStop, count(config, "stop", "decoder Strip"));
  } else if (type == "WordPiece") {
    step.kind = Step::Kind::WordPiece;
    const auto prefix = config.find("prefix");
    if (prefix == config.end() || !prefix->is_string())
      return Status::error("decoder WordPiece has no \"prefix\" string");
    step.wordPiecePrefix = prefix->get<std::string>();
    const auto cleanup = config.find("cleanup");
    if (cleanup == config.end() || !cleanup->is_boolean())
      return Status::error("decoder WordPiece has no \"cleanup\" true or false");
    step.wordPieceCleanup = cleanup->get<bool>();
  } else {
    return Status::error("not supported yet: decoder " + type);
  }
  steps_.push_back(std::move(step));
  return Status::ok();
}

StatusOr<Decoder> Decoder::fromJson(const Json &config) {
  Decoder decoder;
  if (config.is_null()) {
    decoder.joinWithSpaces_ = true;
    return decoder;
  }
  DLM_RETURN_IF_ERROR(decoder.append(config, 0));
  double growth = 1;
  for (const Step &step : decoder.steps_)
    if (step.replace)
      growth *= step.replace->growth();
  DLM_RETURN_IF_ERROR(checkTextGrowth("decoder", growth, 0, decoder.steps_.size()));
  return decoder;
}

void Decoder::applyStep(const Step &step, Tokens &tokens, bool keepCutCharacter) {
  std::vector<std::string> &list = tokens.list;
  switch (step.kind) {
  case Step::Kind::ByteLevel: {
    // All tokens become one string of bytes, repaired as Rust's from_utf8_lossy does.
    std::string bytes;
    for (const std::string &token : list)
      appendByteLevelDecoded(bytes, token);
    bytes += tokens.cutCharacter;
    const size_t cut = keepCutCharacter ? cutCharacterLength(bytes) : 0;
    tokens.cutCharacter = bytes.substr(bytes.size() - cut);
    bytes.resize(bytes.size() - cut);
    list.assign(1, isValidUtf8(bytes) ? std::move(bytes) : repairUtf8(bytes));
    return;
  }
  case Step::Kind::Replace:
    for (std::string &token : list)
      token = step.replace->apply(token);
    return;
  case Step::Kind::ByteFallback: {
    // Each run of byte tokens becomes its text when that is valid UTF-8, or else one U+FFFD
    // token per byte (not per invalid sequence, unlike from_utf8_lossy). So a run's text is final only
    // once a token that is not a byte ends it: while streaming, a run at the very end is left
    // out, as later bytes may complete it or turn all of it into U+FFFDs.
    std::vector<std::string> out;
    out.reserve(list.size());
    std::string run; // one byte per byte token
    const auto flushRun = [&](bool atEnd) {
      if (run.empty())
        return;
      if (atEnd && keepCutCharacter) {
        run.clear();
        return;
      }
      if (isValidUtf8(run)) {
        out.push_back(std::move(run));
      } else {
        // One token per byte, as Hugging Face pushes them: later steps (Strip, Metaspace) act
        // per token.
        out.insert(out.end(), run.size(), kReplacementCharacter);
      }
      run.clear();
    };
    for (std::string &token : list) {
      if (const std::optional<unsigned char> byte = byteOfToken(token)) {
        run += static_cast<char>(*byte);
        continue;
      }
      flushRun(false);
      out.push_back(std::move(token));
    }
    flushRun(true);
    list = std::move(out);
    return;
  }
  case Step::Kind::Fuse: {
    std::string fused;
    for (const std::string &token : list)
      fused += token;
    list.assign(1, std::move(fused));
    return;
  }
  case Step::Kind::Strip: {
    const std::string &content = step.stripContent;
    for (size_t i = 0; i < list.size(); ++i) {
      std::string_view token = list[i];
      size_t begin = 0, end = token.size();
      for (size_t n = 0; n < step.stripStart && token.substr(begin, content.size()) == content; ++n)
        begin += content.size();
      // A cut character ends the last token, and it is not the content. Hugging Face panics when
      // the two cuts cross; here they stop at each other.
      const bool endsInCutCharacter = i + 1 == list.size() && !tokens.cutCharacter.empty();
      for (size_t n = 0;
           n < step.stripStop && !endsInCutCharacter && end >= begin + content.size() &&
           token.substr(end - content.size(), content.size()) == content;
           ++n)
        end -= content.size();
      list[i] = std::string(token.substr(begin, end - begin));
    }
    return;
  }
  case Step::Kind::WordPiece:
    // The first token is kept as it is, prefix included; each later one gets a space in front
    // unless it starts with the prefix, which is removed instead.
    for (size_t i = 0; i < list.size(); ++i) {
      std::string &token = list[i];
      if (i != 0) {
        if (std::string_view(token).substr(0, step.wordPiecePrefix.size()) ==
            step.wordPiecePrefix)
          token.erase(0, step.wordPiecePrefix.size());
        else
          token.insert(0, 1, ' ');
      }
      if (step.wordPieceCleanup)
        wordPieceCleanup(token);
    }
    return;
  case Step::Kind::Metaspace:
    for (size_t i = 0; i < list.size(); ++i) {
      std::string decoded;
      step.metaspace->decodeToken(decoded, list[i], i);
      list[i] = std::move(decoded);
    }
    return;
  }
}

std::string Decoder::decode(const std::vector<std::string_view> &tokens,
                            bool keepCutCharacter) const {
  std::string text;
  if (joinWithSpaces_) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0)
        text += ' ';
      text.append(tokens[i]);
    }
    return text;
  }
  Tokens state;
  state.list.assign(tokens.begin(), tokens.end());
  for (const Step &step : steps_)
    applyStep(step, state, keepCutCharacter);
  for (const std::string &token : state.list)
    text += token;
  return text + state.cutCharacter;
}

} // namespace dlm::tokenizer
