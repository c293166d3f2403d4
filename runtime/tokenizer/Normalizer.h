// The "normalizer" stage of tokenizer.json. Qwen2/3 and Dream use NFC; Llama 3 and LLaDA have
// none. NFC (alone or in a Sequence) is implemented with ICU; other normalizers are rejected when
// the tokenizer is loaded. NFKC/NFKD are left out on purpose: ICU's Unicode 15 tables decompose
// 72 newer characters that Hugging Face's older tables keep, so results would differ.
#pragma once

#include "support/Status.h"

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <string_view>

namespace dlm::tokenizer {

class Normalizer {
public:
  // `config` is the "normalizer" value; null means no normalization.
  static StatusOr<Normalizer> fromJson(const nlohmann::json &config);

  bool isIdentity() const { return !nfc_; }
  // `text` must be valid UTF-8.
  std::string apply(std::string_view text) const;

private:
  Status add(const nlohmann::json &config);

  bool nfc_ = false;
};

} // namespace dlm::tokenizer
