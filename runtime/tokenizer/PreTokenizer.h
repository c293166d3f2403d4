// The "pre_tokenizer" stage of tokenizer.json: splits text into the words that BPE merges
// within. Supported: Split (regex or literal, any behavior, invert), ByteLevel (optional prefix
// space, optional GPT-2 regex, then the byte-level alphabet), Metaspace (spaces become '▁', which
// may be prepended, then optionally a split before each '▁'), WhitespaceSplit (cut at white
// space, which is dropped), Whitespace (runs of word characters and runs of other non-space
// characters, Rust regex's \w+|[^\w\s]+) and Sequence of those. This covers GPT-2, Llama 3,
// Qwen2/3, LLaDA, Dream, the SentencePiece conversions (Mistral, Llama 2) and word-level
// tokenizers.
#pragma once

#include "runtime/tokenizer/Metaspace.h"
#include "runtime/tokenizer/Regex.h"
#include "support/Status.h"

#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dlm::tokenizer {

// What Split does with the pieces its pattern matches (Hugging Face's SplitDelimiterBehavior).
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

class PreTokenizer {
public:
  // `config` is the "pre_tokenizer" value; null keeps each piece whole.
  static StatusOr<PreTokenizer> fromJson(const nlohmann::json &config);

  // Appends the non-empty pre-tokens of `text` (valid UTF-8) to `out`. `startAligned` counts the
  // leading bytes of `text` that Hugging Face aligns with the start of the whole input (original
  // offset 0): the first character when `text` is the start of the input, plus whatever a
  // normalizer prepended to it; 0 elsewhere. Metaspace's prepend_scheme "first" prepends only to
  // a piece that starts inside this prefix.
  void apply(std::string_view text, size_t startAligned, std::vector<std::string> &out) const;

private:
  struct Step {
    enum class Kind { Split, ByteLevel, Metaspace, WhitespaceSplit, Whitespace } kind = Kind::Split;
    std::optional<Regex> regex; // Split's pattern, or ByteLevel's GPT-2 regex when enabled
    SplitBehavior behavior = SplitBehavior::Isolated;
    bool invert = false;
    bool addPrefixSpace = false;
    std::optional<Metaspace> metaspace;
  };
  // A pre-token and the length of its prefix aligned with the start of the input.
  struct Piece {
    std::string text;
    size_t startAligned;
  };

  static Status appendSteps(const nlohmann::json &config, int depth, std::vector<Step> &steps);
  static void applyStep(const Step &step, const Piece &piece, std::vector<Piece> &out);

  std::vector<Step> steps_;
};

} // namespace dlm::tokenizer
