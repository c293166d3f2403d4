#include "runtime/tokenizer/Replace.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace dlm::tokenizer {

StatusOr<Replace> Replace::fromJson(const nlohmann::json &config, const std::string &stage) {
  const std::string where = stage + " Replace";
  const auto pattern = config.find("pattern");
  if (pattern == config.end() || !pattern->is_object())
    return Status::error(where + " has no \"pattern\"");
  const auto content = config.find("content");
  if (content == config.end() || !content->is_string())
    return Status::error(where + " has no \"content\" string");
  const bool isRegex = pattern->contains("Regex") && (*pattern)["Regex"].is_string();
  const bool isString = pattern->contains("String") && (*pattern)["String"].is_string();
  if (!isRegex && !isString)
    return Status::error(where + ": \"pattern\" is neither {\"Regex\": ...} nor {\"String\": ...}");

  Replace replace;
  replace.content_ = content->get<std::string>();
  const std::string text = (*pattern)[isRegex ? "Regex" : "String"].get<std::string>();
  if (isString) {
    if (text.empty())
      return Status::error("not supported yet: " + where + " with an empty pattern");
    replace.literal_ = text;
    return replace;
  }
  StatusOr<Regex> regex = Regex::compile(text);
  if (!regex)
    return regex.status().withContext(where);
  if (regex->canMatchEmpty())
    return Status::error("not supported yet: " + where + " with a pattern that can match " +
                         "empty text ('" + text + "')");
  replace.regex_ = std::move(*regex);
  return replace;
}

double Replace::growth() const {
  const size_t shortest = regex_ ? regex_->minimumMatchLength() : literal_.size();
  return std::max(1.0, static_cast<double>(content_.size()) /
                           static_cast<double>(std::max<size_t>(shortest, 1)));
}

Status checkTextGrowth(const std::string &stage, double growth, size_t added, size_t steps) {
  if (steps > kMaxSteps)
    return Status::error("not supported yet: " + stage + " of " + std::to_string(steps) +
                         " steps (at most " + std::to_string(kMaxSteps) + ")");
  if (growth > kMaxTextGrowth || added > kMaxAddedBytes)
    return Status::error("not supported yet: " + stage + " steps that can grow a text more than " +
                         std::to_string(static_cast<int>(kMaxTextGrowth)) + "-fold or by more than " +
                         std::to_string(kMaxAddedBytes) + " bytes");
  return Status::ok();
}

std::vector<std::pair<size_t, size_t>> Replace::matches(std::string_view text) const {
  if (regex_)
    return regex_->findAll(text);
  std::vector<std::pair<size_t, size_t>> found;
  for (size_t at = text.find(literal_); at != std::string_view::npos;
       at = text.find(literal_, at + literal_.size()))
    found.emplace_back(at, at + literal_.size());
  return found;
}

std::string Replace::apply(std::string_view text, size_t *startAligned) const {
  const std::vector<std::pair<size_t, size_t>> found = matches(text);
  if (found.empty())
    return std::string(text);
  std::string out;
  out.reserve(text.size() + found.size() * content_.size());
  // Hugging Face aligns the content with the last character of its match, so the content stays
  // aligned with the start only when the whole match was; a match that straddles the end of the
  // aligned prefix cuts it short.
  const size_t aligned = startAligned ? *startAligned : 0;
  std::optional<size_t> newAligned;
  size_t alignedGrowth = 0, alignedShrink = 0;
  size_t previousEnd = 0;
  for (const auto &[begin, end] : found) {
    out.append(text.substr(previousEnd, begin - previousEnd));
    if (!newAligned && end <= aligned) {
      alignedGrowth += content_.size();
      alignedShrink += end - begin;
    } else if (!newAligned) {
      newAligned = begin < aligned ? out.size() : aligned + alignedGrowth - alignedShrink;
    }
    out.append(content_);
    previousEnd = end;
  }
  out.append(text.substr(previousEnd));
  if (startAligned)
    *startAligned = newAligned.value_or(aligned + alignedGrowth - alignedShrink);
  return out;
}

} // namespace dlm::tokenizer
