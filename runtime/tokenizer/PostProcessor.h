// The "post_processor" stage of tokenizer.json for a single sequence: TemplateProcessing (Llama 3
// puts <|begin_of_text|> in front), RobertaProcessing/BertProcessing (cls ... sep), ByteLevel
// (no change to ids) and Sequence of those. Applied only when special tokens are requested.
#pragma once

#include "support/Status.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <vector>

namespace dlm::tokenizer {

class PostProcessor {
public:
  // `config` is the "post_processor" value; null adds nothing.
  static StatusOr<PostProcessor> fromJson(const nlohmann::json &config);

  // The final ids for one encoded sequence.
  std::vector<int32_t> apply(std::vector<int32_t> ids) const;

  // Ids placed before / after the sequence (e.g. the BOS id of Llama 3).
  const std::vector<int32_t> &prefixIds() const { return prefix_; }
  const std::vector<int32_t> &suffixIds() const { return suffix_; }

private:
  Status append(const nlohmann::json &config, int depth);

  std::vector<int32_t> prefix_;
  std::vector<int32_t> suffix_;
};

} // namespace dlm::tokenizer
