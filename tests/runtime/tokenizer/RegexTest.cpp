// The PCRE2 wrapper must match as Oniguruma does in Hugging Face tokenizers; \s is the one class
// where the two differ (U+180E), so it is rewritten.
#include "runtime/tokenizer/Regex.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace dlm::tokenizer {
namespace {

using Matches = std::vector<std::pair<size_t, size_t>>;

Matches findAll(const std::string &pattern, const std::string &text) {
  StatusOr<Regex> regex = Regex::compile(pattern);
  EXPECT_TRUE(regex.isOk()) << regex.status().message();
  return regex->findAll(text);
}

TEST(Regex, WhiteSpaceIsUnicodeWhiteSpaceProperty) {
  // U+180E MONGOLIAN VOWEL SEPARATOR is not White_Space; U+3000 and U+0085 are.
  EXPECT_TRUE(findAll(R"(\s)", "\xE1\xA0\x8E").empty());
  EXPECT_EQ(findAll(R"(\s+)", "a\xE3\x80\x80\xC2\x85"
                              "b"),
            (Matches{{1, 6}}));
  EXPECT_EQ(findAll(R"(\S+)", "\xE1\xA0\x8E x"), (Matches{{0, 3}, {4, 5}}));
  EXPECT_EQ(findAll(R"([^\s\p{L}]+)", "\xE1\xA0\x8E!a"), (Matches{{0, 4}}));
}

TEST(Regex, TranslationLeavesOtherEscapesAlone) {
  EXPECT_EQ(translateWhitespaceEscapes(R"(\\s)"), R"(\\s)");
  EXPECT_EQ(translateWhitespaceEscapes(R"(\Q\s\E)"), R"(\Q\s\E)");
  EXPECT_EQ(translateWhitespaceEscapes(R"([[:alpha:]\d])"), R"([[:alpha:]\d])");
  const std::string translated = translateWhitespaceEscapes(R"([]\s]x\s)");
  EXPECT_EQ(translated.rfind("[]\\x{09}", 0), 0u) << translated;
  EXPECT_NE(translated.find("]x[\\x{09}"), std::string::npos) << translated;
}

TEST(Regex, UnicodePropertiesAndCaseFolding) {
  EXPECT_EQ(findAll(R"(\p{L}+)", "héllo 中文"), (Matches{{0, 6}, {7, 13}}));
  EXPECT_EQ(findAll(R"(\p{N}{1,3})", "12345"), (Matches{{0, 3}, {3, 5}}));
  EXPECT_EQ(findAll(R"((?i:'s|'ll))", "'S 'Ll"), (Matches{{0, 2}, {3, 6}}));
}

TEST(Regex, LiteralPatterns) {
  StatusOr<Regex> regex = Regex::compile("a.b", /*literal=*/true);
  ASSERT_TRUE(regex.isOk());
  EXPECT_EQ(regex->findAll("axb a.b"), (Matches{{4, 7}}));
}

TEST(Regex, EmptyMatchesAreSkipped) {
  EXPECT_EQ(findAll("x*", "abxxc"), (Matches{{2, 4}}));
  EXPECT_EQ(findAll("x*", "é"), Matches{});
}

TEST(Regex, InvalidPatternNamesTheProblem) {
  StatusOr<Regex> regex = Regex::compile("(abc");
  ASSERT_FALSE(regex.isOk());
  EXPECT_NE(regex.status().message().find("invalid regex '(abc'"), std::string::npos);
}

// `\C` matches a single byte and so could split a character; later matching relies on valid
// UTF-8 and would read past the text (issue 15).
TEST(Regex, ByteMatchingEscapeIsRefused) {
  for (const char *pattern : {"\\C", "a\\C+b"}) {
    StatusOr<Regex> regex = Regex::compile(pattern);
    ASSERT_FALSE(regex.isOk()) << pattern;
    EXPECT_EQ(regex.status().message().find("invalid regex '" + std::string(pattern) + "': "), 0u)
        << regex.status().message();
  }
  // Quoted or literal, it is two ordinary characters.
  EXPECT_EQ(findAll("\\\\C", "a\\Cb"), (Matches{{1, 3}}));
  StatusOr<Regex> literal = Regex::compile("\\C", /*literal=*/true);
  ASSERT_TRUE(literal.isOk());
  EXPECT_EQ(literal->findAll("a\\Cb"), (Matches{{1, 3}}));
}

// At the match limit the search stops: the matches before stay, the rest is unmatched text.
TEST(Regex, CatastrophicPatternStopsAtTheMatchLimit) {
  const std::string text = "x x " + std::string(2000, 'a') + "! x";
  EXPECT_EQ(findAll("x|(a+)+$", text), (Matches{{0, 1}, {2, 3}}));
}

// The limit is far above what real patterns need: Llama 3's takes about one step per character
// of a run of white space (the \s*[\r\n]+ alternative backtracks through it).
TEST(Regex, RealPatternsMatchLongRunsWithinTheMatchLimit) {
  const std::string llama3 = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3})"
                             R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const size_t run = kRegexMatchLimit / 2;
  EXPECT_EQ(findAll(llama3, std::string(run, ' ') + "x"),
            (Matches{{0, run - 1}, {run - 1, run + 1}}));
  EXPECT_EQ(findAll(llama3, std::string(run, '\n') + "x"), (Matches{{0, run}, {run, run + 1}}));
  EXPECT_EQ(findAll(llama3, std::string(run, '!') + "\n"), (Matches{{0, run + 1}}));
}

} // namespace
} // namespace dlm::tokenizer
