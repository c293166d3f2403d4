#include "runtime/tokenizer/WordLevelModel.h"

#include <nlohmann/json.hpp>

namespace dlm::tokenizer {

StatusOr<WordLevelModel> WordLevelModel::fromJson(const nlohmann::json &config) {
  if (!config.is_object())
    return Status::error("\"model\" is not an object");
  const auto vocab = config.find("vocab");
  if (vocab == config.end())
    return Status::error("WordLevel model has no \"vocab\" object");
  StatusOr<Vocabulary> vocabulary = Vocabulary::fromJson(*vocab, "WordLevel");
  if (!vocabulary)
    return vocabulary.status();
  const auto unknown = config.find("unk_token");
  if (unknown == config.end() || !unknown->is_string())
    return Status::error("WordLevel model has no \"unk_token\" string");
  const std::string &unknownToken = unknown->get_ref<const std::string &>();
  const std::optional<int32_t> unknownId = vocabulary->find(unknownToken);
  if (!unknownId)
    return Status::error("WordLevel unk_token '" + unknownToken + "' is not in the vocabulary");
  return WordLevelModel(std::move(*vocabulary), *unknownId);
}

void WordLevelModel::tokenize(std::string_view word, std::vector<int32_t> &ids) const {
  if (word.empty())
    return;
  ids.push_back(vocabulary_.find(word).value_or(unknownId_));
}

} // namespace dlm::tokenizer
