// Unit tests of the tokenizer API on small hand-written tokenizer.json files. Conformance with the
// Hugging Face library on real-shaped tokenizers is checked by check_tokenizer_matches_hf.py.
#include "runtime/tokenizer/Tokenizer.h"
#include "runtime/tokenizer/ByteLevel.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <thread>
#include <vector>

namespace dlm {
namespace {

using Json = nlohmann::json;
using Ids = std::vector<int32_t>;

// A plain BPE tokenizer over single characters: no normalizer, pre-tokenizer or decoder.
Json characterTokenizer(const std::vector<std::string> &vocab, Json merges) {
  Json vocabulary = Json::object();
  for (size_t i = 0; i < vocab.size(); ++i)
    vocabulary[vocab[i]] = static_cast<int>(i);
  return Json{{"version", "1.0"},
              {"added_tokens", Json::array()},
              {"normalizer", nullptr},
              {"pre_tokenizer", nullptr},
              {"post_processor", nullptr},
              {"decoder", nullptr},
              {"model", {{"type", "BPE"}, {"vocab", vocabulary}, {"merges", std::move(merges)}}}};
}

std::string byteLevel(const std::string &text) {
  std::string out;
  tokenizer::appendByteLevelEncoded(out, text);
  return out;
}

// A byte-level tokenizer: the 256 byte symbols (ids 0-255), then one token per merge, given in
// plain text and spelled here in the byte-level alphabet.
Json byteLevelTokenizer(const std::vector<std::pair<std::string, std::string>> &plainMerges,
                        Json preTokenizer = Json{{"type", "ByteLevel"},
                                                 {"add_prefix_space", false},
                                                 {"use_regex", true}}) {
  Json vocabulary = Json::object();
  for (int byte = 0; byte < 256; ++byte)
    vocabulary[byteLevel(std::string(1, static_cast<char>(byte)))] = byte;
  Json merges = Json::array();
  for (const auto &[left, right] : plainMerges) {
    merges.push_back(Json::array({byteLevel(left), byteLevel(right)}));
    const std::string merged = byteLevel(left + right);
    if (!vocabulary.contains(merged))
      vocabulary[merged] = static_cast<int>(vocabulary.size());
  }
  return Json{{"added_tokens", Json::array()},
              {"normalizer", nullptr},
              {"pre_tokenizer", std::move(preTokenizer)},
              {"post_processor", {{"type", "ByteLevel"}}},
              {"decoder", {{"type", "ByteLevel"}}},
              {"model", {{"type", "BPE"}, {"vocab", vocabulary}, {"merges", merges}}}};
}

Json addedToken(int id, const std::string &content, bool special, bool lstrip = false,
                bool rstrip = false, bool singleWord = false, bool normalized = false) {
  return Json{{"id", id},
              {"content", content},
              {"special", special},
              {"lstrip", lstrip},
              {"rstrip", rstrip},
              {"single_word", singleWord},
              {"normalized", normalized}};
}

Tokenizer load(const Json &config) {
  StatusOr<Tokenizer> tokenizer = Tokenizer::fromJson(config.dump());
  EXPECT_TRUE(tokenizer.isOk()) << tokenizer.status().message();
  return std::move(tokenizer).value();
}

std::string loadError(const std::string &text) {
  StatusOr<Tokenizer> tokenizer = Tokenizer::fromJson(text);
  EXPECT_FALSE(tokenizer.isOk());
  return tokenizer.status().message();
}

std::vector<std::string> tokensOf(const Tokenizer &tokenizer, const Ids &ids) {
  std::vector<std::string> tokens;
  for (int32_t id : ids)
    tokens.push_back(tokenizer.idToToken(id).value_or("?"));
  return tokens;
}

using Tokens = std::vector<std::string>;

TEST(TokenizerMerges, LowestRankMergesFirst) {
  const std::vector<std::string> vocab = {"a", "b", "c", "ab", "bc", "abc"};
  Tokenizer abFirst = load(characterTokenizer(vocab, {"a b", "b c"}));
  EXPECT_EQ(tokensOf(abFirst, abFirst.encode("abc")), (Tokens{"ab", "c"}));
  Tokenizer bcFirst = load(characterTokenizer(vocab, {"b c", "a b"}));
  EXPECT_EQ(tokensOf(bcFirst, bcFirst.encode("abc")), (Tokens{"a", "bc"}));
  Tokenizer chained = load(characterTokenizer(vocab, {"a b", "ab c"}));
  EXPECT_EQ(tokensOf(chained, chained.encode("abc")), (Tokens{"abc"}));
}

TEST(TokenizerMerges, EqualRanksMergeLeftmostFirst) {
  Tokenizer tokenizer = load(characterTokenizer({"a", "aa"}, {"a a"}));
  EXPECT_EQ(tokensOf(tokenizer, tokenizer.encode("aaa")), (Tokens{"aa", "a"}));
  EXPECT_EQ(tokensOf(tokenizer, tokenizer.encode("aaaa")), (Tokens{"aa", "aa"}));
}

TEST(TokenizerMerges, BothMergeSpellingsAgree) {
  const std::vector<std::string> vocab = {"a", "b", "c", "ab", "bc", "abc"};
  Tokenizer strings = load(characterTokenizer(vocab, {"b c", "a bc"}));
  Tokenizer pairs = load(
      characterTokenizer(vocab, Json::array({Json::array({"b", "c"}), Json::array({"a", "bc"})})));
  for (const char *text : {"abc", "cab", "abcabc", "bca"})
    EXPECT_EQ(strings.encode(text), pairs.encode(text)) << text;
  EXPECT_EQ(tokensOf(pairs, pairs.encode("abcab")), (Tokens{"abc", "a", "b"}));
}

TEST(TokenizerMerges, IgnoreMergesTakesWholeVocabularyWords) {
  // "abc" is in the vocabulary but no merge sequence reaches it.
  Json config = characterTokenizer({"a", "b", "c", "ab", "bc", "abc"}, {"b c"});
  EXPECT_EQ(tokensOf(load(config), load(config).encode("abc")), (Tokens{"a", "bc"}));
  config["model"]["ignore_merges"] = true;
  Tokenizer tokenizer = load(config);
  EXPECT_EQ(tokensOf(tokenizer, tokenizer.encode("abc")), (Tokens{"abc"}));
  EXPECT_EQ(tokensOf(tokenizer, tokenizer.encode("abca")), (Tokens{"a", "bc", "a"}));
}

TEST(TokenizerMerges, UnknownCharactersAreDroppedOrBecomeUnk) {
  Json config = characterTokenizer({"a", "b", "<unk>"}, Json::array());
  EXPECT_EQ(load(config).encode("axyb"), (Ids{0, 1}));
  config["model"]["unk_token"] = "<unk>";
  EXPECT_EQ(load(config).encode("axyb"), (Ids{0, 2, 2, 1}));
  config["model"]["fuse_unk"] = true;
  EXPECT_EQ(load(config).encode("axyb"), (Ids{0, 2, 1}));
}

TEST(TokenizerByteLevel, Gpt2RegexSplitsWordsBeforeMerging) {
  // Without the regex split, " world" and "'s" would not stay apart from their neighbours.
  Tokenizer tokenizer = load(byteLevelTokenizer({{" ", "w"}, {"o", "r"}, {" w", "or"}}));
  EXPECT_EQ(tokensOf(tokenizer, tokenizer.encode("a world's")),
            (Tokens{"a", byteLevel(" wor"), "l", "d", "'", "s"}));
  EXPECT_EQ(*tokenizer.decode(tokenizer.encode("a world's")), "a world's");
}

TEST(TokenizerByteLevel, DecodesCharactersSplitAcrossTokens) {
  Tokenizer tokenizer = load(byteLevelTokenizer({}));
  const std::string text = "é€😀"; // 2, 3 and 4 bytes: one token per byte
  const Ids ids = tokenizer.encode(text);
  ASSERT_EQ(ids.size(), 9u);
  EXPECT_EQ(*tokenizer.decode(ids), text);
  // A character cut short becomes U+FFFD, as in Hugging Face (Rust's from_utf8_lossy).
  EXPECT_EQ(*tokenizer.decode(Ids(ids.begin(), ids.begin() + 1)), "\xEF\xBF\xBD");
  EXPECT_EQ(*tokenizer.decode(Ids(ids.begin() + 2, ids.begin() + 4)), "\xEF\xBF\xBD");
  EXPECT_EQ(*tokenizer.decode(Ids(ids.begin(), ids.begin() + 4)), "é\xEF\xBF\xBD");
  // The raw bytes stay available for streaming.
  EXPECT_EQ(*tokenizer.decodeBytes(Ids(ids.begin() + 2, ids.begin() + 4)), "\xE2\x82");
}

TEST(TokenizerByteLevel, InvalidUtf8InputIsReplaced) {
  Tokenizer tokenizer = load(byteLevelTokenizer({}));
  EXPECT_EQ(tokenizer.encode("a\xFF"
                             "b"),
            tokenizer.encode("a\xEF\xBF\xBD"
                             "b"));
}

TEST(TokenizerByteLevel, SplitPatternWithUnicodeProperties) {
  const Json split = {{"type", "Split"},
                      {"pattern", {{"Regex", R"((?i:'s)|\p{L}+|\p{N}{1,3}|\s+(?!\S)|\s+|.)"}}},
                      {"behavior", "Isolated"},
                      {"invert", false}};
  const Json sequence = {
      {"type", "Sequence"},
      {"pretokenizers",
       Json::array(
           {split, {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  Tokenizer tokenizer =
      load(byteLevelTokenizer({{"1", "2"}, {"12", "3"}, {"4", "5"}, {"'", "S"}}, sequence));
  // Digits come in groups of at most three; 'S is one piece because (?i:'s) ignores case.
  EXPECT_EQ(tokensOf(tokenizer, tokenizer.encode("12345'S")), (Tokens{"123", "45", "'S"}));
}

// A catastrophic pattern gives up at the regex match limit instead of running for 2^2000 steps;
// the text it did not match stays one piece (issue 15).
TEST(TokenizerByteLevel, CatastrophicSplitPatternGivesUp) {
  const Json split = {{"type", "Split"},
                      {"pattern", {{"Regex", "(a+)+$"}}},
                      {"behavior", "Isolated"},
                      {"invert", false}};
  Tokenizer tokenizer = load(byteLevelTokenizer({{"a", "a"}}, split));
  Ids expected(1000, *tokenizer.tokenToId("aa"));
  expected.push_back(*tokenizer.tokenToId("!"));
  EXPECT_EQ(tokenizer.encode(std::string(2000, 'a') + "!"), expected);
}

TEST(TokenizerAddedTokens, SpecialTokensAreSplitOutFirst) {
  Json config = byteLevelTokenizer({{"a", "b"}});
  config["added_tokens"] =
      Json::array({addedToken(257, "<|end|>", true), addedToken(258, "<|end|><|end|>", true)});
  Tokenizer tokenizer = load(config);
  EXPECT_EQ(tokenizer.vocabSize(), 259);
  EXPECT_EQ(tokenizer.encode("ab<|end|>ab"), (Ids{256, 257, 256}));
  // Leftmost-longest: the double token wins over two single ones.
  EXPECT_EQ(tokenizer.encode("<|end|><|end|><|end|>"), (Ids{258, 257}));
  EXPECT_EQ(tokenizer.encode("<|en"), tokenizer.encode("<|en", false));
  EXPECT_EQ(*tokenizer.decode({256, 257, 256}), "ab<|end|>ab");
  EXPECT_EQ(*tokenizer.decode({256, 257, 256}, /*skipSpecialTokens=*/true), "abab");
  EXPECT_EQ(tokenizer.specialTokenId("<|end|>"), 257);
  EXPECT_TRUE(tokenizer.isSpecialToken(258));
  EXPECT_FALSE(tokenizer.isSpecialToken(256));
  EXPECT_EQ(tokenizer.tokenToId(byteLevel("ab")), 256);
}

TEST(TokenizerAddedTokens, StripAndSingleWord) {
  Json config = byteLevelTokenizer({});
  config["added_tokens"] = Json::array({addedToken(256, "<L>", true, /*lstrip=*/true),
                                        addedToken(257, "<R>", true, false, /*rstrip=*/true),
                                        addedToken(258, "word", false, false, false,
                                                   /*singleWord=*/true)});
  Tokenizer tokenizer = load(config);
  const auto id = [&](char c) { return *tokenizer.tokenToId(byteLevel(std::string(1, c))); };
  EXPECT_EQ(tokenizer.encode("a  <L>b"), (Ids{id('a'), 256, id('b')}));
  EXPECT_EQ(tokenizer.encode("a<R> \t b"), (Ids{id('a'), 257, id('b')}));
  EXPECT_EQ(tokenizer.encode("word"), (Ids{258}));
  EXPECT_EQ(tokenizer.encode(" word."), (Ids{id(' '), 258, id('.')}));
  // Inside a longer word it is ordinary text.
  EXPECT_EQ(tokenizer.encode("words").size(), 5u);
}

TEST(TokenizerAddedTokens, NormalizedTokensMatchAfterNfc) {
  Json config = byteLevelTokenizer({});
  config["normalizer"] = {{"type", "NFC"}};
  config["added_tokens"] = Json::array({addedToken(256, "café", false, false, false, false,
                                                   /*normalized=*/true)});
  Tokenizer tokenizer = load(config);
  EXPECT_EQ(tokenizer.encode("cafe\xCC\x81"), (Ids{256})); // e + combining acute accent
  EXPECT_EQ(tokenizer.encode("café"), (Ids{256}));
  // NFC also applies to ordinary text: the decomposed form encodes like the composed one.
  EXPECT_EQ(tokenizer.encode("e\xCC\x81"), tokenizer.encode("é"));
}

TEST(TokenizerPostProcessor, TemplateAddsBos) {
  Json config = byteLevelTokenizer({});
  config["added_tokens"] = Json::array({addedToken(256, "<|bos|>", true)});
  config["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       Json::array(
           {{{"type", "ByteLevel"}},
            {{"type", "TemplateProcessing"},
             {"single", Json::array({{{"SpecialToken", {{"id", "<|bos|>"}, {"type_id", 0}}}},
                                     {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
             {"special_tokens",
              {{"<|bos|>", {{"id", "<|bos|>"}, {"ids", {256}}, {"tokens", {"<|bos|>"}}}}}}}})}};
  Tokenizer tokenizer = load(config);
  EXPECT_EQ(tokenizer.encode("a"), (Ids{256, *tokenizer.tokenToId("a")}));
  EXPECT_EQ(tokenizer.encode("a", /*addSpecialTokens=*/false), (Ids{*tokenizer.tokenToId("a")}));
  EXPECT_EQ(tokenizer.prefixTokenIds(), (Ids{256}));
  EXPECT_TRUE(tokenizer.suffixTokenIds().empty());
}

TEST(TokenizerDecode, RejectsIdsWithoutToken) {
  Tokenizer tokenizer = load(characterTokenizer({"a", "b"}, Json::array()));
  EXPECT_EQ(*tokenizer.decode({0, 1}), "a b"); // no decoder: tokens joined by spaces
  StatusOr<std::string> tooLarge = tokenizer.decode({0, 7});
  ASSERT_FALSE(tooLarge.isOk());
  EXPECT_EQ(tooLarge.status().message(), "token id 7 is out of range (vocabulary size 2)");
  EXPECT_FALSE(tokenizer.decode({-1}).isOk());
}

TEST(TokenizerDecode, GeneratedIdsSkipSpecialAndUnknownIds) {
  Json config = byteLevelTokenizer({{"a", "b"}});
  config["added_tokens"] = Json::array({addedToken(257, "<|end|>", true)});
  Tokenizer tokenizer = load(config);
  // 900 and -1: rows of an embedding padded past the vocabulary, which have no text.
  EXPECT_EQ(*tokenizer.decodeGenerated({256, 257, 900, -1, 256}, /*final=*/true), "abab");
  // Streaming: the first two bytes of € are kept raw, and only "ab" is final.
  const Ids euro = tokenizer.encode("€");
  ASSERT_EQ(euro.size(), 3u);
  const std::string bytes = *tokenizer.decodeGenerated({256, euro[0], euro[1]}, /*final=*/false);
  EXPECT_EQ(bytes, "ab\xE2\x82");
  EXPECT_EQ(Tokenizer::streamableLength(bytes), 2u);
  EXPECT_EQ(Tokenizer::streamableLength("ab\xE2\x82\xAC"), 5u);
  EXPECT_EQ(*tokenizer.decodeGenerated({256, euro[0], euro[1]}, /*final=*/true), "ab\xEF\xBF\xBD");
}

TEST(TokenizerThreads, ConcurrentEncodesAgree) {
  Tokenizer tokenizer = load(byteLevelTokenizer({{"a", "b"}, {"ab", "c"}, {" ", "ab"}}));
  std::string text;
  for (int i = 0; i < 2000; ++i)
    text += "abc ab" + std::to_string(i % 97) + " cab ";
  const Ids expected = tokenizer.encode(text);
  std::vector<Ids> results(4);
  std::vector<std::thread> threads;
  for (Ids &result : results)
    threads.emplace_back([&tokenizer, &text, &result] { result = tokenizer.encode(text); });
  for (std::thread &thread : threads)
    thread.join();
  for (const Ids &result : results)
    EXPECT_EQ(result, expected);
}

// --- Bad tokenizer.json: each gives an error naming the problem -------------------------------

TEST(TokenizerErrors, NotJson) {
  EXPECT_NE(loadError("{\"model\": ").find("tokenizer.json is not valid JSON"), std::string::npos);
}

// Nesting is bounded before the loaders walk the value or an error message quotes it: both
// recurse, and a million levels overflowed the stack (issue 15).
TEST(TokenizerErrors, NestedTooDeep) {
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  EXPECT_NE(loadError(R"({"model": {"type": "BPE", "vocab": )" + deep + "}}")
                .find("tokenizer.json nests arrays or objects more than 64 deep"),
            std::string::npos);
}

TEST(TokenizerErrors, TopLevelNotObject) {
  EXPECT_EQ(loadError("[1, 2]"), "tokenizer.json: top level is not an object");
}

TEST(TokenizerErrors, MissingModel) {
  EXPECT_EQ(loadError("{\"added_tokens\": []}"), "tokenizer.json: missing \"model\"");
}

TEST(TokenizerErrors, UnsupportedModelType) {
  EXPECT_EQ(loadError(R"({"model": {"type": "Unigram", "vocab": []}})"),
            "tokenizer.json: not supported yet: tokenizer model 'Unigram'");
}

TEST(TokenizerErrors, MergeWithUnknownToken) {
  EXPECT_EQ(loadError(characterTokenizer({"a", "b", "ab"}, {"a b", "a x"}).dump()),
            "tokenizer.json: BPE merge 1 (\"a x\") references unknown token 'x'");
}

TEST(TokenizerErrors, MergeResultNotInVocabulary) {
  EXPECT_EQ(loadError(characterTokenizer({"a", "b"}, {"a b"}).dump()),
            "tokenizer.json: BPE merge 0 (\"a b\") produces 'ab', which is not in the "
            "vocabulary");
}

TEST(TokenizerErrors, MalformedMerge) {
  EXPECT_EQ(loadError(characterTokenizer({"a", "b", "ab"}, {"a b c"}).dump()),
            "tokenizer.json: BPE merge 0 (\"a b c\") is not two tokens separated by one space");
}

TEST(TokenizerErrors, BadRegex) {
  Json config = byteLevelTokenizer(
      {}, {{"type", "Split"}, {"pattern", {{"Regex", "(\\p{L}+"}}}, {"behavior", "Isolated"}});
  const std::string error = loadError(config.dump());
  EXPECT_NE(error.find("tokenizer.json: pre_tokenizer Split: invalid regex '(\\p{L}+'"),
            std::string::npos)
      << error;
}

// `\C` matches one byte, so it could end a piece inside a character, and the next pattern, run
// without re-checking UTF-8, read past the text (issue 15).
TEST(TokenizerErrors, ByteMatchingEscapeIsRefused) {
  Json config = byteLevelTokenizer(
      {}, {{"type", "Split"}, {"pattern", {{"Regex", "a\\C"}}}, {"behavior", "Isolated"}});
  std::string error = loadError(config.dump());
  const std::string named = "tokenizer.json: pre_tokenizer Split: invalid regex 'a\\C': ";
  ASSERT_EQ(error.rfind(named, 0), 0u) << error;
  EXPECT_NE(error.find("\\C", named.size()), std::string::npos) << error; // PCRE2's reason
  config = byteLevelTokenizer({});
  config["normalizer"] = {
      {"type", "Replace"}, {"pattern", {{"Regex", "\\C+"}}}, {"content", " "}};
  error = loadError(config.dump());
  EXPECT_EQ(error.rfind("tokenizer.json: normalizer Replace: invalid regex '\\C+': ", 0), 0u)
      << error;
}

// A tokenizer.json's added token is matched at every offset of every prompt: 20 KB ones made a
// 60 KB prompt take 5.7 s (issue 15).
TEST(TokenizerErrors, OverlongAddedTokenIsRefused) {
  Json config = byteLevelTokenizer({});
  config["added_tokens"] = Json::array(
      {addedToken(256, "<|end|>", true), addedToken(257, std::string(20000, 'x'), false)});
  EXPECT_EQ(loadError(config.dump()), "tokenizer.json: added_tokens[1] is 20000 bytes long; dlm "
                                      "allows added tokens of at most 512 bytes");
  const std::string longest(512, ' ');
  config["added_tokens"][1] = addedToken(257, longest, false);
  Tokenizer tokenizer = load(config);
  EXPECT_EQ(tokenizer.encode("a" + longest + "<|end|>"),
            (Ids{*tokenizer.tokenToId("a"), 257, 256}));
}

// The id table is as long as the largest id: one entry with id 2^27 - 1 allocated 4 GiB (issue 15).
TEST(TokenizerErrors, SparseVocabularyIsRefused) {
  Json config = characterTokenizer({"a", "b"}, Json::array());
  config["model"]["vocab"]["b"] = 1000000;
  EXPECT_EQ(loadError(config.dump()),
            "tokenizer.json: BPE vocab: largest id 1000000 for 2 entries; dlm allows ids up to "
            "65543 (4 per entry + 65535, at most 16777215)");
  config["model"]["vocab"]["b"] = 65543;
  Tokenizer tokenizer = load(config);
  EXPECT_EQ(tokenizer.vocabSize(), 65544);
  EXPECT_EQ(tokenizer.encode("ba"), (Ids{65543, 0}));
}

TEST(TokenizerErrors, UnsupportedStages) {
  Json config = byteLevelTokenizer({});
  config["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_EQ(loadError(config.dump()), "tokenizer.json: not supported yet: normalizer Lowercase");
  config["normalizer"] = {{"type", "Sequence"},
                          {"normalizers", Json::array({{{"type", "NFC"}}, {{"type", "NFKC"}}})}};
  EXPECT_EQ(loadError(config.dump()), "tokenizer.json: not supported yet: normalizer NFKC");
  config = byteLevelTokenizer({}, {{"type", "BertPreTokenizer"}});
  EXPECT_EQ(loadError(config.dump()),
            "tokenizer.json: not supported yet: pre_tokenizer BertPreTokenizer");
  config = byteLevelTokenizer({});
  config["decoder"] = {{"type", "BPEDecoder"}};
  EXPECT_EQ(loadError(config.dump()), "tokenizer.json: not supported yet: decoder BPEDecoder");
}

TEST(TokenizerErrors, MissingFile) {
  StatusOr<Tokenizer> tokenizer = Tokenizer::fromFile("/nonexistent/tokenizer.json");
  ASSERT_FALSE(tokenizer.isOk());
  EXPECT_NE(tokenizer.status().message().find("cannot open tokenizer file "
                                              "'/nonexistent/tokenizer.json'"),
            std::string::npos);
}

} // namespace
} // namespace dlm
