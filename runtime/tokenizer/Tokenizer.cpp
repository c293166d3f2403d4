#include "runtime/tokenizer/Tokenizer.h"

#include "runtime/tokenizer/AddedVocabulary.h"
#include "runtime/tokenizer/Decoder.h"
#include "runtime/tokenizer/Model.h"
#include "runtime/tokenizer/Normalizer.h"
#include "runtime/tokenizer/PostProcessor.h"
#include "runtime/tokenizer/PreTokenizer.h"
#include "runtime/tokenizer/Utf8.h"
#include "support/JsonText.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace dlm {

using Json = nlohmann::json;

struct Tokenizer::Impl {
  std::unique_ptr<tokenizer::Model> model;
  tokenizer::Normalizer normalizer;
  tokenizer::PreTokenizer preTokenizer;
  tokenizer::AddedVocabulary addedVocabulary;
  tokenizer::PostProcessor postProcessor;
  tokenizer::Decoder decoder;

  static StatusOr<std::unique_ptr<Impl>> load(const Json &root);
  StatusOr<std::string> decode(const std::vector<int32_t> &ids, bool skipSpecialTokens,
                               bool keepCutCharacter, int32_t vocabSize) const;
};

namespace {

const Json &fieldOrNull(const Json &object, const char *key) {
  static const Json null;
  const auto it = object.find(key);
  return it == object.end() ? null : *it;
}

} // namespace

// Loads every stage; "truncation" and "padding" are ignored because the runtime decides sequence
// lengths itself.
StatusOr<std::unique_ptr<Tokenizer::Impl>> Tokenizer::Impl::load(const Json &root) {
  if (!root.is_object())
    return Status::error("top level is not an object");
  if (!root.contains("model"))
    return Status::error("missing \"model\"");

  StatusOr<std::unique_ptr<tokenizer::Model>> model = tokenizer::Model::fromJson(root["model"]);
  if (!model)
    return model.status();
  StatusOr<tokenizer::Normalizer> normalizer =
      tokenizer::Normalizer::fromJson(fieldOrNull(root, "normalizer"));
  if (!normalizer)
    return normalizer.status();
  StatusOr<tokenizer::PreTokenizer> preTokenizer =
      tokenizer::PreTokenizer::fromJson(fieldOrNull(root, "pre_tokenizer"));
  if (!preTokenizer)
    return preTokenizer.status();
  StatusOr<tokenizer::AddedVocabulary> addedVocabulary =
      tokenizer::AddedVocabulary::fromJson(fieldOrNull(root, "added_tokens"), **model, *normalizer);
  if (!addedVocabulary)
    return addedVocabulary.status();
  StatusOr<tokenizer::PostProcessor> postProcessor =
      tokenizer::PostProcessor::fromJson(fieldOrNull(root, "post_processor"));
  if (!postProcessor)
    return postProcessor.status();
  StatusOr<tokenizer::Decoder> decoder = tokenizer::Decoder::fromJson(fieldOrNull(root, "decoder"));
  if (!decoder)
    return decoder.status();

  return std::make_unique<Tokenizer::Impl>(
      Tokenizer::Impl{std::move(*model), std::move(*normalizer), std::move(*preTokenizer),
                      std::move(*addedVocabulary), std::move(*postProcessor), std::move(*decoder)});
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer &&) noexcept = default;
Tokenizer &Tokenizer::operator=(Tokenizer &&) noexcept = default;
Tokenizer::~Tokenizer() = default;

StatusOr<Tokenizer> Tokenizer::fromJson(const std::string &jsonText) {
  StatusOr<Json> parsed = parseJsonText<Json>(jsonText, "tokenizer.json");
  if (!parsed)
    return parsed.status();
  const Json &root = *parsed;
  try {
    StatusOr<std::unique_ptr<Impl>> impl = Impl::load(root);
    if (!impl)
      return impl.status().withContext("tokenizer.json");
    return Tokenizer(std::move(*impl));
  } catch (const Json::exception &error) {
    // A field of an unexpected JSON type that the stage parsers did not check explicitly.
    return Status::error(std::string("tokenizer.json: unexpected value: ") + error.what());
  }
}

