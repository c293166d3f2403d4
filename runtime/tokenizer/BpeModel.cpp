#include "runtime/tokenizer/BpeModel.h"
#include "support/JsonText.h"

#include "runtime/tokenizer/Utf8.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <queue>
#include <shared_mutex>

namespace dlm::tokenizer {
namespace {

using Json = nlohmann::json;

// Bounds the cache's memory on long-running servers; beyond it words are merged each time.
constexpr size_t kCacheCapacity = 100000;
// Longer words are rarely repeated and would bloat the cache.
constexpr size_t kMaxCachedWordBytes = 256;

bool isNullOrEmptyString(const Json &config, const char *key) {
  const auto it = config.find(key);
  return it == config.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty());
}

} // namespace

struct BpeModel::WordCache {
  std::shared_mutex mutex;
  std::unordered_map<std::string, std::vector<int32_t>> idsByWord;
};

BpeModel::BpeModel(Vocabulary vocabulary)
    : Model(std::move(vocabulary)), cache_(std::make_unique<WordCache>()) {
  byteTokenIds_.fill(-1);
}
BpeModel::BpeModel(BpeModel &&) noexcept = default;
BpeModel &BpeModel::operator=(BpeModel &&) noexcept = default;
BpeModel::~BpeModel() = default;

Status BpeModel::loadMerges(const Json &merges) {
  if (!merges.is_array())
    return Status::error("BPE model has no \"merges\" list");
  merges_.reserve(merges.size());
  int32_t rank = 0;
  for (const Json &merge : merges) {
    std::string left, right;
    const auto where = [&] {
      return "BPE merge " + std::to_string(rank) + " (" + jsonExcerpt(merge) + ")";
    };
    // Two spellings exist: "a b" (tokenizers < 0.20) and ["a", "b"] (0.20 onwards, which allows
    // spaces inside tokens).
    if (merge.is_string()) {
      const std::string &line = merge.get_ref<const std::string &>();
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
        return Status::error(where() + " is not two tokens separated by one space");
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      return Status::error(where() + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    const std::optional<int32_t> leftId = vocabulary_.find(left);
    if (!leftId)
      return Status::error(where() + " references unknown token '" + left + "'");
    const std::optional<int32_t> rightId = vocabulary_.find(right);
    if (!rightId)
      return Status::error(where() + " references unknown token '" + right + "'");
    const std::optional<int32_t> mergedId = vocabulary_.find(left + right);
    if (!mergedId)
      return Status::error(where() + " produces '" + left + right +
                           "', which is not in the vocabulary");
    // A repeated pair takes its last rank, as in Hugging Face's hash map.
    merges_[pairKey(*leftId, *rightId)] = {rank, *mergedId};
    ++rank;
  }
  return Status::ok();
}

StatusOr<BpeModel> BpeModel::fromJson(const Json &config) {
  if (!config.is_object())
    return Status::error("\"model\" is not an object");
  const auto type = config.find("type");
  if (type != config.end() && !(type->is_string() && type->get<std::string>() == "BPE"))
    return Status::error("not supported yet: tokenizer model '" +
                         (type->is_string() ? type->get<std::string>() : type->dump()) + "'");
  if (type == config.end() && !config.contains("merges"))
    return Status::error("\"model\" has no \"type\"");

  const auto dropout = config.find("dropout");
  if (dropout != config.end() && dropout->is_number() && dropout->get<double>() > 0.0)
    return Status::error("not supported yet: BPE dropout");
  if (!isNullOrEmptyString(config, "continuing_subword_prefix"))
    return Status::error("not supported yet: BPE continuing_subword_prefix");
  if (!isNullOrEmptyString(config, "end_of_word_suffix"))
    return Status::error("not supported yet: BPE end_of_word_suffix");
  StatusOr<Vocabulary> vocabulary =
      Vocabulary::fromJson(config.contains("vocab") ? config["vocab"] : Json(), "BPE");
  if (!vocabulary)
    return vocabulary.status();
  BpeModel model(std::move(*vocabulary));
  DLM_RETURN_IF_ERROR(model.loadMerges(config.contains("merges") ? config["merges"] : Json()));
  model.ignoreMerges_ = config.value("ignore_merges", false);
  model.fuseUnknown_ = config.value("fuse_unk", false);
  model.byteFallback_ = config.value("byte_fallback", false);
  model.byteTokenIds_.fill(-1);
  for (int byte = 0; byte < 256; ++byte) {
    // Hugging Face looks up format!("<{b:#04X}>"): "<0x" and two upper-case hex digits.
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", byte);
    if (const std::optional<int32_t> id = model.vocabulary_.find(name))
      model.byteTokenIds_[byte] = *id;
  }
  const auto unknown = config.find("unk_token");
  if (unknown != config.end() && unknown->is_string()) {
    const std::optional<int32_t> id = model.vocabulary_.find(unknown->get<std::string>());
    if (!id)
      return Status::error("BPE unk_token '" + unknown->get<std::string>() +
                           "' is not in the vocabulary");
    model.unknownId_ = *id;
  }
  return model;
}

std::vector<int32_t> BpeModel::mergeWord(std::string_view word) const {
  // Symbols form a linked list; a merged-away symbol gets length 0, like Hugging Face's Word.
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    uint32_t length;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  const auto addSymbol = [&symbols](int32_t id, uint32_t length) {
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, -1, length});
    if (index > 0)
      symbols[index - 1].next = index;
  };

  // A character with no token goes through byte fallback, then the unknown token. Like Hugging
  // Face, byte tokens are added without first emitting a pending unknown token, so an unknown
  // character followed by a byte-fallback character comes out as bytes, then <unk>.
  uint32_t pendingUnknownLength = 0; // bytes of a run of unknown characters not yet emitted
  size_t offset = 0;
  while (offset < word.size()) {
    const size_t length = utf8CharLength(word, offset);
    const std::string_view character = word.substr(offset, length);
    offset += length;
    if (const std::optional<int32_t> id = vocabulary_.find(character)) {
      if (pendingUnknownLength) {
        addSymbol(*unknownId_, pendingUnknownLength);
        pendingUnknownLength = 0;
      }
      addSymbol(*id, static_cast<uint32_t>(length));
      continue;
    }
    if (byteFallback_ && std::all_of(character.begin(), character.end(), [this](char byte) {
          return byteTokenIds_[static_cast<unsigned char>(byte)] >= 0;
        })) {
      for (const char byte : character)
        addSymbol(byteTokenIds_[static_cast<unsigned char>(byte)], 1);
      continue;
    }
    if (unknownId_) {
      if (pendingUnknownLength && !fuseUnknown_) {
        addSymbol(*unknownId_, pendingUnknownLength);
        pendingUnknownLength = 0;
      }
      pendingUnknownLength += static_cast<uint32_t>(length);
    }
  }
  if (pendingUnknownLength)
    addSymbol(*unknownId_, pendingUnknownLength);

  struct Candidate {
    int32_t rank;
    int32_t position;
    int32_t id;
  };
  // Lowest rank first, then leftmost position.
  const auto later = [](const Candidate &a, const Candidate &b) {
    return a.rank != b.rank ? a.rank > b.rank : a.position > b.position;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> queue(later);
  const auto pushIfMergeable = [&](int32_t position) {
    const Symbol &left = symbols[position];
    const auto merge = merges_.find(pairKey(left.id, symbols[left.next].id));
    if (merge != merges_.end())
      queue.push({merge->second.rank, position, merge->second.id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i)
    pushIfMergeable(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol &left = symbols[top.position];
    if (left.length == 0 || left.next < 0)
      continue;
    Symbol &right = symbols[left.next];
    // The pair may have changed since this candidate was queued.
    const auto merge = merges_.find(pairKey(left.id, right.id));
    if (merge == merges_.end() || merge->second.id != top.id)
      continue;
    left.id = top.id;
    left.length += right.length;
    left.next = right.next;
    right.length = 0;
    if (left.next >= 0)
      symbols[left.next].prev = top.position;
    if (left.prev >= 0)
      pushIfMergeable(left.prev);
    if (left.next >= 0)
      pushIfMergeable(top.position);
  }

  std::vector<int32_t> ids;
  for (const Symbol &symbol : symbols)
    if (symbol.length != 0)
      ids.push_back(symbol.id);
  return ids;
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t> &ids) const {
  if (word.empty())
    return;
  if (ignoreMerges_) {
    // Llama 3: a word that is itself a vocabulary entry is taken whole, whatever the merges say.
    if (const std::optional<int32_t> whole = vocabulary_.find(word)) {
      ids.push_back(*whole);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  std::string key;
  if (cacheable) {
    key.assign(word);
    std::shared_lock<std::shared_mutex> lock(cache_->mutex);
    const auto hit = cache_->idsByWord.find(key);
    if (hit != cache_->idsByWord.end()) {
      ids.insert(ids.end(), hit->second.begin(), hit->second.end());
      return;
    }
  }
  std::vector<int32_t> merged = mergeWord(word);
  ids.insert(ids.end(), merged.begin(), merged.end());
  if (cacheable) {
    std::unique_lock<std::shared_mutex> lock(cache_->mutex);
    if (cache_->idsByWord.size() < kCacheCapacity)
      cache_->idsByWord.emplace(std::move(key), std::move(merged));
  }
}

} // namespace dlm::tokenizer
