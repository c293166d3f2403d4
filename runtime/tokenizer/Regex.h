// A compiled PCRE2 pattern with the semantics tokenizer.json patterns are written for
// (Oniguruma in Hugging Face tokenizers): UTF-8, Unicode properties for \p{..}, \w, \d, and \s
// meaning exactly the Unicode White_Space property.
#pragma once

#include "support/Status.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dlm::tokenizer {

// Bounds on the attempt to match at one start position, so that a catastrophic pattern such as
// (a+)+$ costs bounded time instead of 2^n steps: when a bound is hit, findAll stops and the rest
// of the text is unmatched, as if no further match existed. The match limit counts backtracking
// steps (with JIT too); at this value an attempt gives up after 1-2 ms with JIT (PCRE2's default,
// 10 million, took about 30 ms per word). Real patterns take a few steps per match, except that
// Llama 3's and Qwen2's take one per character of a run of white space (\s*[\r\n]+ backtracks
// through it), so runs of up to about a million characters still match whole.
inline constexpr uint32_t kRegexMatchLimit = 1000000;
// Nesting of backtracking points in the interpreter (used where JIT is not available; JIT keeps
// its own fixed stack), which bounds its memory; real patterns nest at most a few deep.
inline constexpr uint32_t kRegexDepthLimit = 100000;

class Regex {
public:
  // `literal` matches the pattern text as a plain string.
  static StatusOr<Regex> compile(const std::string &pattern, bool literal = false);

  Regex(Regex &&) noexcept;
  Regex &operator=(Regex &&) noexcept;
  ~Regex();

  // Non-overlapping matches, left to right, as [begin, end) byte ranges. Empty matches are left
  // out (every caller drops empty pieces). `text` must be valid UTF-8.
  std::vector<std::pair<size_t, size_t>> findAll(std::string_view text) const;

  // PCRE2's lower bound on the characters (so bytes) a match spans; 0 when it may be empty.
  uint32_t minimumMatchLength() const;
  // True when the pattern may match empty text.
  bool canMatchEmpty() const;

private:
  struct Compiled;
  explicit Regex(std::unique_ptr<Compiled> compiled);
  std::unique_ptr<Compiled> compiled_;
};

// Rewrites \s and \S so that PCRE2 matches the Unicode White_Space set. PCRE2's \s (with UCP)
// also matches U+180E, which Oniguruma and Rust do not; left alone, the tokenizer would split
// Mongolian text differently from the reference. Exposed for tests.
std::string translateWhitespaceEscapes(std::string_view pattern);

} // namespace dlm::tokenizer
