// Unit tests of the components SentencePiece-converted tokenizers (Gemma, Llama 2, Mistral) use:
// BPE byte fallback, the Replace and Prepend normalizers, the Metaspace pre-tokenizer, and the
// Replace, ByteFallback, Fuse, Strip and Metaspace decoders. Expected values are worked out by
// hand from Hugging Face tokenizers 0.20.3; check_sentencepiece_matches_hf.py compares whole
// trained tokenizers with the library.
#include "runtime/tokenizer/Decoder.h"
#include "runtime/tokenizer/Normalizer.h"
#include "runtime/tokenizer/PreTokenizer.h"
#include "runtime/tokenizer/Tokenizer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace dlm::tokenizer {
namespace {

using Json = nlohmann::json;
using Ids = std::vector<int32_t>;
using Strings = std::vector<std::string>;

const std::string kSpace = "\xE2\x96\x81"; // '▁'
const std::string kReplacement = "\xEF\xBF\xBD";

Json replaceConfig(const std::string &pattern, const std::string &content, bool regex = false) {
  return Json{{"type", "Replace"},
              {"pattern", {{regex ? "Regex" : "String", pattern}}},
              {"content", content}};
}

Json metaspaceConfig(const std::string &scheme, bool split) {
  return Json{
      {"type", "Metaspace"}, {"replacement", kSpace}, {"prepend_scheme", scheme}, {"split", split}};
}

const Json kStripFirstSpace = {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}};

Json sequence(const char *key, Json steps) {
  return Json{{"type", "Sequence"}, {key, std::move(steps)}};
}

// --- Normalizers --------------------------------------------------------------------------------

Normalizer normalizer(const Json &config) {
  StatusOr<Normalizer> loaded = Normalizer::fromJson(config);
  EXPECT_TRUE(loaded.isOk()) << loaded.status().message();
  return std::move(loaded).value();
}

std::string normalizerError(const Json &config) {
  StatusOr<Normalizer> loaded = Normalizer::fromJson(config);
  EXPECT_FALSE(loaded.isOk());
  return loaded.status().message();
}

TEST(SentencePieceNormalizer, ReplaceWritesSpacesAsMetaspace) {
  EXPECT_EQ(normalizer(replaceConfig(" ", kSpace)).apply(" a b  c\t"),
            kSpace + "a" + kSpace + "b" + kSpace + kSpace + "c\t");
  // Matches do not overlap and go left to right: "aaa" holds one "aa".
  EXPECT_EQ(normalizer(replaceConfig("aa", "b")).apply("aaa"), "ba");
  EXPECT_EQ(normalizer(replaceConfig(" +", "_", /*regex=*/true)).apply("a  b c"), "a_b_c");
}

TEST(SentencePieceNormalizer, PrependOnlyToNonEmptyText) {
  const Normalizer prepend = normalizer({{"type", "Prepend"}, {"prepend", kSpace}});
  EXPECT_EQ(prepend.apply("ab"), kSpace + "ab");
  EXPECT_EQ(prepend.apply(""), "");
}

TEST(SentencePieceNormalizer, Llama2SequencePrependsThenReplaces) {
  const Normalizer llama2 =
      normalizer(sequence("normalizers", Json::array({{{"type", "Prepend"}, {"prepend", kSpace}},
                                                      replaceConfig(" ", kSpace)})));
  EXPECT_EQ(llama2.apply("Hi you"), kSpace + "Hi" + kSpace + "you");
  EXPECT_EQ(llama2.apply(" x"), kSpace + kSpace + "x");
}

