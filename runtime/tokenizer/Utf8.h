// UTF-8 helpers shared by the tokenizer stages. Text handed to the tokenizer may contain invalid
// UTF-8; it is repaired the way Rust's String::from_utf8_lossy does it (one U+FFFD per maximal
// invalid subsequence), which is also what Hugging Face tokenizers produce when decoding bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dlm::tokenizer {

// Length in bytes of the UTF-8 character that starts at `text[offset]`; 1 for a byte that does not
// start a valid character. `offset` must be < text.size().
size_t utf8CharLength(std::string_view text, size_t offset);

// Decodes the code point at `text[offset]` and advances `offset` past it. The text must be valid
// UTF-8 (callers repair it first).
char32_t decodeUtf8(std::string_view text, size_t &offset);

// The code point that ends at `end` (exclusive); valid UTF-8 and end > 0 required.
char32_t lastCodePointBefore(std::string_view text, size_t end);

void appendUtf8(std::string &out, char32_t codePoint);

// True when `text` is entirely valid UTF-8 (no surrogates, no overlong forms, <= U+10FFFF).
bool isValidUtf8(std::string_view text);

// `text` with each maximal invalid subsequence replaced by U+FFFD.
std::string repairUtf8(std::string_view text);

// Length of the bytes at the end of `text` that begin a valid character cut short (0-3): what a
// streaming decoder holds back until the rest of the character arrives.
size_t cutCharacterLength(std::string_view text);

} // namespace dlm::tokenizer
