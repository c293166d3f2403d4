#include "runtime/tokenizer/Regex.h"

#include "runtime/tokenizer/Utf8.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace dlm::tokenizer {
namespace {

// Unicode White_Space, written as class items so it can go inside [...] or [^...].
constexpr std::string_view kWhiteSpaceItems =
    "\\x{09}-\\x{0D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

std::string pcre2ErrorText(int errorCode) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(errorCode, buffer, sizeof(buffer)) < 0)
    return "PCRE2 error " + std::to_string(errorCode);
  return std::string(reinterpret_cast<const char *>(buffer));
}

} // namespace

struct Regex::Compiled {
  pcre2_code *code = nullptr;
  // Holds the match limits; only read while matching, so threads may share it.
  pcre2_match_context *matchContext = nullptr;
  ~Compiled() {
    pcre2_match_context_free(matchContext);
    pcre2_code_free(code);
  }
};

std::string translateWhitespaceEscapes(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size());
  bool inClass = false;
  size_t i = 0;
  while (i < pattern.size()) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char escaped = pattern[i + 1];
      if (escaped == 'Q') {
        // \Q...\E quotes everything up to \E (or the end) literally.
        const size_t end = pattern.find("\\E", i + 2);
        const size_t stop = end == std::string_view::npos ? pattern.size() : end + 2;
        out.append(pattern.substr(i, stop - i));
        i = stop;
        continue;
      }
      if (escaped == 's') {
        if (inClass)
          out.append(kWhiteSpaceItems);
        else
          out.append("[").append(kWhiteSpaceItems).append("]");
        i += 2;
        continue;
      }
      if (escaped == 'S' && !inClass) {
        out.append("[^").append(kWhiteSpaceItems).append("]");
        i += 2;
        continue;
      }
      // \S inside a class has no item form; it keeps PCRE2's meaning (differs only at U+180E).
      out.append(pattern.substr(i, 2));
      i += 2;
      continue;
    }
    if (!inClass && c == '[') {
      inClass = true;
      out += c;
      ++i;
      if (i < pattern.size() && pattern[i] == '^')
        out += pattern[i++];
      if (i < pattern.size() && pattern[i] == ']') // a leading ']' is a literal member
        out += pattern[i++];
      continue;
    }
    if (inClass && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      const size_t end = pattern.find(":]", i + 2);
      const size_t stop = end == std::string_view::npos ? pattern.size() : end + 2;
      out.append(pattern.substr(i, stop - i));
      i = stop;
      continue;
    }
    if (inClass && c == ']')
      inClass = false;
    out += c;
    ++i;
  }
  return out;
}

Regex::Regex(std::unique_ptr<Compiled> compiled) : compiled_(std::move(compiled)) {}
Regex::Regex(Regex &&) noexcept = default;
Regex &Regex::operator=(Regex &&) noexcept = default;
Regex::~Regex() = default;

StatusOr<Regex> Regex::compile(const std::string &pattern, bool literal) {
  const std::string translated = literal ? pattern : translateWhitespaceEscapes(pattern);
  // PCRE2 rejects UCP together with LITERAL; a literal has no classes for it to affect anyway.
  // \C matches one byte even in UTF mode, so it could end a match inside a character, and the
  // next pattern, run on that piece without a UTF check, would read past it: it is refused.
  const uint32_t options =
      literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C;
  int errorCode = 0;
  PCRE2_SIZE errorOffset = 0;
  auto compiled = std::make_unique<Compiled>();
  compiled->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                 options, &errorCode, &errorOffset, nullptr);
  if (!compiled->code)
    return Status::error("invalid regex '" + pattern + "': " + pcre2ErrorText(errorCode) +
                         " (at offset " + std::to_string(errorOffset) + ")");
  // JIT makes matching several times faster; without it (unsupported CPU) the interpreter is used.
  (void)pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE);
  compiled->matchContext = pcre2_match_context_create(nullptr);
  if (!compiled->matchContext)
    return Status::error("out of memory compiling regex '" + pattern + "'");
  pcre2_set_match_limit(compiled->matchContext, kRegexMatchLimit);
  pcre2_set_depth_limit(compiled->matchContext, kRegexDepthLimit);
  return Regex(std::move(compiled));
}

std::vector<std::pair<size_t, size_t>> Regex::findAll(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  pcre2_match_data *matchData = pcre2_match_data_create_from_pattern(compiled_->code, nullptr);
  const auto *subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t offset = 0;
  while (offset <= text.size()) {
    const int rc = pcre2_match(compiled_->code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK,
                               matchData, compiled_->matchContext);
    // No match, or kRegexMatchLimit or kRegexDepthLimit hit by a catastrophic pattern: the rest is
    // unmatched text. The limits bound the cost of each attempt, not of the whole search.
    if (rc < 0)
      break;
    const PCRE2_SIZE *ovector = pcre2_get_ovector_pointer(matchData);
    const size_t begin = ovector[0], end = ovector[1];
    if (end > begin) {
      matches.emplace_back(begin, end);
      offset = end;
    } else {
      if (end >= text.size())
        break;
      offset = end + utf8CharLength(text, end);
    }
  }
  pcre2_match_data_free(matchData);
  return matches;
}

uint32_t Regex::minimumMatchLength() const {
  uint32_t minimumLength = 0;
  if (pcre2_pattern_info(compiled_->code, PCRE2_INFO_MINLENGTH, &minimumLength) != 0)
    return 0;
  return minimumLength;
}

bool Regex::canMatchEmpty() const { return minimumMatchLength() == 0; }

} // namespace dlm::tokenizer