TEST(SentencePieceNormalizer, TracksThePrefixAlignedWithTheStart) {
  size_t aligned = 0;
  // Prepended characters take the alignment of the first character: "▁" + "a".
  normalizer({{"type", "Prepend"}, {"prepend", kSpace}}).apply("ab", &aligned);
  EXPECT_EQ(aligned, kSpace.size() + 1);
  // A replaced first character stays aligned; its content takes the match's alignment.
  normalizer(replaceConfig(" ", kSpace)).apply(" b", &aligned);
  EXPECT_EQ(aligned, kSpace.size());
  // Deleting the first character leaves nothing aligned with the start.
  normalizer(replaceConfig("x", "")).apply("xab", &aligned);
  EXPECT_EQ(aligned, 0u);
  // A match straddling the aligned prefix is aligned with its last character, which is not.
  normalizer(replaceConfig("ab", "Q")).apply("abc", &aligned);
  EXPECT_EQ(aligned, 0u);
  // NFC: the composed character comes from the first one.
  normalizer({{"type", "NFC"}}).apply("e\xCC\x81x", &aligned);
  EXPECT_EQ(aligned, 2u);
}

TEST(SentencePieceNormalizer, Errors) {
  EXPECT_EQ(normalizerError(replaceConfig("", "x")),
            "not supported yet: normalizer Replace with an empty pattern");
  EXPECT_EQ(normalizerError(replaceConfig("a*", "x", /*regex=*/true)),
            "not supported yet: normalizer Replace with a pattern that can match empty text "
            "('a*')");
  EXPECT_EQ(normalizerError({{"type", "Replace"}, {"pattern", {{"String", " "}}}}),
            "normalizer Replace has no \"content\" string");
  EXPECT_EQ(normalizerError({{"type", "Replace"}, {"pattern", {{"Glob", "*"}}}, {"content", ""}}),
            "normalizer Replace: \"pattern\" is neither {\"Regex\": ...} nor {\"String\": ...}");
  EXPECT_EQ(normalizerError({{"type", "Prepend"}, {"prepend", 1}}),
            "normalizer Prepend has no \"prepend\" string");
  Json nested = {{"type", "NFC"}};
  for (int i = 0; i < 40; ++i)
    nested = sequence("normalizers", Json::array({nested}));
  EXPECT_EQ(normalizerError(nested), "normalizer Sequences are nested more than 16 deep");
}

// A tokenizer.json cannot make a short text grow without bound (40 x "a" -> "aa" is 2^40-fold).
TEST(SentencePieceNormalizer, StepsThatGrowTextWithoutBoundAreRefused) {
  const std::string tooMuch = "not supported yet: normalizer steps that can grow a text more "
                              "than 256-fold or by more than 1024 bytes";
  Json doubling = Json::array();
  for (int i = 0; i < 40; ++i)
    doubling.push_back(replaceConfig("a", "aa"));
  EXPECT_EQ(normalizerError(sequence("normalizers", doubling)), tooMuch);
  EXPECT_EQ(normalizerError(replaceConfig("a", std::string(1000, 'b'))), tooMuch);
  EXPECT_EQ(normalizerError({{"type", "Prepend"}, {"prepend", std::string(2000, 'p')}}), tooMuch);
  // A regex's shortest match counts: "[ab]+" spans at least one byte.
  EXPECT_EQ(normalizerError(replaceConfig("[ab]+", std::string(300, 'c'), /*regex=*/true)),
            tooMuch);
  Json many = Json::array();
  for (int i = 0; i < 65; ++i)
    many.push_back({{"type", "Prepend"}, {"prepend", "x"}});
  EXPECT_EQ(normalizerError(sequence("normalizers", many)),
            "not supported yet: normalizer of 65 steps (at most 64)");
  // Real files: Llama 2's Prepend + Replace, 3-fold.
  normalizer(sequence("normalizers", Json::array({{{"type", "Prepend"}, {"prepend", "\u2581"}},
                                                  replaceConfig(" ", "\u2581")})));
}

// --- Metaspace pre-tokenizer --------------------------------------------------------------------

Strings preTokenize(const Json &config, const std::string &text, size_t startAligned) {
  StatusOr<PreTokenizer> loaded = PreTokenizer::fromJson(config);
  EXPECT_TRUE(loaded.isOk()) << loaded.status().message();
  Strings words;
  loaded->apply(text, startAligned, words);
  return words;
}

