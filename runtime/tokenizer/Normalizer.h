// The "normalizer" stage of tokenizer.json. Qwen2/3 and Dream use NFC; Llama 3 and LLaDA have
// none; SentencePiece-converted tokenizers write spaces as '▁' with Replace (Gemma) and put a '▁'
// in front with Prepend (Llama 2). NFC (with ICU), Replace, Prepend and any Sequence of them are
// supported; other normalizers are rejected when the tokenizer is loaded. NFKC/NFKD are left out
// on purpose: ICU's Unicode 15 tables decompose 72 newer characters that Hugging Face's older
// tables keep, so results would differ.
#pragma once

#include "runtime/tokenizer/Replace.h"
#include "support/Status.h"

#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dlm::tokenizer {

class Normalizer {
public:
  // `config` is the "normalizer" value; null means no normalization.
  static StatusOr<Normalizer> fromJson(const nlohmann::json &config);

  bool isIdentity() const { return steps_.empty(); }
  // `text` must be valid UTF-8. `startAligned`, when given, receives the length of the result's
  // prefix that Hugging Face aligns with the first character of `text` (its normalized form and
  // anything prepended to it). The Metaspace pre-tokenizer's prepend_scheme "first" prepends only
  // to a piece that starts there.
  std::string apply(std::string_view text, size_t *startAligned = nullptr) const;

private:
  struct Step {
    enum class Kind { Nfc, Replace, Prepend } kind = Kind::Nfc;
    std::optional<Replace> replace;
    std::string prepend;
  };

  Status add(const nlohmann::json &config, int depth);

  std::vector<Step> steps_;
};

} // namespace dlm::tokenizer
