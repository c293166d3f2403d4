#include "runtime/tokenizer/ByteLevel.h"

#include "runtime/tokenizer/Utf8.h"

#include <array>
#include <cstdint>

namespace dlm::tokenizer {
namespace {

struct ByteLevelTables {
  std::array<std::string, 256> spelling;    // byte -> UTF-8 of its alphabet character
  std::array<int16_t, 512> byteOfCodePoint; // alphabet code point (< 512) -> byte, or -1
};

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes are
// shifted to U+0100 onwards in byte order.
ByteLevelTables buildTables() {
  ByteLevelTables tables;
  tables.byteOfCodePoint.fill(-1);
  const auto isPrintable = [](int byte) {
    return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) ||
           (byte >= 0xAE && byte <= 0xFF);
  };
  char32_t nextShifted = 0x100;
  for (int byte = 0; byte < 256; ++byte) {
    const char32_t codePoint = isPrintable(byte) ? static_cast<char32_t>(byte) : nextShifted++;
    appendUtf8(tables.spelling[byte], codePoint);
    tables.byteOfCodePoint[codePoint] = static_cast<int16_t>(byte);
  }
  return tables;
}

const ByteLevelTables &tables() {
  static const ByteLevelTables instance = buildTables();
  return instance;
}

} // namespace

void appendByteLevelEncoded(std::string &out, std::string_view bytes) {
  const ByteLevelTables &t = tables();
  for (unsigned char byte : bytes)
    out += t.spelling[byte];
}

void appendByteLevelDecoded(std::string &out, std::string_view token) {
  const ByteLevelTables &t = tables();
  const size_t start = out.size();
  size_t offset = 0;
  while (offset < token.size()) {
    const char32_t codePoint = decodeUtf8(token, offset);
    const int byte = codePoint < t.byteOfCodePoint.size() ? t.byteOfCodePoint[codePoint] : -1;
    if (byte < 0) {
      out.resize(start);
      out.append(token);
      return;
    }
    out += static_cast<char>(byte);
  }
}

} // namespace dlm::tokenizer
