#include "runtime/tokenizer/CharacterClass.h"

#include <unicode/uchar.h>

namespace dlm::tokenizer {

bool isWhiteSpace(char32_t c) {
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE);
}

bool isWordCharacter(char32_t c) {
  const auto codePoint = static_cast<UChar32>(c);
  return u_hasBinaryProperty(codePoint, UCHAR_ALPHABETIC) ||
         (U_GET_GC_MASK(codePoint) & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0 ||
         u_hasBinaryProperty(codePoint, UCHAR_JOIN_CONTROL);
}

} // namespace dlm::tokenizer
