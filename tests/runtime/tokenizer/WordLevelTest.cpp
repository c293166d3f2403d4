// Unit tests of the components word-level tokenizers use (the tiny DiffusionGemma fixtures): the
// WordLevel model, the WhitespaceSplit and Whitespace pre-tokenizers and the WordPiece decoder,
// and the errors of malformed files. Expected values come from Hugging Face tokenizers 0.20.3;
// check_wordlevel_matches_hf.py compares whole tokenizers with the library.
#include "runtime/tokenizer/Decoder.h"
#include "runtime/tokenizer/PreTokenizer.h"
#include "runtime/tokenizer/Tokenizer.h"
#include "runtime/tokenizer/Vocabulary.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace dlm::tokenizer {
namespace {

using Json = nlohmann::json;
using Ids = std::vector<int32_t>;
using Strings = std::vector<std::string>;

const Json kWhitespaceSplit = {{"type", "WhitespaceSplit"}};
const Json kWhitespace = {{"type", "Whitespace"}};

Json wordPiece(const std::string &prefix, bool cleanup) {
  return Json{{"type", "WordPiece"}, {"prefix", prefix}, {"cleanup", cleanup}};
}

// A word-level tokenizer.json: the words get ids 0, 1, ... in order.
Json wordLevelTokenizer(const Strings &words, const std::string &unknown = "<unk>",
                        Json preTokenizer = kWhitespaceSplit,
                        Json decoder = wordPiece("##", false)) {
  Json vocab = Json::object();
  for (size_t i = 0; i < words.size(); ++i)
    vocab[words[i]] = static_cast<int>(i);
  return Json{{"version", "1.0"},
              {"added_tokens", Json::array()},
              {"normalizer", nullptr},
              {"pre_tokenizer", std::move(preTokenizer)},
              {"post_processor", nullptr},
              {"decoder", std::move(decoder)},
              {"model", {{"type", "WordLevel"}, {"vocab", vocab}, {"unk_token", unknown}}}};
}

Tokenizer load(const Json &config) {
  StatusOr<Tokenizer> tokenizer = Tokenizer::fromJson(config.dump());
  EXPECT_TRUE(tokenizer.isOk()) << tokenizer.status().message();
  return std::move(tokenizer).value();
}

std::string loadError(const Json &config) {
  StatusOr<Tokenizer> tokenizer = Tokenizer::fromJson(config.dump());
  EXPECT_FALSE(tokenizer.isOk());
  return tokenizer.isOk() ? std::string() : tokenizer.status().message();
}

Strings preTokenize(const Json &config, const std::string &text) {
  StatusOr<PreTokenizer> loaded = PreTokenizer::fromJson(config);
  EXPECT_TRUE(loaded.isOk()) << loaded.status().message();
  Strings words;
  loaded->apply(text, 0, words);
  return words;
}

std::string decode(const Json &config, const Strings &tokens) {
  StatusOr<Decoder> loaded = Decoder::fromJson(config);
  EXPECT_TRUE(loaded.isOk()) << loaded.status().message();
  const std::vector<std::string_view> views(tokens.begin(), tokens.end());
  return loaded->decode(views, /*keepCutCharacter=*/false);
}

std::string decoderError(const Json &config) {
  StatusOr<Decoder> loaded = Decoder::fromJson(config);
  EXPECT_FALSE(loaded.isOk());
  return loaded.isOk() ? std::string() : loaded.status().message();
}

// --- Model --------------------------------------------------------------------------------------

TEST(WordLevelModel, LooksUpWholeWordsAndMapsOthersToUnknown) {
  Tokenizer tokenizer = load(wordLevelTokenizer({"<unk>", "hello", "world", "!"}));
  EXPECT_EQ(tokenizer.encode("hello world !"), (Ids{1, 2, 3}));
  // Words are never split: "world!" and "hell" are unknown as a whole.
  EXPECT_EQ(tokenizer.encode("hello world! hell"), (Ids{1, 0, 0}));
  EXPECT_EQ(tokenizer.encode(""), Ids{});
  EXPECT_EQ(tokenizer.encode(" \t\n "), Ids{});
  EXPECT_EQ(tokenizer.vocabSize(), 4);
  EXPECT_EQ(tokenizer.tokenToId("world"), 2);
  EXPECT_EQ(tokenizer.idToToken(3), "!");
}

TEST(WordLevelModel, WithoutPreTokenizerTheWholeTextIsOneWord) {
  Json config = wordLevelTokenizer({"<unk>", "a b", "a"}, "<unk>", nullptr);
  Tokenizer tokenizer = load(config);
  EXPECT_EQ(tokenizer.encode("a b"), (Ids{1}));
  EXPECT_EQ(tokenizer.encode("a"), (Ids{2}));
  EXPECT_EQ(tokenizer.encode("a  b"), (Ids{0}));
}

TEST(WordLevelModel, AddedTokensAndTemplateWrapTheWords) {
  // The fixtures' layout: specials in the vocabulary and in added_tokens, a <bos> template.
  Json config = wordLevelTokenizer({"<pad>", "w1", "<bos>", "<unk>", "w4"});
  config["added_tokens"] = Json::array(
      {Json{{"id", 2}, {"content", "<bos>"}, {"special", true}, {"normalized", false}}});
  config["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", Json::array({Json{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}},
                              Json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
      {"pair", Json::array({Json{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}},
                            Json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                            Json{{"Sequence", {{"id", "B"}, {"type_id", 0}}}}})},
      {"special_tokens", {{"<bos>", {{"id", "<bos>"}, {"ids", {2}}, {"tokens", {"<bos>"}}}}}}};
  Tokenizer tokenizer = load(config);
  EXPECT_EQ(tokenizer.encode("w4 w1<bos>w4 w9"), (Ids{2, 4, 1, 2, 4, 3}));
  EXPECT_EQ(tokenizer.encode("w4", /*addSpecialTokens=*/false), (Ids{4}));
  EXPECT_EQ(*tokenizer.decode({2, 4, 1, 3}), "<bos> w4 w1 <unk>");
  EXPECT_EQ(*tokenizer.decode({2, 4, 1, 3}, /*skipSpecialTokens=*/true), "w4 w1 <unk>");
}

TEST(WordLevelModel, IdsWithGapsAndRepeatedIds) {
  Json config = wordLevelTokenizer({"<unk>"});
  config["model"]["vocab"] = {{"<unk>", 0}, {"a", 5}, {"b", 5}, {"c", 2}};
  Tokenizer tokenizer = load(config);
  EXPECT_EQ(tokenizer.encode("a b c d"), (Ids{5, 5, 2, 0}));
  EXPECT_EQ(tokenizer.vocabSize(), 6);
  // The first token in key order names a repeated id.
  EXPECT_EQ(tokenizer.idToToken(5), "a");
  EXPECT_EQ(tokenizer.decode({3}).status().message(), "token id 3 has no token");
  EXPECT_EQ(tokenizer.decode({6}).status().message(),
            "token id 6 is out of range (vocabulary size 6)");
  EXPECT_EQ(tokenizer.decode({-1}).status().message(),
            "token id -1 is out of range (vocabulary size 6)");
}

TEST(WordLevelModel, Errors) {
  Json config = wordLevelTokenizer({"a", "b"}, "<unk>");
  // Hugging Face loads this and fails on the first unknown word; it is refused when loading.
  EXPECT_EQ(loadError(config), "tokenizer.json: WordLevel unk_token '<unk>' is not in the vocabulary");
  config["model"].erase("unk_token");
  EXPECT_EQ(loadError(config), "tokenizer.json: WordLevel model has no \"unk_token\" string");
  config["model"]["unk_token"] = 3;
  EXPECT_EQ(loadError(config), "tokenizer.json: WordLevel model has no \"unk_token\" string");

  config = wordLevelTokenizer({"<unk>"});
  config["model"].erase("vocab");
  EXPECT_EQ(loadError(config), "tokenizer.json: WordLevel model has no \"vocab\" object");
  config["model"]["vocab"] = Json::array({"<unk>"});
  EXPECT_EQ(loadError(config), "tokenizer.json: WordLevel model has no \"vocab\" object");
  config["model"]["vocab"] = {{"<unk>", -1}};
  EXPECT_EQ(loadError(config), "tokenizer.json: WordLevel vocab entry '<unk>' has invalid id -1");
  config["model"]["vocab"] = {{"<unk>", 0}, {"big", kMaxTokenId + 1}};
  EXPECT_EQ(loadError(config), "tokenizer.json: WordLevel vocab entry 'big' has invalid id " +
                                   std::to_string(kMaxTokenId + 1));
  config["model"]["vocab"] = {{"<unk>", 0}, {"x", 1.5}};
  EXPECT_EQ(loadError(config), "tokenizer.json: WordLevel vocab entry 'x' has invalid id 1.5");
  config["model"]["vocab"] = {{"<unk>", 0}, {"x", "1"}};
  EXPECT_EQ(loadError(config), "tokenizer.json: WordLevel vocab entry 'x' has invalid id \"1\"");

  config = wordLevelTokenizer({"<unk>"});
  config["model"]["type"] = "Unigram";
  EXPECT_EQ(loadError(config), "tokenizer.json: not supported yet: tokenizer model 'Unigram'");
  config["model"]["type"] = "WordPiece";
  EXPECT_EQ(loadError(config), "tokenizer.json: not supported yet: tokenizer model 'WordPiece'");
  config["model"] = "WordLevel";
  EXPECT_EQ(loadError(config), "tokenizer.json: \"model\" is not an object");
}

// The id table is as long as the largest id, so ids may leave gaps of a bounded total size only:
// two entries with ids 0 and 2^27 - 1 allocated 4 GiB (issue 15).
TEST(WordLevelModel, LargestAllowedIdLoads) {
  const int64_t largest = largestAllowedTokenId(2);
  EXPECT_EQ(largest, 4 * 2 + 65535);
  Json config = wordLevelTokenizer({"<unk>"});
  config["model"]["vocab"] = {{"<unk>", 0}, {"last", largest}};
  Tokenizer tokenizer = load(config);
  EXPECT_EQ(tokenizer.encode("last first"), (Ids{static_cast<int32_t>(largest), 0}));
  EXPECT_EQ(tokenizer.vocabSize(), largest + 1);

  config["model"]["vocab"]["last"] = largest + 1;
  EXPECT_EQ(loadError(config), "tokenizer.json: WordLevel vocab: largest id 65544 for 2 entries; "
                               "dlm allows ids up to 65543 (4 per entry + 65535, at most "
                               "16777215)");
  EXPECT_EQ(largestAllowedTokenId(kMaxTokenId), kMaxTokenId);
}

// --- Pre-tokenizers -----------------------------------------------------------------------------

TEST(WordLevelPreTokenizer, WhitespaceSplitCutsAtUnicodeWhiteSpace) {
  // U+3000, U+0085 and U+2028 are White_Space; U+180E and U+200B are not (as in Rust).
  EXPECT_EQ(preTokenize(kWhitespaceSplit, "a\u3000b\u0085c\u180e" "d\u200b" "e\u2028 f\t"),
            (Strings{"a", "b", "c\u180e" "d\u200b" "e", "f"}));
  EXPECT_EQ(preTokenize(kWhitespaceSplit, "  don't stop!  "), (Strings{"don't", "stop!"}));
  EXPECT_EQ(preTokenize(kWhitespaceSplit, " \n\t\u00a0"), Strings{});
}

TEST(WordLevelPreTokenizer, WhitespaceSeparatesWordsFromPunctuation) {
  EXPECT_EQ(preTokenize(kWhitespace, "Hey man!"), (Strings{"Hey", "man", "!"}));
  EXPECT_EQ(preTokenize(kWhitespace, "How are you doing?"),
            (Strings{"How", "are", "you", "doing", "?"}));
  EXPECT_EQ(preTokenize(kWhitespace, "\n"), Strings{});
  // \w is Alphabetic, marks, decimal digits, connector punctuation and joiners: '²' (No) is not a
  // word character, U+200D is.
  EXPECT_EQ(preTokenize(kWhitespace, "don't\u00a0caf\u00e9_1 x\u00b2\u200dy ?!.. \u180e"),
            (Strings{"don", "'", "t", "caf\u00e9_1", "x", "\u00b2", "\u200dy", "?!..", "\u180e"}));
}

TEST(WordLevelPreTokenizer, InsideASequence) {
  const Json config = {{"type", "Sequence"},
                       {"pretokenizers", Json::array({kWhitespaceSplit, kWhitespace})}};
  EXPECT_EQ(preTokenize(config, "a,b c"), (Strings{"a", ",", "b", "c"}));
}

// --- Decoder ------------------------------------------------------------------------------------

TEST(WordLevelDecoder, WordPieceJoinsWithSpacesAndGluesContinuations) {
  // The first token keeps its prefix (Hugging Face's own test).
  EXPECT_EQ(decode(wordPiece("##", false), {"##uelo", "Ara", "##\u00fAj", "##o", "No", "##guera"}),
            "##uelo Ara\u00fAjo Noguera");
  EXPECT_EQ(decode(wordPiece("##", false), {"a", "##", "####", "#b"}), "a## #b");
  EXPECT_EQ(decode(wordPiece("@@", false), {"x", "@@y", "##z"}), "xy ##z");
  // An empty prefix glues everything.
  EXPECT_EQ(decode(wordPiece("", false), {"a", "b"}), "ab");
  EXPECT_EQ(decode(wordPiece("##", false), {}), "");
  EXPECT_EQ(decode(wordPiece("##", false), {"I", "do not", "know", "."}), "I do not know .");
}

TEST(WordLevelDecoder, WordPieceCleanupWorksOnEachToken) {
  EXPECT_EQ(decode(wordPiece("##", true), {"I", "do not", "think", "so", ".", "you", "'re", "##x",
                                           "' ", ",", "a . b", "n't"}),
            "I don't think so. you'rex', a. bn't");
  // The space before " ." is the decoder's, the one inside it is not removed.
  EXPECT_EQ(decode(wordPiece("##", true), {"##a", " .", "x do not y"}), "##a . x don't y");
  EXPECT_EQ(decode(wordPiece("##", true), {"it", "'s", "I", "'m", "we", "'ve", "!", "?"}),
            "it's I'm we've!?");
}

TEST(WordLevelDecoder, Errors) {
  EXPECT_EQ(decoderError({{"type", "WordPiece"}, {"cleanup", true}}),
            "decoder WordPiece has no \"prefix\" string");
  EXPECT_EQ(decoderError({{"type", "WordPiece"}, {"prefix", 1}, {"cleanup", true}}),
            "decoder WordPiece has no \"prefix\" string");
  EXPECT_EQ(decoderError({{"type", "WordPiece"}, {"prefix", "##"}}),
            "decoder WordPiece has no \"cleanup\" true or false");
  EXPECT_EQ(decoderError({{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", "yes"}}),
            "decoder WordPiece has no \"cleanup\" true or false");
}

TEST(WordLevelDecoder, StreamedTextIsAPrefixOfTheFinalText) {
  Tokenizer tokenizer =
      load(wordLevelTokenizer({"<unk>", "so", ".", "##on", "do not"}, "<unk>", kWhitespaceSplit,
                              wordPiece("##", true)));
  const Ids ids = {1, 3, 2, 4, 1, 0, 2};
  const std::string final = *tokenizer.decode(ids);
  EXPECT_EQ(final, "soon. don't so <unk>.");
  for (size_t n = 0; n <= ids.size(); ++n) {
    const std::string partial = *tokenizer.decodeBytes(Ids(ids.begin(), ids.begin() + n));
    EXPECT_EQ(final.compare(0, partial.size(), partial), 0) << n;
  }
}

} // namespace
} // namespace dlm::tokenizer