TEST(SentencePieceMetaspace, AlwaysPrependsAndSplitsBeforeEachSpace) {
  const Json config = metaspaceConfig("always", true);
  EXPECT_EQ(preTokenize(config, "hello  world", 1),
            (Strings{kSpace + "hello", kSpace, kSpace + "world"}));
  // Mid-text pieces are prefixed too; a piece starting with a space gets no second one.
  EXPECT_EQ(preTokenize(config, "a b", 0), (Strings{kSpace + "a", kSpace + "b"}));
  EXPECT_EQ(preTokenize(config, " a", 0), (Strings{kSpace + "a"}));
  EXPECT_EQ(preTokenize(config, kSpace + "a", 0), (Strings{kSpace + "a"}));
  // Only U+0020 is a space here: tabs and newlines stay inside the words.
  EXPECT_EQ(preTokenize(config, "a\tb\nc ", 1), (Strings{kSpace + "a\tb\nc", kSpace}));
}

TEST(SentencePieceMetaspace, WithoutSplitThePieceStaysWhole) {
  EXPECT_EQ(preTokenize(metaspaceConfig("always", false), "hello  world", 1),
            (Strings{kSpace + "hello" + kSpace + kSpace + "world"}));
}

TEST(SentencePieceMetaspace, FirstPrependsOnlyAtTheStartOfTheInput) {
  const Json config = metaspaceConfig("first", false);
  EXPECT_EQ(preTokenize(config, "a b", 1), (Strings{kSpace + "a" + kSpace + "b"}));
  EXPECT_EQ(preTokenize(config, "a b", 0), (Strings{"a" + kSpace + "b"}));
}

TEST(SentencePieceMetaspace, NeverPrepends) {
  EXPECT_EQ(preTokenize(metaspaceConfig("never", true), "a b", 1), (Strings{"a", kSpace + "b"}));
}

TEST(SentencePieceMetaspace, FirstAfterASplitOfAPrependedPrefix) {
  // "1a" is normalized to "▁1a", where both "▁" and "1" are aligned with the start; after a
  // split at digits, the piece "1" starts the input too and gets its own "▁".
  const Json config = sequence("pretokenizers", Json::array({{{"type", "Split"},
                                                              {"pattern", {{"Regex", "\\p{N}"}}},
                                                              {"behavior", "Isolated"}},
                                                             metaspaceConfig("first", false)}));
  EXPECT_EQ(preTokenize(config, kSpace + "1a", kSpace.size() + 1),
            (Strings{kSpace, kSpace + "1", "a"}));
}

TEST(SentencePieceMetaspace, Errors) {
  const auto error = [](const Json &config) {
    StatusOr<PreTokenizer> loaded = PreTokenizer::fromJson(config);
    EXPECT_FALSE(loaded.isOk());
    return loaded.status().message();
  };
  // The older spelling: add_prefix_space = false must say prepend_scheme "never".
  EXPECT_EQ(error({{"type", "Metaspace"}, {"replacement", kSpace}, {"add_prefix_space", false}}),
            "pre_tokenizer Metaspace: add_prefix_space does not match declared prepend_scheme");
  EXPECT_TRUE(PreTokenizer::fromJson({{"type", "Metaspace"},
                                      {"replacement", kSpace},
                                      {"add_prefix_space", false},
                                      {"prepend_scheme", "never"}})
                  .isOk());
  EXPECT_EQ(error({{"type", "Metaspace"}, {"replacement", "__"}}),
            "pre_tokenizer Metaspace: \"replacement\" must be one character, not '__'");
  EXPECT_EQ(error({{"type", "Metaspace"}, {"replacement", kSpace}, {"prepend_scheme", "twice"}}),
            "pre_tokenizer Metaspace: unknown prepend_scheme twice");
  Json nested = metaspaceConfig("always", true);
  for (int i = 0; i < 40; ++i)
    nested = sequence("pretokenizers", Json::array({nested}));
  EXPECT_EQ(error(nested), "pre_tokenizer Sequences are nested more than 16 deep");
}

// --- Decoders -----------------------------------------------------------------------------------

