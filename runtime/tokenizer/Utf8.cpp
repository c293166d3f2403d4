#include "runtime/tokenizer/Utf8.h"

namespace dlm::tokenizer {
namespace {

bool isContinuation(unsigned char byte) { return (byte & 0xC0) == 0x80; }

// Number of bytes of the longest prefix of `text[offset..]` that is either a complete valid
// character (returned with `complete` = true) or the start of one that was cut short. This follows
// the Unicode "maximal subpart" rule, which Rust's from_utf8_lossy implements: the second byte's
// allowed range depends on the first byte so that overlong forms and surrogates are rejected.
size_t scanCharacter(std::string_view text, size_t offset, bool &complete) {
  const auto byteAt = [&](size_t i) -> int {
    return i < text.size() ? static_cast<unsigned char>(text[i]) : -1;
  };
  const int first = byteAt(offset);
  complete = false;
  if (first < 0x80) {
    complete = true;
    return 1;
  }
  int width = 0;
  if (first >= 0xC2 && first <= 0xDF)
    width = 2;
  else if (first >= 0xE0 && first <= 0xEF)
    width = 3;
  else if (first >= 0xF0 && first <= 0xF4)
    width = 4;
  else
    return 1;

  const int second = byteAt(offset + 1);
  int low = 0x80, high = 0xBF;
  if (first == 0xE0)
    low = 0xA0;
  else if (first == 0xED)
    high = 0x9F;
  else if (first == 0xF0)
    low = 0x90;
  else if (first == 0xF4)
    high = 0x8F;
  if (second < low || second > high)
    return 1;
  size_t length = 2;
  while (static_cast<int>(length) < width) {
    const int next = byteAt(offset + length);
    if (next < 0 || !isContinuation(static_cast<unsigned char>(next)))
      return length;
    ++length;
  }
  complete = true;
  return length;
}

} // namespace

size_t utf8CharLength(std::string_view text, size_t offset) {
  bool complete = false;
  const size_t length = scanCharacter(text, offset, complete);
  return complete ? length : 1;
}

char32_t decodeUtf8(std::string_view text, size_t &offset) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[offset + i]); };
  const unsigned char first = byte(0);
  char32_t codePoint;
  size_t length;
  if (first < 0x80) {
    codePoint = first;
    length = 1;
  } else if (first < 0xE0) {
    codePoint = ((first & 0x1Fu) << 6) | (byte(1) & 0x3Fu);
    length = 2;
  } else if (first < 0xF0) {
    codePoint = ((first & 0x0Fu) << 12) | ((byte(1) & 0x3Fu) << 6) | (byte(2) & 0x3Fu);
    length = 3;
  } else {
    codePoint = ((first & 0x07u) << 18) | ((byte(1) & 0x3Fu) << 12) | ((byte(2) & 0x3Fu) << 6) |
                (byte(3) & 0x3Fu);
    length = 4;
  }
  offset += length;
  return codePoint;
}

char32_t lastCodePointBefore(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && isContinuation(static_cast<unsigned char>(text[start])))
    --start;
  return decodeUtf8(text, start);
}

void appendUtf8(std::string &out, char32_t codePoint) {
  if (codePoint < 0x80) {
    out += static_cast<char>(codePoint);
  } else if (codePoint < 0x800) {
    out += static_cast<char>(0xC0 | (codePoint >> 6));
    out += static_cast<char>(0x80 | (codePoint & 0x3F));
  } else if (codePoint < 0x10000) {
    out += static_cast<char>(0xE0 | (codePoint >> 12));
    out += static_cast<char>(0x80 | ((codePoint >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (codePoint & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (codePoint >> 18));
    out += static_cast<char>(0x80 | ((codePoint >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((codePoint >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (codePoint & 0x3F));
  }
}

bool isValidUtf8(std::string_view text) {
  size_t offset = 0;
  while (offset < text.size()) {
    if (static_cast<unsigned char>(text[offset]) < 0x80) {
      ++offset;
      continue;
    }
    bool complete = false;
    offset += scanCharacter(text, offset, complete);
    if (!complete)
      return false;
  }
  return true;
}

std::string repairUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t offset = 0;
  while (offset < text.size()) {
    bool complete = false;
    const size_t length = scanCharacter(text, offset, complete);
    if (complete)
      out.append(text.substr(offset, length));
    else
      out += "\xEF\xBF\xBD";
    offset += length;
  }
  return out;
}

size_t cutCharacterLength(std::string_view text) {
  for (size_t back = 1; back <= 3 && back <= text.size(); ++back) {
    const size_t start = text.size() - back;
    const auto lead = static_cast<unsigned char>(text[start]);
    if (isContinuation(lead))
      continue;
    if (lead < 0xC2 || lead > 0xF4)
      return 0;
    // A lead byte whose following bytes are all allowed continuations, but too few of them.
    bool complete = false;
    const size_t length = scanCharacter(text, start, complete);
    return !complete && length == back ? back : 0;
  }
  return 0;
}

} // namespace dlm::tokenizer
