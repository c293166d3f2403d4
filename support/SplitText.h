// Splitting text at a delimiter, written once for every list the project parses: the artifact's
// comma-separated choices and slot lists, declared launches, decode-program lines, flag values.
#pragma once

#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace dlm {

// Calls visit(piece) for each piece of `text` between `delimiter`s, in order, and stops early
// when visit returns false; gives whether every piece was visited. Every delimiter splits: "a,,b"
// is "a", "", "b"; "a," ends with an empty piece and "" is one empty piece, so a caller that
// refuses empty items sees them.
template <typename Visit>
constexpr bool forEachPiece(std::string_view text, char delimiter, Visit &&visit) {
  for (size_t start = 0;;) {
    size_t end = text.find(delimiter, start);
    if (end == std::string_view::npos)
      end = text.size();
    if (!visit(text.substr(start, end - start)))
      return false;
    if (end == text.size())
      return true;
    start = end + 1;
  }
}

// The pieces forEachPiece visits, as views into `text` (which must outlive them).
inline std::vector<std::string_view> splitText(std::string_view text, char delimiter) {
  std::vector<std::string_view> pieces;
  forEachPiece(text, delimiter, [&](std::string_view piece) {
    pieces.push_back(piece);
    return true;
  });
  return pieces;
}
// Views into a temporary string would dangle by the end of the statement.
template <typename Text, std::enable_if_t<std::is_same_v<Text, std::string>, int> = 0>
std::vector<std::string_view> splitText(Text &&temporary, char delimiter) = delete;

// A list's items: the pieces of a non-empty `list`, none for an empty one ("" lists nothing;
// "a,", "a,,b" still hold an empty item, for the caller to refuse).
inline std::vector<std::string_view> splitList(std::string_view list, char delimiter) {
  return list.empty() ? std::vector<std::string_view>() : splitText(list, delimiter);
}

} // namespace dlm
