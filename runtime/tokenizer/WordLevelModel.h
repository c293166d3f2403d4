// The WordLevel "model" of tokenizer.json: each pre-token is looked up whole in the vocabulary,
// and one missing from it becomes the unknown token, as Hugging Face's models::wordlevel does.
// Hugging Face fails at encode time ("Missing [UNK] token from the vocabulary") when a word is
// missing and unk_token is not in the vocabulary; here such a file is refused when loading.
#pragma once

#include "runtime/tokenizer/Model.h"
#include "runtime/tokenizer/Vocabulary.h"

namespace dlm::tokenizer {

class WordLevelModel final : public Model {
public:
  // `config` is {"type": "WordLevel", "vocab": {...}, "unk_token": "<unk>"}; both "vocab" and
  // "unk_token" are required, as in Hugging Face.
  static StatusOr<WordLevelModel> fromJson(const nlohmann::json &config);

  void tokenize(std::string_view word, std::vector<int32_t> &ids) const override;

private:
  WordLevelModel(Vocabulary vocabulary, int32_t unknownId)
      : Model(std::move(vocabulary)), unknownId_(unknownId) {}

  int32_t unknownId_;
};

} // namespace dlm::tokenizer
