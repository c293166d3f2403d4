#include "runtime/tokenizer/AddedVocabulary.h"

#include "runtime/tokenizer/CharacterClass.h"
#include "runtime/tokenizer/Model.h"
#include "runtime/tokenizer/Normalizer.h"
#include "runtime/tokenizer/Utf8.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <unordered_set>

namespace dlm::tokenizer {
namespace {

using Json = nlohmann::json;

// Start of the run of white space that ends at `end`.
size_t startOfTrailingSpace(std::string_view text, size_t end) {
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80)
      --start;
    size_t cursor = start;
    if (!isWhiteSpace(decodeUtf8(text, cursor)))
      break;
    end = start;
  }
  return end;
}

// End of the run of white space that starts at `begin`.
size_t endOfLeadingSpace(std::string_view text, size_t begin) {
  while (begin < text.size()) {
    size_t cursor = begin;
    if (!isWhiteSpace(decodeUtf8(text, cursor)))
      break;
    begin = cursor;
  }
  return begin;
}

StatusOr<AddedToken> parseAddedToken(const Json &entry, size_t index) {
  const std::string where = "added_tokens[" + std::to_string(index) + "]";
  if (!entry.is_object() || !entry.contains("content") || !entry["content"].is_string())
    return Status::error(where + " has no \"content\" string");
  const auto flag = [&entry](const char *key, bool defaultValue) {
    const auto it = entry.find(key);
    return it != entry.end() && it->is_boolean() ? it->get<bool>() : defaultValue;
  };
  const auto &content = entry["content"].get_ref<const std::string &>();
  if (content.size() > kMaxAddedTokenBytes)
    return Status::error(where + " is " + std::to_string(content.size()) +
                         " bytes long; dlm allows added tokens of at most " +
                         std::to_string(kMaxAddedTokenBytes) + " bytes");
  AddedToken token;
  token.content = content;
  token.special = flag("special", false);
  token.singleWord = flag("single_word", false);
  token.lstrip = flag("lstrip", false);
  token.rstrip = flag("rstrip", false);
  token.normalized = flag("normalized", !token.special);
  return token;
}

bool sameToken(const AddedToken &a, const AddedToken &b) {
  return a.content == b.content && a.special == b.special && a.singleWord == b.singleWord &&
         a.lstrip == b.lstrip && a.rstrip == b.rstrip && a.normalized == b.normalized;
}

} // namespace

void AddedVocabulary::Matcher::insert(std::string_view pattern, int32_t tokenId) {
  if (pattern.empty())
    return;
  int32_t node = 0;
  for (unsigned char byte : pattern) {
    auto &children = nodes_[node].children;
    const auto child = std::find_if(children.begin(), children.end(),
                                    [byte](const auto &entry) { return entry.first == byte; });
    if (child != children.end()) {
      node = child->second;
      continue;
    }
    const auto next = static_cast<int32_t>(nodes_.size());
    nodes_[node].children.emplace_back(byte, next);
    nodes_.emplace_back();
    node = next;
  }
  // With duplicate contents the first pattern wins, as with Aho-Corasick's pattern order.
  if (nodes_[node].tokenId < 0)
    nodes_[node].tokenId = tokenId;
  startsAPattern_[static_cast<unsigned char>(pattern.front())] = true;
}

std::pair<size_t, int32_t> AddedVocabulary::Matcher::longestAt(std::string_view text,
                                                               size_t offset) const {
  std::pair<size_t, int32_t> best{0, -1};
  if (!startsAPattern_[static_cast<unsigned char>(text[offset])])
    return best;
  int32_t node = 0;
  for (size_t i = offset; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const auto &children = nodes_[node].children;
    const auto child = std::find_if(children.begin(), children.end(),
                                    [byte](const auto &entry) { return entry.first == byte; });
    if (child == children.end())
      break;
    node = child->second;
    if (nodes_[node].tokenId >= 0)
      best = {i + 1 - offset, nodes_[node].tokenId};
  }
  return best;
}

