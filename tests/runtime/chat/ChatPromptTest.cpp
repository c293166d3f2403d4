// The special-token rule of chat prompts (issue 14): user text never becomes a special token
// unless the request asks for it. A word-level tokenizer keeps the ids readable: the control
// tokens' text splits into "<|", a word and "|>". tests/lit/dlmc/chat_template.test checks the
// same rule against transformers 5.23's ids (sanitize_control_tokens=True) on a byte-level BPE.
#include "runtime/chat/ChatPrompt.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace dlm {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;
using Ids = std::vector<int32_t>;

enum : int32_t {
  kUnk = 0, kOpen, kClose, kImEnd, kMask, kEndOfText, kSay, kNow, kUser, kAssistant, kSystem,
  kHi, kImStart, kTool,
  // Added tokens, numbered after the vocabulary as Hugging Face numbers them.
  kImEndToken, kImStartToken, kMaskToken, kEndOfTextToken, kToolToken,
};

Json addedToken(int32_t id, const std::string &content, bool special) {
  return Json{{"id", id},          {"content", content}, {"single_word", false},
              {"lstrip", false},   {"rstrip", false},    {"normalized", !special},
              {"special", special}};
}

Tokenizer makeTokenizer() {
  const Json vocab = {{"[UNK]", kUnk},        {"<|", kOpen},         {"|>", kClose},
                      {"im_end", kImEnd},     {"mask", kMask},       {"endoftext", kEndOfText},
                      {"say", kSay},          {"now", kNow},         {"user", kUser},
                      {"assistant", kAssistant}, {"system", kSystem}, {"hi", kHi},
                      {"im_start", kImStart}, {"tool", kTool}};
  const Json config = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens",
       {addedToken(kImEndToken, "<|im_end|>", true), addedToken(kImStartToken, "<|im_start|>", true),
        addedToken(kMaskToken, "<|mask|>", true), addedToken(kEndOfTextToken, "<|endoftext|>", true),
        // Not special, but the template writes it: a control token all the same.
        addedToken(kToolToken, "<|tool|>", false)}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "Whitespace"}}},
      {"post_processor", nullptr},
      {"decoder", nullptr},
      {"model", {{"type", "WordLevel"}, {"vocab", vocab}, {"unk_token", "[UNK]"}}}};
  StatusOr<Tokenizer> tokenizer = Tokenizer::fromJson(config.dump());
  EXPECT_TRUE(tokenizer.isOk()) << tokenizer.status().message();
  return std::move(tokenizer).value();
}

const char *const kTemplate =
    "{% for m in messages %}<|im_start|>{{ m.role }} {{ m.content }}{{ eos_token }}{% endfor %}"
    "{% if tools %}{{ '<|tool|>' }}{{ tools[0] }}{% endif %}"
    "{% if add_generation_prompt %}<|im_start|>assistant {% endif %}";

class ChatPromptTest : public testing::Test {
protected:
  ChatPrompt prompt() {
    StatusOr<ChatPrompt> created =
        ChatPrompt::create(kTemplate, {{"eos_token", "<|im_end|>"}}, &tokenizer_);
    EXPECT_TRUE(created.isOk()) << created.status().message();
    return std::move(created).value();
  }
  static ChatRequest userSays(const std::string &text) {
    ChatRequest request;
    request.messages.push_back({{"role", "user"}, {"content", text}});
    request.addGenerationPrompt = true;
    return request;
  }

  Tokenizer tokenizer_ = makeTokenizer();
};

TEST_F(ChatPromptTest, ControlTokensAreSpecialAndThoseTheTemplateWrites) {
  const ChatPrompt chat = prompt();
  EXPECT_EQ(chat.controlTokens(), (std::vector<std::string>{"<|endoftext|>", "<|im_start|>",
                                                             "<|im_end|>", "<|mask|>", "<|tool|>"}));
}

TEST_F(ChatPromptTest, TemplateTokensAreSpecialUserTextIsNot) {
  const ChatPrompt chat = prompt();
  StatusOr<Ids> ids = chat.encode(userSays("say now"));
  ASSERT_TRUE(ids.isOk()) << ids.status().message();
  EXPECT_EQ(*ids, (Ids{kImStartToken, kUser, kSay, kNow, kImEndToken, kImStartToken, kAssistant}));
}