StatusOr<Tokenizer> Tokenizer::fromFile(const std::string &path) {
  std::ifstream file(path, std::ios::binary);
  if (!file)
    return Status::error("cannot open tokenizer file '" + path + "': " + std::strerror(errno));
  std::ostringstream contents;
  contents << file.rdbuf();
  if (file.bad())
    return Status::error("cannot read tokenizer file '" + path + "'");
  StatusOr<Tokenizer> tokenizer = fromJson(contents.str());
  if (!tokenizer)
    return tokenizer.status().withContext(path);
  return tokenizer;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool addSpecialTokens,
                                       bool specialTokensAsText) const {
  std::string repaired;
  if (!tokenizer::isValidUtf8(text)) {
    repaired = tokenizer::repairUtf8(text);
    text = repaired;
  }
  const Impl &impl = *impl_;
  std::vector<int32_t> ids;
  std::vector<std::string> words;
  std::string normalized;
  for (const tokenizer::TextSpan &raw : impl.addedVocabulary.split(text, false, specialTokensAsText)) {
    if (raw.tokenId >= 0) {
      ids.push_back(raw.tokenId);
      continue;
    }
    std::string_view piece = text.substr(raw.begin, raw.end - raw.begin);
    // Bytes of the normalized piece that Hugging Face aligns with the piece's first character.
    size_t startAligned = piece.empty() ? 0 : tokenizer::utf8CharLength(piece, 0);
    if (!impl.normalizer.isIdentity()) {
      normalized = impl.normalizer.apply(piece, &startAligned);
      piece = normalized;
    }
    for (const tokenizer::TextSpan &span : impl.addedVocabulary.split(piece, true, specialTokensAsText)) {
      if (span.tokenId >= 0) {
        ids.push_back(span.tokenId);
        continue;
      }
      words.clear();
      const size_t spanAligned =
          raw.begin == 0 && span.begin < startAligned ? startAligned - span.begin : 0;
      impl.preTokenizer.apply(piece.substr(span.begin, span.end - span.begin), spanAligned, words);
      for (const std::string &word : words)
        impl.model->tokenize(word, ids);
    }
  }
  return addSpecialTokens ? impl.postProcessor.apply(std::move(ids)) : ids;
}

StatusOr<std::string> Tokenizer::Impl::decode(const std::vector<int32_t> &ids,
                                              bool skipSpecialTokens, bool keepCutCharacter,
                                              int32_t vocabSize) const {
  std::vector<std::string_view> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    const std::string *token = nullptr;
    bool special = false;
    if (const AddedToken *added = addedVocabulary.findById(id)) {
      token = &added->content;
      special = added->special;
    } else {
      token = model->idToToken(id);
    }
    if (!token) {
      if (id < 0 || id >= vocabSize)
        return Status::error("token id " + std::to_string(id) +
                             " is out of range (vocabulary size " + std::to_string(vocabSize) +
                             ")");
      return Status::error("token id " + std::to_string(id) + " has no token");
    }
    if (skipSpecialTokens && special)
      continue;
    tokens.push_back(*token);
  }
  return decoder.decode(tokens, keepCutCharacter);
}

StatusOr<std::string> Tokenizer::decodeBytes(const std::vector<int32_t> &ids,
                                             bool skipSpecialTokens) const {
  return impl_->decode(ids, skipSpecialTokens, /*keepCutCharacter=*/true, vocabSize());
}

StatusOr<std::string> Tokenizer::decode(const std::vector<int32_t> &ids,
                                        bool skipSpecialTokens) const {
  return impl_->decode(ids, skipSpecialTokens, /*keepCutCharacter=*/false, vocabSize());
}

StatusOr<std::string> Tokenizer::decodeGenerated(const std::vector<int32_t> &ids,
                                                 bool final) const {
  std::vector<int32_t> known;
  known.reserve(ids.size());
  for (int32_t id : ids)
    if (id >= 0 && id < vocabSize() && idToToken(id))
      known.push_back(id);
  return final ? decode(known, /*skipSpecialTokens=*/true)
               : decodeBytes(known, /*skipSpecialTokens=*/true);
}

size_t Tokenizer::streamableLength(std::string_view text) {
  return text.size() - tokenizer::cutCharacterLength(text);
}

std::optional<int32_t> Tokenizer::tokenToId(std::string_view token) const {
  if (std::optional<int32_t> id = impl_->addedVocabulary.findByContent(token))
    return id;
  return impl_->model->tokenToId(token);
}

std::optional<std::string> Tokenizer::idToToken(int32_t id) const {
  if (const AddedToken *added = impl_->addedVocabulary.findById(id))
    return added->content;
  if (const std::string *token = impl_->model->idToToken(id))
    return *token;
  return std::nullopt;
}

int32_t Tokenizer::vocabSize() const {
  return std::max(impl_->model->idLimit(), impl_->addedVocabulary.idLimit());
}

const std::vector<AddedToken> &Tokenizer::addedTokens() const {
  return impl_->addedVocabulary.tokens();
}

std::optional<int32_t> Tokenizer::specialTokenId(std::string_view content) const {
  std::optional<int32_t> id = impl_->addedVocabulary.findByContent(content);
  if (id && isSpecialToken(*id))
    return id;
  return std::nullopt;
}

bool Tokenizer::isSpecialToken(int32_t id) const {
  const AddedToken *added = impl_->addedVocabulary.findById(id);
  return added && added->special;
}

const std::vector<int32_t> &Tokenizer::prefixTokenIds() const {
  return impl_->postProcessor.prefixIds();
}

const std::vector<int32_t> &Tokenizer::suffixTokenIds() const {
  return impl_->postProcessor.suffixIds();
}

} // namespace dlm
