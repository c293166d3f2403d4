#include "runtime/tokenizer/PreTokenizer.h"
#include "support/JsonText.h"

#include "runtime/tokenizer/ByteLevel.h"
#include "runtime/tokenizer/CharacterClass.h"
#include "runtime/tokenizer/SequenceDepth.h"
#include "runtime/tokenizer/Utf8.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace dlm::tokenizer {
namespace {

using Json = nlohmann::json;

// The pattern GPT-2 (and ByteLevel with use_regex=true) splits words with.
constexpr const char *kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct Segment {
  size_t begin, end;
  bool isMatch;
};

StatusOr<SplitBehavior> parseBehavior(const Json &value) {
  const std::string name = value.is_string() ? value.get<std::string>() : jsonExcerpt(value);
  if (name == "Removed")
    return SplitBehavior::Removed;
  if (name == "Isolated")
    return SplitBehavior::Isolated;
  if (name == "MergedWithPrevious")
    return SplitBehavior::MergedWithPrevious;
  if (name == "MergedWithNext")
    return SplitBehavior::MergedWithNext;
  if (name == "Contiguous")
    return SplitBehavior::Contiguous;
  return Status::error("pre_tokenizer Split: unknown behavior " + name);
}

bool boolField(const Json &config, const char *key, bool defaultValue) {
  const auto it = config.find(key);
  return it != config.end() && it->is_boolean() ? it->get<bool>() : defaultValue;
}

// The pieces a pattern cuts `text` into, matched or not, covering all of it.
std::vector<Segment> segmentsOf(const Regex &regex, std::string_view text, bool invert) {
  std::vector<Segment> segments;
  size_t previousEnd = 0;
  for (const auto &[begin, end] : regex.findAll(text)) {
    if (begin > previousEnd)
      segments.push_back({previousEnd, begin, invert});
    segments.push_back({begin, end, !invert});
    previousEnd = end;
  }
  if (previousEnd < text.size())
    segments.push_back({previousEnd, text.size(), invert});
  return segments;
}

// Applies a SplitBehavior the way Hugging Face's NormalizedString::split does: matches are glued
// to a neighbour or kept apart, and the resulting ranges become the new pieces.
std::vector<Segment> applyBehavior(std::vector<Segment> segments, SplitBehavior behavior) {
  std::vector<Segment> pieces;
  bool previousMatched = false;
  switch (behavior) {
  case SplitBehavior::Isolated:
    return segments;
  case SplitBehavior::Removed:
    for (const Segment &segment : segments)
      if (!segment.isMatch)
        pieces.push_back(segment);
    return pieces;
  case SplitBehavior::Contiguous:
    for (const Segment &segment : segments) {
      if (segment.isMatch == previousMatched && !pieces.empty())
        pieces.back().end = segment.end;
      else
        pieces.push_back(segment);
      previousMatched = segment.isMatch;
    }
    return pieces;
  case SplitBehavior::MergedWithPrevious:
    for (const Segment &segment : segments) {
      if (segment.isMatch && !previousMatched && !pieces.empty())
        pieces.back().end = segment.end;
      else
        pieces.push_back(segment);
      previousMatched = segment.isMatch;
    }
    return pieces;
  case SplitBehavior::MergedWithNext:
    for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
      if (it->isMatch && !previousMatched && !pieces.empty())
        pieces.back().begin = it->begin;
      else
        pieces.push_back(*it);
      previousMatched = it->isMatch;
    }
    return std::vector<Segment>(pieces.rbegin(), pieces.rend());
  }
  return segments;
}

// The maximal runs of characters of one class, as [begin, end) byte ranges; characters of class 0
// separate runs and are left out. `classOf` maps a code point to its class.
template <typename ClassOf>
std::vector<Segment> runsOf(std::string_view text, ClassOf classOf) {
  std::vector<Segment> runs;
  int runClass = 0;
  size_t offset = 0;
  while (offset < text.size()) {
    const size_t begin = offset;
    const int characterClass = classOf(decodeUtf8(text, offset));
    if (characterClass != 0 && characterClass == runClass)
      runs.back().end = offset;
    else if (characterClass != 0)
      runs.push_back({begin, offset, true});
    runClass = characterClass;
  }
  return runs;
}