StatusOr<AddedVocabulary> AddedVocabulary::fromJson(const Json &addedTokens, const Model &model,
                                                    const Normalizer &normalizer) {
  AddedVocabulary vocabulary;
  if (addedTokens.is_null())
    return vocabulary;
  if (!addedTokens.is_array())
    return Status::error("\"added_tokens\" is not a list");

  std::vector<AddedToken> entries;
  for (size_t i = 0; i < addedTokens.size(); ++i) {
    StatusOr<AddedToken> token = parseAddedToken(addedTokens[i], i);
    if (!token)
      return token.status();
    if (!token->content.empty())
      entries.push_back(std::move(*token));
  }

  // Hugging Face ignores the ids written in the file: a token already in the vocabulary keeps
  // that id, a new one gets the next id after max(model vocabulary size, largest added id),
  // where the size is the number of entries. Real files agree with this; following it keeps us
  // identical to the reference when they do not.
  const int32_t modelSize = model.entryCount();
  std::optional<int32_t> largestAddedId;
  std::vector<AddedToken> matchOrder; // specials first, then the others (Hugging Face's order)
  std::vector<AddedToken> ordinary;
  // A content marked special anywhere in the list is special everywhere.
  std::unordered_set<std::string> specialContents;
  for (const AddedToken &entry : entries)
    if (entry.special && specialContents.insert(entry.content).second)
      matchOrder.push_back(entry);
  for (AddedToken entry : entries) {
    const auto existing = vocabulary.indexByContent_.find(entry.content);
    if (existing != vocabulary.indexByContent_.end() &&
        sameToken(vocabulary.tokens_[existing->second], entry))
      continue;
    int32_t id;
    if (existing != vocabulary.indexByContent_.end())
      id = vocabulary.tokens_[existing->second].id;
    else if (std::optional<int32_t> modelId = model.tokenToId(entry.content))
      id = *modelId;
    else if (!largestAddedId)
      id = modelSize;
    else
      id = *largestAddedId >= modelSize || modelSize == 0 ? *largestAddedId + 1 : modelSize;
    entry.id = id;
    largestAddedId = std::max(largestAddedId.value_or(id), id);
    entry.special = specialContents.count(entry.content) != 0;
    if (!entry.special)
      ordinary.push_back(entry);

    const auto byId = vocabulary.indexById_.find(id);
    if (byId != vocabulary.indexById_.end()) {
      vocabulary.tokens_[byId->second] = entry;
    } else {
      vocabulary.indexById_.emplace(id, vocabulary.tokens_.size());
      vocabulary.tokens_.push_back(entry);
    }
    vocabulary.indexByContent_[entry.content] = vocabulary.indexById_[id];
  }
  matchOrder.insert(matchOrder.end(), ordinary.begin(), ordinary.end());

  for (const AddedToken &token : matchOrder) {
    const int32_t id = *vocabulary.findByContent(token.content);
    if (token.normalized)
      vocabulary.normalizedMatcher_.insert(normalizer.apply(token.content), id);
    else
      vocabulary.rawMatcher_.insert(token.content, id);
  }
  for (const AddedToken &token : vocabulary.tokens_)
    vocabulary.idLimit_ = std::max(vocabulary.idLimit_, token.id + 1);
  return vocabulary;
}

const AddedToken *AddedVocabulary::findById(int32_t id) const {
  const auto it = indexById_.find(id);
  return it == indexById_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocabulary::findByContent(std::string_view content) const {
  const auto it = indexByContent_.find(std::string(content));
  if (it == indexByContent_.end())
    return std::nullopt;
  return tokens_[it->second].id;
}

std::vector<TextSpan> AddedVocabulary::split(std::string_view text, bool normalizedPass,
                                             bool specialTokensAsText) const {
  const Matcher &matcher = normalizedPass ? normalizedMatcher_ : rawMatcher_;
  std::vector<TextSpan> spans;
  if (text.empty())
    return spans;
  if (matcher.empty()) {
    spans.push_back({0, text.size(), -1});
    return spans;
  }
  size_t spanStart = 0; // where the current run of ordinary text begins
  size_t offset = 0;
  while (offset < text.size()) {
    const auto [length, id] = matcher.longestAt(text, offset);
    if (length == 0) {
      ++offset;
      continue;
    }
    size_t begin = offset, end = offset + length;
    // The search resumes after the match itself, not after stripped space, as in Hugging Face.
    offset = end;
    const AddedToken &token = *findById(id);
    if (specialTokensAsText && token.special)
      continue;
    if (token.singleWord) {
      const bool wordBefore = begin > 0 && isWordCharacter(lastCodePointBefore(text, begin));
      size_t cursor = end;
      const bool wordAfter = end < text.size() && isWordCharacter(decodeUtf8(text, cursor));
      if (wordBefore || wordAfter)
        continue;
    }
    if (token.lstrip)
      begin = std::max(startOfTrailingSpace(text, begin), spanStart);
    if (token.rstrip)
      end = endOfLeadingSpace(text, end);
    if (spanStart < begin)
      spans.push_back({spanStart, begin, -1});
    spans.push_back({begin, end, id});
    spanStart = end;
  }
  if (spanStart < text.size())
    spans.push_back({spanStart, text.size(), -1});
  return spans;
}

} // namespace dlm::tokenizer