std::string decode(const Json &config, const Strings &tokens, bool keepCutCharacter = false) {
  StatusOr<Decoder> loaded = Decoder::fromJson(config);
  EXPECT_TRUE(loaded.isOk()) << loaded.status().message();
  const std::vector<std::string_view> views(tokens.begin(), tokens.end());
  return loaded->decode(views, keepCutCharacter);
}

std::string decoderError(const Json &config) {
  StatusOr<Decoder> loaded = Decoder::fromJson(config);
  EXPECT_FALSE(loaded.isOk());
  return loaded.status().message();
}

const Json kByteFallback = {{"type", "ByteFallback"}};

TEST(SentencePieceDecoder, StepsThatGrowTextWithoutBoundAreRefused) {
  Json doubling = Json::array();
  for (int i = 0; i < 40; ++i)
    doubling.push_back(replaceConfig("a", "aa"));
  EXPECT_EQ(decoderError(sequence("decoders", doubling)),
            "not supported yet: decoder steps that can grow a text more than 256-fold or by more "
            "than 1024 bytes");
}

TEST(SentencePieceDecoder, ByteFallbackDecodesRunsOfByteTokens) {
  EXPECT_EQ(decode(kByteFallback, {"<0x41>", "<0xC3>", "<0xA9>", "b", "<0x0A>"}), "A\xC3\xA9"
                                                                                  "b\n");
  // Either case, and Rust's from_str_radix also takes a '+' sign: "<0x+A>" is a newline.
  EXPECT_EQ(decode(kByteFallback, {"<0xc3>", "<0xa9>", "<0x+A>"}), "\xC3\xA9\n");
  // Anything else is an ordinary token: wrong length, not hex, a '-' sign.
  EXPECT_EQ(decode(kByteFallback, {"<0x4G>", "<0x41", "<0x-1>", "<0x041>"}),
            "<0x4G><0x41<0x-1><0x041>");
}

TEST(SentencePieceDecoder, ByteFallbackGivesOneReplacementPerByteOfAnInvalidRun) {
  // The whole run is replaced byte by byte, even its valid start ("A"), unlike from_utf8_lossy.
  EXPECT_EQ(decode(kByteFallback, {"<0x41>", "<0xE2>", "<0x82>", "x"}),
            kReplacement + kReplacement + kReplacement + "x");
  EXPECT_EQ(decode(kByteFallback, {"<0xE2>", "<0x82>"}), kReplacement + kReplacement);
  EXPECT_EQ(decode(kByteFallback, {"<0xFF>"}), kReplacement);
}

// An invalid run becomes one U+FFFD token per byte, so a per-token Strip sees each (checked
// against tokenizers 0.20.3: "a").
TEST(SentencePieceDecoder, ByteFallbackGivesOneTokenPerReplacedByte) {
  const Json withStrip = sequence(
      "decoders", Json::array({kByteFallback,
                               {{"type", "Strip"}, {"content", "\uFFFD"}, {"start", 1},
                                {"stop", 0}}}));
  EXPECT_EQ(decode(withStrip, {"<0xFF>", "<0xFE>", "a"}), "a");
}

// While streaming, a run of byte tokens at the very end is left out: more bytes may complete it,
// or turn the whole run, its complete characters included, into U+FFFDs.
TEST(SentencePieceDecoder, ByteFallbackHoldsBackTheLastRunWhileStreaming) {
  EXPECT_EQ(decode(kByteFallback, {"a", "<0xE2>", "<0x82>"}, true), "a");
  EXPECT_EQ(decode(kByteFallback, {"<0xC3>", "<0xA9>", "<0xE2>"}, true), "");
  EXPECT_EQ(decode(kByteFallback, {"<0xC3>", "<0xA9>", "<0xE2>", "x"}, true),
            kReplacement + kReplacement + kReplacement + "x");
  // A run that a token ends is final.
  EXPECT_EQ(decode(kByteFallback, {"<0xE2>", "<0x82>", "b"}, true),
            kReplacement + kReplacement + "b");
  EXPECT_EQ(decode(kByteFallback, {"<0xC3>", "<0xA9>", "b"}, true), "\xC3\xA9" "b");
}

