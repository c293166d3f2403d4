// The "model" stage of tokenizer.json: turns one pre-token into ids and names the ids of the
// vocabulary. BPE (BpeModel) and WordLevel (WordLevelModel) are supported.
#pragma once

#include "runtime/tokenizer/Vocabulary.h"
#include "support/Status.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dlm::tokenizer {

class Model {
public:
  // `config` is the "model" value of tokenizer.json. Errors name the problem, e.g. "not
  // supported yet: tokenizer model 'Unigram'".
  static StatusOr<std::unique_ptr<Model>> fromJson(const nlohmann::json &config);

  virtual ~Model() = default;

  // Appends the ids of one pre-token to `ids`.
  virtual void tokenize(std::string_view word, std::vector<int32_t> &ids) const = 0;

  // The vocabulary, which every model kind has and names the same way.
  std::optional<int32_t> tokenToId(std::string_view token) const {
    return vocabulary_.find(token);
  }
  // Null when no vocabulary entry has this id.
  const std::string *idToToken(int32_t id) const { return vocabulary_.token(id); }
  // One more than the largest id in the vocabulary.
  int32_t idLimit() const { return vocabulary_.idLimit(); }
  // Number of vocabulary entries (Hugging Face's get_vocab_size, which numbers added tokens).
  int32_t entryCount() const { return vocabulary_.entryCount(); }

protected:
  explicit Model(Vocabulary vocabulary) : vocabulary_(std::move(vocabulary)) {}
  Model(const Model &) = default;
  Model(Model &&) noexcept = default;
  Model &operator=(const Model &) = default;
  Model &operator=(Model &&) noexcept = default;

  Vocabulary vocabulary_;
};

} // namespace dlm::tokenizer