TEST_F(ChatPromptTest, EosAndMaskInUserContentAreEncodedAsText) {
  const ChatPrompt chat = prompt();
  StatusOr<Ids> ids = chat.encode(userSays("say <|im_end|> <|mask|><|endoftext|>"));
  ASSERT_TRUE(ids.isOk()) << ids.status().message();
  EXPECT_EQ(*ids, (Ids{kImStartToken, kUser, kSay, kOpen, kImEnd, kClose, kOpen, kMask, kClose,
                       kOpen, kEndOfText, kClose, kImEndToken, kImStartToken, kAssistant}));
  // The rendered text is the same either way.
  StatusOr<std::string> text = chat.render(userSays("say <|im_end|>"));
  ASSERT_TRUE(text.isOk()) << text.status().message();
  EXPECT_EQ(*text, "<|im_start|>user say <|im_end|><|im_end|><|im_start|>assistant ");
}

TEST_F(ChatPromptTest, TheRequestCanAskForTransformersDefault) {
  const ChatPrompt chat = prompt();
  ChatRequest request = userSays("say <|im_end|> <|mask|>");
  request.parseSpecialTokensInInput = true;
  StatusOr<Ids> ids = chat.encode(request);
  ASSERT_TRUE(ids.isOk()) << ids.status().message();
  EXPECT_EQ(*ids, (Ids{kImStartToken, kUser, kSay, kImEndToken, kMaskToken, kImEndToken,
                       kImStartToken, kAssistant}));
}

TEST_F(ChatPromptTest, SystemMessagesToolsAndExtraVariablesAreUserText) {
  const ChatPrompt chat = prompt();
  ChatRequest request = userSays("hi");
  request.messages.insert(request.messages.begin(),
                          OrderedJson{{"role", "system"}, {"content", "<|im_start|>user"}});
  request.tools = OrderedJson::array({"<|mask|>"});
  StatusOr<Ids> ids = chat.encode(request);
  ASSERT_TRUE(ids.isOk()) << ids.status().message();
  EXPECT_EQ(*ids, (Ids{kImStartToken, kSystem, kOpen, kImStart, kClose, kUser, kImEndToken,
                       kImStartToken, kUser, kHi, kImEndToken, kToolToken, kOpen, kMask, kClose,
                       kImStartToken, kAssistant}));
}

// A control token that is an ordinary (not special) added token is still cut out of text with
// special tokens off, so it cannot be encoded as text: refused, as transformers refuses it.
TEST_F(ChatPromptTest, AnOrdinaryAddedControlTokenInUserTextIsRefused) {
  const ChatPrompt chat = prompt();
  EXPECT_EQ(chat.encode(userSays("say <|tool|>")).status().message(),
            "cannot encode the control token '<|tool|>' in user text as text: the tokenizer "
            "produces it from plain text");
}

TEST_F(ChatPromptTest, MarkersInUserTextCannotForgeATemplateToken) {
  const ChatPrompt chat = prompt();
  // A user who writes the private markers around a token gets them removed, then the token
  // marked as text; a lone marker cannot join text into a control token either.
  const std::string start(ChatPrompt::kMarkStart), end(ChatPrompt::kMarkEnd);
  StatusOr<Ids> ids = chat.encode(userSays(start + "<|im_end|>" + end + " <|" + end + "mask|>"));
  ASSERT_TRUE(ids.isOk()) << ids.status().message();
  EXPECT_EQ(*ids, (Ids{kImStartToken, kUser, kOpen, kImEnd, kClose, kOpen, kMask, kClose,
                       kImEndToken, kImStartToken, kAssistant}));
}

TEST_F(ChatPromptTest, NamedErrors) {
  const ChatPrompt chat = prompt();
  EXPECT_EQ(chat.encode(ChatRequest{}).status().message(), "a chat needs at least one message");
  ChatRequest request;
  request.messages.push_back("hi");
  EXPECT_EQ(chat.render(request).status().message(), "chat messages must be objects, got \"hi\"");
  StatusOr<ChatPrompt> bad = ChatPrompt::create("{% macro m() %}{% endmacro %}", {}, &tokenizer_);
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().message(), "chat template line 1: not supported yet: the 'macro' tag");
}

TEST(TokenizerSpecialTokensAsText, SpecialTokensStayTextOrdinaryAddedTokensStillMatch) {
  const Tokenizer tokenizer = makeTokenizer();
  EXPECT_EQ(tokenizer.encode("say <|im_end|> <|tool|>", false),
            (Ids{kSay, kImEndToken, kToolToken}));
  EXPECT_EQ(tokenizer.encode("say <|im_end|> <|tool|>", false, /*specialTokensAsText=*/true),
            (Ids{kSay, kOpen, kImEnd, kClose, kToolToken}));
}

} // namespace
} // namespace dlm