// What a stream shows is always a prefix of the final text, whatever bytes come next.
TEST(SentencePieceDecoder, StreamedTextIsAlwaysAPrefixOfTheFinalText) {
  const std::vector<std::string> pieces = {"<0xC3>", "<0xA9>", "<0xE2>", "<0x82>", "<0xAC>",
                                           "<0xFF>", "<0x41>", "a", "\u2581b"};
  const Json llama = sequence(
      "decoders", Json::array({replaceConfig("\u2581", " "), kByteFallback, {{"type", "Fuse"}},
                               {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}));
  uint64_t state = 12345;
  for (int trial = 0; trial < 2000; ++trial) {
    Strings tokens;
    for (int i = 0; i < 8; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      tokens.push_back(pieces[(state >> 33) % pieces.size()]);
    }
    const std::string final = decode(llama, tokens, false);
    for (size_t k = 0; k <= tokens.size(); ++k) {
      const std::string shown = decode(llama, Strings(tokens.begin(), tokens.begin() + k), true);
      ASSERT_EQ(final.compare(0, shown.size(), shown), 0)
          << "after " << k << " tokens the stream shows '" << shown << "', the end is '" << final
          << "'";
    }
  }
}

TEST(SentencePieceDecoder, Llama2SequenceRestoresSpacesAndDropsTheFirst) {
  const Json llama2 = sequence(
      "decoders",
      Json::array(
          {replaceConfig(kSpace, " "), kByteFallback, {{"type", "Fuse"}}, kStripFirstSpace}));
  EXPECT_EQ(decode(llama2, {kSpace + "Hello", kSpace + "world", "<0x21>"}), "Hello world!");
  EXPECT_EQ(decode(llama2, {kSpace + kSpace + "a"}), " a"); // at most one is stripped
  EXPECT_EQ(decode(llama2, {}), "");
}

TEST(SentencePieceDecoder, StripWorksOnEachToken) {
  EXPECT_EQ(decode(kStripFirstSpace, {" a", " b", "c"}), "abc");
  const Json both = {{"type", "Strip"}, {"content", "x"}, {"start", 2}, {"stop", 1}};
  EXPECT_EQ(decode(both, {"xxxaxx"}), "xax");
  // Hugging Face panics when the two cuts cross; here the token becomes empty.
  EXPECT_EQ(decode(both, {"x"}), "");
}

TEST(SentencePieceDecoder, FuseJoinsBeforeLaterSteps) {
  // Strip after Fuse sees one string; without Fuse, every token.
  EXPECT_EQ(decode(sequence("decoders", Json::array({{{"type", "Fuse"}}, kStripFirstSpace})),
                   {" a", " b"}),
            "a b");
}

TEST(SentencePieceDecoder, MetaspaceDropsEveryReplacementOfTheFirstToken) {
  EXPECT_EQ(decode(metaspaceConfig("always", true), {kSpace + "a" + kSpace + "b", kSpace + "c"}),
            "ab c");
  EXPECT_EQ(decode(metaspaceConfig("first", true), {kSpace + "a", kSpace, "b"}), "a b");
  EXPECT_EQ(decode(metaspaceConfig("never", true), {kSpace + "a", kSpace + "b"}), " a b");
}

TEST(SentencePieceDecoder, EmptySequenceConcatenatesAndNullJoinsWithSpaces) {
  EXPECT_EQ(decode(sequence("decoders", Json::array()), {"a", "b"}), "ab");
  EXPECT_EQ(decode(nullptr, {"a", "b"}), "a b");
}

TEST(SentencePieceDecoder, Errors) {
  EXPECT_EQ(decoderError({{"type", "Strip"}, {"content", "ab"}, {"start", 1}, {"stop", 0}}),
            "decoder Strip: \"content\" must be one character, not 'ab'");
  EXPECT_EQ(decoderError({{"type", "Strip"}, {"content", " "}, {"start", -1}, {"stop", 0}}),
            "decoder Strip has no non-negative integer \"start\"");
  EXPECT_EQ(decoderError({{"type", "CTC"}}), "not supported yet: decoder CTC");
  EXPECT_EQ(decoderError(replaceConfig("(", " ", /*regex=*/true))
                .find("decoder Replace: invalid regex '('"),
            0u);
  Json nested = kByteFallback;
  for (int i = 0; i < 40; ++i)
    nested = sequence("decoders", Json::array({nested}));
  EXPECT_EQ(decoderError(nested), "decoder Sequences are nested more than 16 deep");
}

// --- Whole tokenizers ---------------------------------------------------------------------------

// A Llama-2-shaped tokenizer: <unk> <s> </s>, the byte tokens named in `bytes`, then `pieces`,
// with `merges`; byte_fallback and fuse_unk as given.
Json llama2Tokenizer(const std::vector<int> &bytes, const Strings &pieces, Json merges,
                     bool fuseUnknown = true) {
  Json vocabulary = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (const int byte : bytes) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", byte);
    vocabulary[name] = static_cast<int>(vocabulary.size());
  }
  for (const std::string &piece : pieces)
    vocabulary[piece] = static_cast<int>(vocabulary.size());
  return Json{{"added_tokens", Json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                                            {{"id", 1}, {"content", "<s>"}, {"special", true}},
                                            {{"id", 2}, {"content", "</s>"}, {"special", true}}})},
              {"normalizer",
               sequence("normalizers", Json::array({{{"type", "Prepend"}, {"prepend", kSpace}},
                                                    replaceConfig(" ", kSpace)}))},
              {"pre_tokenizer", nullptr},
              {"post_processor", nullptr},
              {"decoder", sequence("decoders", Json::array({replaceConfig(kSpace, " "),
                                                            kByteFallback,
                                                            {{"type", "Fuse"}},
                                                            kStripFirstSpace}))},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", "<unk>"},
                {"fuse_unk", fuseUnknown},
                {"byte_fallback", true},
                {"vocab", vocabulary},
                {"merges", std::move(merges)}}}};
}

