// The "model" stage of tokenizer.json: turns one pre-token into ids and names the ids of the
// vocabulary. BPE (BpeModel) and WordLevel (WordLevelModel) are supported.
#pragma once

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

  virtual std::optional<int32_t> tokenToId(std::string_view token) const = 0;
  // Null when no vocabulary entry has this id.
  virtual const std::string *idToToken(int32_t id) const = 0;
  // One more than the largest id in the vocabulary.
  virtual int32_t idLimit() const = 0;
  // Number of vocabulary entries (Hugging Face's get_vocab_size, which numbers added tokens).
  virtual int32_t entryCount() const = 0;

protected:
  Model() = default;
  Model(const Model &) = default;
  Model(Model &&) noexcept = default;
  Model &operator=(const Model &) = default;
  Model &operator=(Model &&) noexcept = default;
};

} // namespace dlm::tokenizer
