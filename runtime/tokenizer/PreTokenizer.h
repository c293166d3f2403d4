// The "pre_tokenizer" stage of tokenizer.json: splits text into the words that BPE merges
// within. Supported: Split (regex or literal, any behavior, invert), ByteLevel (optional prefix
// space, optional GPT-2 regex, then the byte-level alphabet) and Sequence of those. This covers
// GPT-2, Llama 3, Qwen2/3, LLaDA and Dream.
#pragma once

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

  // Appends the non-empty pre-tokens of `text` (valid UTF-8) to `out`.
  void apply(std::string_view text, std::vector<std::string> &out) const;

private:
  struct Step {
    enum class Kind { Split, ByteLevel } kind = Kind::Split;
    std::optional<Regex> regex; // Split's pattern, or ByteLevel's GPT-2 regex when enabled
    SplitBehavior behavior = SplitBehavior::Isolated;
    bool invert = false;
    bool addPrefixSpace = false;
  };

  static Status appendSteps(const nlohmann::json &config, std::vector<Step> &steps);
  static void applyStep(const Step &step, std::string_view text, std::vector<std::string> &out);

  std::vector<Step> steps_;
};

} // namespace dlm::tokenizer