dlm::Tokenizer load(const Json &config) {
  StatusOr<dlm::Tokenizer> tokenizer = dlm::Tokenizer::fromJson(config.dump());
  EXPECT_TRUE(tokenizer.isOk()) << tokenizer.status().message();
  return std::move(tokenizer).value();
}

Strings tokensOf(const dlm::Tokenizer &tokenizer, const Ids &ids) {
  Strings tokens;
  for (const int32_t id : ids)
    tokens.push_back(tokenizer.idToToken(id).value_or("?"));
  return tokens;
}

TEST(SentencePieceBpe, DeeplyNestedSequencesAreRefused) {
  Json config = llama2Tokenizer({}, {kSpace, "a"}, Json::array());
  Json processor = {{"type", "ByteLevel"}};
  for (int i = 0; i < 20; ++i) // 40 levels of JSON: within its limit of 64
    processor = sequence("processors", Json::array({processor}));
  config["post_processor"] = processor;
  StatusOr<dlm::Tokenizer> tokenizer = dlm::Tokenizer::fromJson(config.dump());
  ASSERT_FALSE(tokenizer.isOk());
  EXPECT_EQ(tokenizer.status().message(),
            "tokenizer.json: post_processor Sequences are nested more than 16 deep");
}

TEST(SentencePieceBpe, CharacterWithoutTokenBecomesItsBytes) {
  const dlm::Tokenizer tokenizer = load(llama2Tokenizer({0xC3, 0xA9}, {kSpace, "a", kSpace + "a"},
                                                        Json::array({Json::array({kSpace, "a"})})));
  EXPECT_EQ(tokensOf(tokenizer, tokenizer.encode("aé a")),
            (Strings{kSpace + "a", "<0xC3>", "<0xA9>", kSpace + "a"}));
  EXPECT_EQ(*tokenizer.decode(tokenizer.encode("aé a")), "aé a");
}

