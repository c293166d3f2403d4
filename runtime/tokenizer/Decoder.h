// The "decoder" stage of tokenizer.json: turns the token strings of a decode call back into text,
// as Hugging Face's Decoder::decode does (each step maps the whole token list, then the pieces
// are concatenated). Steps: ByteLevel (the byte-level alphabet back to bytes), Replace,
// ByteFallback (runs of <0xNN> tokens become their bytes), Fuse, Strip, Metaspace, WordPiece
// (a space before each token but the first, none before a token with the continuation prefix,
// which is removed; optional cleanup of spaces before punctuation) and Sequence of those.
// GPT-2-style tokenizers use ByteLevel alone; SentencePiece conversions (Gemma, Llama 2,
// Mistral) use Sequence[Replace('▁' -> ' '), ByteFallback, Fuse, Strip] or Metaspace; word-level
// tokenizers use WordPiece. A null decoder joins tokens with spaces (Hugging Face's fallback).
#pragma once

#include "runtime/tokenizer/Metaspace.h"
#include "runtime/tokenizer/Replace.h"
#include "support/Status.h"

#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dlm::tokenizer {

class Decoder {
public:
  // `config` is the "decoder" value.
  static StatusOr<Decoder> fromJson(const nlohmann::json &config);

  // The text of `tokens`; valid UTF-8. With `keepCutCharacter`, a character cut short at the very
  // end (the first bytes of a multi-byte character from byte-level or <0xNN> tokens) is left as
  // its raw bytes instead of U+FFFD, so that a streaming caller can wait for the rest.
  std::string decode(const std::vector<std::string_view> &tokens, bool keepCutCharacter) const;

private:
  struct Step {
    enum class Kind { ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, WordPiece } kind;
    std::optional<Replace> replace;
    std::optional<Metaspace> metaspace;
    std::string stripContent; // Strip's character, as UTF-8
    size_t stripStart = 0;    // at most this many leading copies are removed
    size_t stripStop = 0;     // at most this many trailing copies are removed
    std::string wordPiecePrefix; // WordPiece's continuing-subword prefix ("##")
    bool wordPieceCleanup = false;
  };
  struct Tokens;

  Status append(const nlohmann::json &config, int depth);
  static void applyStep(const Step &step, Tokens &tokens, bool keepCutCharacter);

  bool joinWithSpaces_ = false; // no decoder at all
  std::vector<Step> steps_;
};

} // namespace dlm::tokenizer
