#include "support/SplitText.h"

#include <gtest/gtest.h>

#include <string_view>
#include <vector>

namespace dlm {
namespace {

using Pieces = std::vector<std::string_view>;

TEST(SplitText, EveryDelimiterSplits) {
  EXPECT_EQ(splitText("a,b,c", ','), (Pieces{"a", "b", "c"}));
  EXPECT_EQ(splitText("a,,b", ','), (Pieces{"a", "", "b"}));
  EXPECT_EQ(splitText("a,", ','), (Pieces{"a", ""}));
  EXPECT_EQ(splitText(",a", ','), (Pieces{"", "a"}));
  EXPECT_EQ(splitText("", ','), (Pieces{""}));
  EXPECT_EQ(splitText("one\ntwo\n", '\n'), (Pieces{"one", "two", ""}));
}

TEST(SplitText, AnEmptyListHasNoItems) {
  EXPECT_EQ(splitList("", ','), Pieces{});
  EXPECT_EQ(splitList("a", ','), (Pieces{"a"}));
  EXPECT_EQ(splitList("a,", ','), (Pieces{"a", ""}));
}

TEST(SplitText, VisitingStopsWhenAskedAndSaysSo) {
  Pieces seen;
  const bool finished = forEachPiece("a,b,c", ',', [&](std::string_view piece) {
    seen.push_back(piece);
    return piece != "b";
  });
  EXPECT_FALSE(finished);
  EXPECT_EQ(seen, (Pieces{"a", "b"}));
  EXPECT_TRUE(forEachPiece("a,b", ',', [](std::string_view) { return true; }));
}

// Usable where the decode records' choices are looked up at compile time.
constexpr int piecesOf(std::string_view text) {
  int count = 0;
  forEachPiece(text, ',', [&](std::string_view) { return ++count > 0; });
  return count;
}
static_assert(piecesOf("a,b,,c") == 4 && piecesOf("") == 1);

} // namespace
} // namespace dlm
