#include "runtime/tokenizer/Vocabulary.h"
#include "support/JsonText.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>

namespace dlm::tokenizer {
namespace {

// The id table is as long as the largest id, so that id may not run far ahead of the entries.
Status checkLargestId(int64_t maxId, int64_t entries, const std::string &model) {
  const int64_t allowed = largestAllowedTokenId(entries);
  if (maxId <= allowed)
    return Status::ok();
  return Status::error(model + " vocab: largest id " + std::to_string(maxId) + " for " +
                       std::to_string(entries) + " entries; dlm allows ids up to " +
                       std::to_string(allowed) + " (" + std::to_string(kIdsPerEntry) +
                       " per entry + " + std::to_string(kIdsWithoutEntry - 1) + ", at most " +
                       std::to_string(kMaxTokenId) + ")");
}

} // namespace

StatusOr<Vocabulary> Vocabulary::fromJson(const nlohmann::json &vocab, const std::string &model) {
  if (!vocab.is_object())
    return Status::error(model + " model has no \"vocab\" object");
  int64_t maxId = -1;
  for (const auto &[token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxTokenId)
      return Status::error(model + " vocab entry '" + token + "' has invalid id " +
                           jsonExcerpt(id));
    maxId = std::max(maxId, id.get<int64_t>());
  }
  DLM_RETURN_IF_ERROR(checkLargestId(maxId, static_cast<int64_t>(vocab.size()), model));
  Vocabulary vocabulary;
  vocabulary.tokensById_.assign(static_cast<size_t>(maxId + 1), std::string());
  vocabulary.idAssigned_.assign(static_cast<size_t>(maxId + 1), false);
  vocabulary.idsByToken_.reserve(vocab.size());
  for (const auto &[token, id] : vocab.items()) {
    const auto index = static_cast<int32_t>(id.get<int64_t>());
    vocabulary.idsByToken_.emplace(token, index);
    if (!vocabulary.idAssigned_[index]) {
      vocabulary.tokensById_[index] = token;
      vocabulary.idAssigned_[index] = true;
    }
  }
  return vocabulary;
}

} // namespace dlm::tokenizer
