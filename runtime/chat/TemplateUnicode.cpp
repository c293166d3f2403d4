// Python's Unicode case mappings and printability (str.upper, lower, title, capitalize, repr)
// through ICU's character properties.
#include "runtime/chat/TemplateValue.h"

#include <unicode/uchar.h>
#include <unicode/ustring.h>

namespace dlm::chat {
namespace {

// Full case mapping of one code point (ß -> SS), as Python's str.upper / str.lower.
void appendMapped(std::string &out, uint32_t cp, bool upper) {
  UChar source[2];
  int32_t sourceLength = 0;
  U16_APPEND_UNSAFE(source, sourceLength, static_cast<UChar32>(cp));
  UChar mapped[8];
  UErrorCode status = U_ZERO_ERROR;
  int32_t length = upper ? u_strToUpper(mapped, 8, source, sourceLength, "", &status)
                         : u_strToLower(mapped, 8, source, sourceLength, "", &status);
  if (U_FAILURE(status)) {
    appendUtf8(out, cp);
    return;
  }
  for (int32_t i = 0; i < length;) {
    UChar32 c;
    U16_NEXT(mapped, i, length, c);
    appendUtf8(out, static_cast<uint32_t>(c));
  }
}

void appendTitle(std::string &out, uint32_t cp) {
  appendUtf8(out, static_cast<uint32_t>(u_totitle(static_cast<UChar32>(cp))));
}

bool isCased(uint32_t cp) { return u_hasBinaryProperty(static_cast<UChar32>(cp), UCHAR_CASED); }

} // namespace

std::string unicodeCase(std::string_view text, bool upper) {
  std::string out;
  for (uint32_t cp : decodeUtf8(text))
    appendMapped(out, cp, upper);
  return out;
}

std::string pythonTitle(std::string_view text) {
  std::string out;
  bool previousCased = false;
  for (uint32_t cp : decodeUtf8(text)) {
    if (previousCased)
      appendMapped(out, cp, false);
    else
      appendTitle(out, cp);
    previousCased = isCased(cp);
  }
  return out;
}

std::string pythonCapitalize(std::string_view text) {
  std::string out;
  bool first = true;
  for (uint32_t cp : decodeUtf8(text)) {
    if (first)
      appendTitle(out, cp);
    else
      appendMapped(out, cp, false);
    first = false;
  }
  return out;
}

bool isPythonPrintable(uint32_t cp) {
  if (cp == ' ')
    return true;
  switch (u_charType(static_cast<UChar32>(cp))) {
  case U_CONTROL_CHAR:
  case U_FORMAT_CHAR:
  case U_SURROGATE:
  case U_PRIVATE_USE_CHAR:
  case U_UNASSIGNED:
  case U_LINE_SEPARATOR:
  case U_PARAGRAPH_SEPARATOR:
  case U_SPACE_SEPARATOR:
    return false;
  default:
    return true;
  }
}

} // namespace dlm::chat
