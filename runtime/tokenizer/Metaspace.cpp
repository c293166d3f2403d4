#include "runtime/tokenizer/Metaspace.h"

#include "runtime/tokenizer/Utf8.h"

#include <nlohmann/json.hpp>

namespace dlm::tokenizer {

StatusOr<Metaspace> Metaspace::fromJson(const nlohmann::json &config, const std::string &stage) {
  const std::string where = stage + " Metaspace";
  Metaspace metaspace;
  const auto replacement = config.find("replacement");
  if (replacement == config.end() || !replacement->is_string())
    return Status::error(where + " has no \"replacement\" string");
  metaspace.replacement_ = replacement->get<std::string>();
  if (metaspace.replacement_.empty() ||
      utf8CharLength(metaspace.replacement_, 0) != metaspace.replacement_.size())
    return Status::error(where + ": \"replacement\" must be one character, not '" +
                         metaspace.replacement_ + "'");

  // As in Hugging Face: prepend_scheme defaults to "always", split to true, and the older
  // add_prefix_space = false must come with prepend_scheme "never".
  const auto scheme = config.find("prepend_scheme");
  if (scheme != config.end() && !scheme->is_null()) {
    const std::string name = scheme->is_string() ? scheme->get<std::string>() : scheme->dump();
    if (name == "always")
      metaspace.prependScheme_ = PrependScheme::Always;
    else if (name == "first")
      metaspace.prependScheme_ = PrependScheme::First;
    else if (name == "never")
      metaspace.prependScheme_ = PrependScheme::Never;
    else
      return Status::error(where + ": unknown prepend_scheme " + name);
  }
  const auto addPrefixSpace = config.find("add_prefix_space");
  if (addPrefixSpace != config.end() && addPrefixSpace->is_boolean() &&
      !addPrefixSpace->get<bool>() && metaspace.prependScheme_ != PrependScheme::Never)
    return Status::error(where + ": add_prefix_space does not match declared prepend_scheme");
  const auto split = config.find("split");
  if (split != config.end() && split->is_boolean())
    metaspace.split_ = split->get<bool>();
  return metaspace;
}

std::string Metaspace::replaceSpaces(std::string_view piece, size_t &startAligned) const {
  std::string out;
  out.reserve(piece.size() + replacement_.size());
  const bool prepend =
      !piece.empty() && (prependScheme_ == PrependScheme::Always ||
                         (prependScheme_ == PrependScheme::First && startAligned > 0));
  // The text starts with the character after replacement exactly when it starts with a space or
  // with the character itself.
  if (prepend && piece.front() != ' ' && piece.substr(0, replacement_.size()) != replacement_)
    out = replacement_;
  // Prepended characters and replacements take the alignment of the character they stand for.
  size_t newAligned = startAligned > 0 ? out.size() : 0;
  for (size_t i = 0; i < piece.size(); ++i) {
    if (piece[i] == ' ')
      out += replacement_;
    else
      out += piece[i];
    if (i < startAligned)
      newAligned += piece[i] == ' ' ? replacement_.size() : 1;
  }
  startAligned = newAligned;
  return out;
}

void Metaspace::decodeToken(std::string &out, std::string_view token, size_t index) const {
  const bool drop = index == 0 && prependScheme_ != PrependScheme::Never;
  size_t previousEnd = 0;
  for (size_t at = token.find(replacement_); at != std::string_view::npos;
       at = token.find(replacement_, at + replacement_.size())) {
    out.append(token.substr(previousEnd, at - previousEnd));
    if (!drop)
      out += ' ';
    previousEnd = at + replacement_.size();
  }
  out.append(token.substr(previousEnd));
}

} // namespace dlm::tokenizer
