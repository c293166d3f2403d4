// Committed ids as the user's text (tools/dlm-run/OutputText.h, dlm-serve's and dlm-run's), with
// the demo model's tokenizer: pieces concatenate to the whole decode, EOS / max_tokens / stop
// strings end it.
#include "tools/dlm-run/OutputText.h"

#include <gtest/gtest.h>

namespace dlm::tools {
namespace {

const Tokenizer &demoTokenizer() {
  static const Tokenizer tokenizer = [] {
    StatusOr<Tokenizer> loaded = Tokenizer::fromFile(DLM_DEMO_TOKENIZER);
    EXPECT_TRUE(loaded.isOk()) << loaded.status().message();
    return std::move(*loaded);
  }();
  return tokenizer;
}

constexpr int32_t kEos = -7; // an id the tokenizer does not know, standing in for EOS
bool isEos(int32_t id) { return id == kEos; }

std::string pushInBlocks(OutputText &output, const std::vector<int32_t> &ids, size_t block) {
  std::string text;
  for (size_t i = 0; i < ids.size() && !output.finished(); i += block)
    text += output.push(ids.data() + i,
                        static_cast<int64_t>(std::min(block, ids.size() - i)));
  return text + output.finish();
}

const std::string kText = " the GPL clearly explains that there is no warranty for this free software.";

TEST(OutputText, PiecesConcatenateToTheWholeText) {
  const Tokenizer &tokenizer = demoTokenizer();
  std::vector<int32_t> ids = tokenizer.encode(kText, false);
  const std::string whole = *tokenizer.decode(ids, true);
  for (size_t block : {1, 3, 8, 1000}) {
    OutputText output(&tokenizer, isEos, -1, {});
    EXPECT_EQ(pushInBlocks(output, ids, block), whole) << block;
    EXPECT_EQ(output.reason(), FinishReason::length);
    EXPECT_EQ(output.completionTokens(), static_cast<int64_t>(ids.size()));
  }
}

TEST(OutputText, EosEndsWithStop) {
  const Tokenizer &tokenizer = demoTokenizer();
  std::vector<int32_t> ids = tokenizer.encode(" the GPL", false);
  const std::string expected = *tokenizer.decode(ids, true);
  ids.push_back(kEos);
  ids.push_back(ids[0]); // after the EOS: ignored
  OutputText output(&tokenizer, isEos, -1, {});
  EXPECT_EQ(pushInBlocks(output, ids, 100), expected);
  EXPECT_EQ(output.reason(), FinishReason::stop);
  EXPECT_EQ(output.completionTokens(), static_cast<int64_t>(ids.size()) - 1);
}

TEST(OutputText, MaxTokensCuts) {
  const Tokenizer &tokenizer = demoTokenizer();
  std::vector<int32_t> ids = tokenizer.encode(kText, false);
  ASSERT_GT(ids.size(), 5u);
  OutputText output(&tokenizer, isEos, 5, {});
  const std::string text = pushInBlocks(output, ids, 4);
  EXPECT_EQ(text, *tokenizer.decode(std::vector<int32_t>(ids.begin(), ids.begin() + 5), true));
  EXPECT_EQ(output.reason(), FinishReason::length);
  EXPECT_EQ(output.completionTokens(), 5);
}

TEST(OutputText, StopStringCutsAcrossBlocks) {
  const Tokenizer &tokenizer = demoTokenizer();
  std::vector<int32_t> ids = tokenizer.encode(kText, false);
  for (size_t block : {1, 2, 5, 1000}) {
    OutputText output(&tokenizer, isEos, -1, {"no warranty", "zzz"});
    EXPECT_EQ(pushInBlocks(output, ids, block), " the GPL clearly explains that there is ")
        << block;
    EXPECT_EQ(output.reason(), FinishReason::stop);
    EXPECT_TRUE(output.finished());
  }
}

TEST(OutputText, NothingEmittedThatMightBeAStopString) {
  const Tokenizer &tokenizer = demoTokenizer();
  std::vector<int32_t> ids = tokenizer.encode(" the GPL", false);
  OutputText output(&tokenizer, isEos, -1, {" the GPL clearly"});
  std::string early;
  for (size_t i = 0; i < ids.size(); ++i)
    early += output.push(&ids[i], 1);
  // " the GPL" could still grow into the stop string: held back.
  EXPECT_EQ(early, "");
  EXPECT_EQ(output.finish(), " the GPL");
  EXPECT_EQ(output.reason(), FinishReason::length);
}

} // namespace
} // namespace dlm::tools