TEST(SentencePieceBpe, MissingByteTokensFallBackToUnknown) {
  // "€" (E2 82 AC) has no byte tokens here, "é" (C3 A9) has both.
  const Json config = llama2Tokenizer({0xC3, 0xA9}, {kSpace, "a"}, Json::array());
  const dlm::Tokenizer fused = load(config);
  EXPECT_EQ(tokensOf(fused, fused.encode("a€€a", false)), (Strings{kSpace, "a", "<unk>", "a"}));
  const dlm::Tokenizer unfused = load(llama2Tokenizer({0xC3, 0xA9}, {kSpace, "a"}, Json::array(),
                                                      /*fuseUnknown=*/false));
  EXPECT_EQ(tokensOf(unfused, unfused.encode("a€€a", false)),
            (Strings{kSpace, "a", "<unk>", "<unk>", "a"}));
  // Hugging Face adds byte tokens without first emitting a pending <unk>: "€é" comes out as
  // é's bytes, then <unk>.
  EXPECT_EQ(tokensOf(fused, fused.encode("€éa", false)),
            (Strings{kSpace, "<0xC3>", "<0xA9>", "<unk>", "a"}));
}

TEST(SentencePieceBpe, WithoutByteFallbackByteTokensAreNotUsed) {
  Json config = llama2Tokenizer({0xC3, 0xA9}, {kSpace, "a"}, Json::array());
  config["model"]["byte_fallback"] = false;
  const dlm::Tokenizer tokenizer = load(config);
  EXPECT_EQ(tokensOf(tokenizer, tokenizer.encode("é", false)), (Strings{kSpace, "<unk>"}));
}

TEST(SentencePieceBpe, DecodeBytesHoldsBackTheLastByteRun) {
  const dlm::Tokenizer tokenizer =
      load(llama2Tokenizer({0xE2, 0x82, 0xAC}, {kSpace, "a"}, Json::array()));
  const Ids ids = tokenizer.encode("a€", false); // ▁ a <0xE2> <0x82> <0xAC>
  ASSERT_EQ(ids.size(), 5u);
  EXPECT_EQ(*tokenizer.decode(ids), "a€");
  const Ids cut(ids.begin(), ids.begin() + 4);
  EXPECT_EQ(*tokenizer.decode(cut), "a" + kReplacement + kReplacement);
  EXPECT_EQ(*tokenizer.decodeBytes(cut), "a");
  EXPECT_EQ(*tokenizer.decodeBytes(ids), "a");
}

TEST(SentencePieceBpe, MetaspaceFirstSkipsPiecesAfterAnAddedToken) {
  Json config = llama2Tokenizer({}, {kSpace, "a", "b", kSpace + "a"},
                                Json::array({Json::array({kSpace, "a"})}));
  config["normalizer"] = nullptr;
  config["pre_tokenizer"] = metaspaceConfig("first", false);
  const dlm::Tokenizer tokenizer = load(config);
  EXPECT_EQ(tokensOf(tokenizer, tokenizer.encode("a b", false)),
            (Strings{kSpace + "a", kSpace, "b"}));
  // The text after <s> does not start the input: no "▁" in front of it.
  EXPECT_EQ(tokensOf(tokenizer, tokenizer.encode("<s>a<s> a", false)),
            (Strings{"<s>", "a", "<s>", kSpace + "a"}));
}

TEST(SentencePieceBpe, Llama2NormalizerPrependsToEachPieceBetweenSpecialTokens) {
  const dlm::Tokenizer tokenizer = load(
      llama2Tokenizer({}, {kSpace, "a", kSpace + "a"}, Json::array({Json::array({kSpace, "a"})})));
  // The normalizer runs on each piece between tokens that are matched on the raw text.
  EXPECT_EQ(tokensOf(tokenizer, tokenizer.encode("a<s>a", false)),
            (Strings{kSpace + "a", "<s>", kSpace + "a"}));
  EXPECT_EQ(*tokenizer.decode(tokenizer.encode("a<s>a", false)), "a<s> a");
}

} // namespace
} // namespace dlm::tokenizer