// WhitespaceSplit: Hugging Face splits on char::is_whitespace with behavior Removed.
std::vector<Segment> whitespaceSplit(std::string_view text) {
  return runsOf(text, [](char32_t c) { return isWhiteSpace(c) ? 0 : 1; });
}

// Whitespace: the matches of \w+|[^\w\s]+ (Rust regex classes), kept; what lies between them,
// white space, is removed.
std::vector<Segment> whitespaceWords(std::string_view text) {
  return runsOf(text, [](char32_t c) { return isWordCharacter(c) ? 1 : isWhiteSpace(c) ? 0 : 2; });
}

} // namespace

Status PreTokenizer::appendSteps(const Json &config, int depth, std::vector<Step> &steps) {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string())
    return Status::error("pre_tokenizer has no \"type\"");
  const std::string type = config["type"].get<std::string>();

  if (type == "Sequence") {
    if (!config.contains("pretokenizers") || !config["pretokenizers"].is_array())
      return Status::error("pre_tokenizer Sequence has no \"pretokenizers\" list");
    DLM_RETURN_IF_ERROR(checkSequenceDepth("pre_tokenizer", depth));
    for (const Json &inner : config["pretokenizers"])
      DLM_RETURN_IF_ERROR(appendSteps(inner, depth + 1, steps));
    return Status::ok();
  }

  Step step;
  if (type == "ByteLevel") {
    step.kind = Step::Kind::ByteLevel;
    step.addPrefixSpace = boolField(config, "add_prefix_space", true);
    if (boolField(config, "use_regex", true)) {
      StatusOr<Regex> regex = Regex::compile(kGpt2Pattern);
      if (!regex)
        return regex.status().withContext("pre_tokenizer ByteLevel");
      step.regex = std::move(*regex);
    }
    steps.push_back(std::move(step));
    return Status::ok();
  }

  if (type == "WhitespaceSplit" || type == "Whitespace") {
    step.kind = type == "Whitespace" ? Step::Kind::Whitespace : Step::Kind::WhitespaceSplit;
    steps.push_back(std::move(step));
    return Status::ok();
  }

  if (type == "Metaspace") {
    StatusOr<Metaspace> metaspace = Metaspace::fromJson(config, "pre_tokenizer");
    if (!metaspace)
      return metaspace.status();
    step.kind = Step::Kind::Metaspace;
    step.metaspace = std::move(*metaspace);
    steps.push_back(std::move(step));
    return Status::ok();
  }

  if (type == "Split") {
    const auto pattern = config.find("pattern");
    if (pattern == config.end() || !pattern->is_object())
      return Status::error("pre_tokenizer Split has no \"pattern\"");
    const bool isRegex = pattern->contains("Regex") && (*pattern)["Regex"].is_string();
    const bool isString = pattern->contains("String") && (*pattern)["String"].is_string();
    if (!isRegex && !isString)
      return Status::error("pre_tokenizer Split: \"pattern\" is neither {\"Regex\": ...} nor "
                           "{\"String\": ...}");
    const std::string text = (*pattern)[isRegex ? "Regex" : "String"].get<std::string>();
    StatusOr<Regex> regex = Regex::compile(text, /*literal=*/!isRegex);
    if (!regex)
      return regex.status().withContext("pre_tokenizer Split");
    step.regex = std::move(*regex);
    StatusOr<SplitBehavior> behavior =
        parseBehavior(config.contains("behavior") ? config["behavior"] : Json("Isolated"));
    if (!behavior)
      return behavior.status();
    step.behavior = *behavior;
    step.invert = boolField(config, "invert", false);
    steps.push_back(std::move(step));
    return Status::ok();
  }

  return Status::error("not supported yet: pre_tokenizer " + type);
}

