// UTF-8 repair must replace invalid bytes exactly as Rust's from_utf8_lossy (and Python's
// "replace" handler) do, or decoded text would differ from Hugging Face's.
#include "runtime/tokenizer/Utf8.h"

#include <gtest/gtest.h>

#include <string>

namespace dlm::tokenizer {
namespace {

const std::string kReplacement = "\xEF\xBF\xBD";

std::string replacements(int count) {
  std::string out;
  for (int i = 0; i < count; ++i)
    out += kReplacement;
  return out;
}

TEST(Utf8, ValidTextIsUnchanged) {
  const std::string text = "a é € 😀 \x7F";
  EXPECT_TRUE(isValidUtf8(text));
  EXPECT_EQ(repairUtf8(text), text);
}

TEST(Utf8, MaximalSubpartsBecomeOneReplacement) {
  EXPECT_EQ(repairUtf8("\xF0\x9F\x98"), replacements(1)); // truncated 4-byte character
  EXPECT_EQ(repairUtf8("\xE2\x82"
                       "A"),
            replacements(1) + "A"); // truncated, then ASCII
  EXPECT_EQ(repairUtf8("\xF0\x9F\x98\x80\xFF"), "😀" + replacements(1));
}

TEST(Utf8, ForbiddenSequencesBecomeOneReplacementPerByte) {
  EXPECT_EQ(repairUtf8("\xED\xA0\x80"), replacements(3));     // surrogate
  EXPECT_EQ(repairUtf8("\xC0\xAF"), replacements(2));         // overlong
  EXPECT_EQ(repairUtf8("\xE0\x80\xAF"), replacements(3));     // overlong
  EXPECT_EQ(repairUtf8("\xF4\x90\x80\x80"), replacements(4)); // above U+10FFFF
  EXPECT_EQ(repairUtf8("\x80\x80"), replacements(2));         // stray continuation bytes
  EXPECT_EQ(repairUtf8("\xF8\x88\x80\x80\x80"), replacements(5));
  EXPECT_FALSE(isValidUtf8("\xED\xA0\x80"));
}

TEST(Utf8, CutCharacterAtTheEnd) {
  EXPECT_EQ(cutCharacterLength(""), 0u);
  EXPECT_EQ(cutCharacterLength("ab"), 0u);
  EXPECT_EQ(cutCharacterLength("a\xC3"), 1u);        // first byte of é
  EXPECT_EQ(cutCharacterLength("a\xE2\x82"), 2u);    // two of the three bytes of €
  EXPECT_EQ(cutCharacterLength("\xF0\x9F\x98"), 3u); // three of the four bytes of 😀
  EXPECT_EQ(cutCharacterLength("\xE2\x82\xAC"), 0u); // complete
  EXPECT_EQ(cutCharacterLength("a\xFF"), 0u);        // invalid, not cut
  EXPECT_EQ(cutCharacterLength("\xE0\x80"), 0u);     // overlong start, not cut
  EXPECT_EQ(cutCharacterLength("\xED\xA0"), 0u);     // surrogate start, not cut
  EXPECT_EQ(cutCharacterLength("\x82\x82"), 0u);     // stray continuation bytes
}

TEST(Utf8, DecodeAndEncodeRoundTrip) {
  for (char32_t codePoint : {U'A', U'\u00E9', U'\u20AC', U'\U0001F600', U'\U0010FFFF'}) {
    std::string encoded;
    appendUtf8(encoded, codePoint);
    size_t offset = 0;
    EXPECT_EQ(decodeUtf8(encoded, offset), codePoint);
    EXPECT_EQ(offset, encoded.size());
    EXPECT_EQ(utf8CharLength(encoded, 0), encoded.size());
    EXPECT_EQ(lastCodePointBefore("x" + encoded, encoded.size() + 1), codePoint);
  }
}

} // namespace
} // namespace dlm::tokenizer