StatusOr<PreTokenizer> PreTokenizer::fromJson(const Json &config) {
  PreTokenizer preTokenizer;
  if (!config.is_null())
    DLM_RETURN_IF_ERROR(appendSteps(config, 0, preTokenizer.steps_));
  return preTokenizer;
}

void PreTokenizer::applyStep(const Step &step, const Piece &piece, std::vector<Piece> &out) {
  // A sub-piece starting at `offset` keeps the part of the parent's `aligned` prefix it covers.
  const auto emitFrom = [&out](std::string text, size_t offset, size_t aligned) {
    if (!text.empty()) {
      const size_t kept = offset < aligned ? std::min(aligned - offset, text.size()) : 0;
      out.push_back({std::move(text), kept});
    }
  };
  const auto emit = [&](std::string text, size_t offset) {
    emitFrom(std::move(text), offset, piece.startAligned);
  };
  const std::string_view whole = piece.text;

  if (step.kind == Step::Kind::Split) {
    for (const Segment &segment :
         applyBehavior(segmentsOf(*step.regex, whole, step.invert), step.behavior))
      emit(std::string(whole.substr(segment.begin, segment.end - segment.begin)), segment.begin);
    return;
  }

  if (step.kind == Step::Kind::WhitespaceSplit || step.kind == Step::Kind::Whitespace) {
    for (const Segment &segment : step.kind == Step::Kind::Whitespace ? whitespaceWords(whole)
                                                                      : whitespaceSplit(whole))
      emit(std::string(whole.substr(segment.begin, segment.end - segment.begin)), segment.begin);
    return;
  }

  if (step.kind == Step::Kind::Metaspace) {
    const Metaspace &metaspace = *step.metaspace;
    size_t aligned = piece.startAligned;
    const std::string replaced = metaspace.replaceSpaces(whole, aligned);
    if (!metaspace.split()) {
      emitFrom(replaced, 0, aligned);
      return;
    }
    // Split with MergedWithNext on one character: a new piece starts at each replacement
    // character (consecutive ones stand alone but the last, which joins what follows).
    const std::string &mark = metaspace.replacement();
    size_t begin = 0;
    for (size_t at = replaced.find(mark, 1); at != std::string::npos;
         at = replaced.find(mark, at + mark.size())) {
      emitFrom(replaced.substr(begin, at - begin), begin, aligned);
      begin = at;
    }
    emitFrom(replaced.substr(begin), begin, aligned);
    return;
  }

  std::string_view text = whole;
  std::string prefixed;
  size_t aligned = piece.startAligned;
  if (step.addPrefixSpace && (text.empty() || text.front() != ' ')) {
    prefixed = " ";
    prefixed.append(text);
    text = prefixed;
    if (aligned > 0) // the space takes the alignment of the first character
      ++aligned;
  }
  const auto appendEncoded = [&](std::string_view word, size_t offset) {
    if (word.empty())
      return;
    std::string encoded;
    encoded.reserve(word.size() * 2);
    appendByteLevelEncoded(encoded, word);
    // Each byte becomes one alphabet character, aligned as the byte was.
    std::string alignedPart;
    if (offset < aligned)
      appendByteLevelEncoded(alignedPart, word.substr(0, aligned - offset));
    out.push_back({std::move(encoded), alignedPart.size()});
  };
  if (!step.regex) {
    appendEncoded(text, 0);
    return;
  }
  for (const Segment &segment : segmentsOf(*step.regex, text, /*invert=*/false))
    appendEncoded(text.substr(segment.begin, segment.end - segment.begin), segment.begin);
}

void PreTokenizer::apply(std::string_view text, size_t startAligned,
                         std::vector<std::string> &out) const {
  if (text.empty())
    return;
  if (steps_.empty()) {
    out.emplace_back(text);
    return;
  }
  std::vector<Piece> current{Piece{std::string(text), std::min(startAligned, text.size())}}, next;
  for (const Step &step : steps_) {
    next.clear();
    for (const Piece &piece : current)
      applyStep(step, piece, next);
    current.swap(next);
  }
  for (Piece &piece : current)
    out.push_back(std::move(piece.text));
}

} // namespace dlm::tokenizer
