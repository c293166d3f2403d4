// A chat turned into prompt ids: the checkpoint's chat template rendered as transformers 5.23's
// apply_chat_template renders it, then encoded with the artifact's tokenizer so that user text
// never becomes a special token (issue 14; docs/design/serving.md §6).
//
// Which tokens are special. transformers' default, apply_chat_template(..., tokenize=True), renders
// the chat and encodes the whole string with add_special_tokens=False, which still cuts every added
// token out of the text: a user message containing "<|im_end|>" or the mask token's text gets
// the real control token. dlm does not do that by default. It does what transformers 5.23 does
// with sanitize_control_tokens=True:
//   - the control tokens are the tokenizer's special added tokens, plus the other added tokens
//     that appear in the template's literal text (ChatTemplate::literalText), except white space;
//   - every string the caller supplies (message fields, tools, documents, extra variables; not
//     dict keys, not the special-token variables) has each control token wrapped in the private
//     markers U+F0000 / U+F0001 (markers already in the string are removed first, so they cannot
//     be forged);
//   - the rendered chat is split at the markers: a marked token is encoded as plain text (special
//     tokens off), everything else (the template's own text) with added tokens parsed; every
//     piece after the first is encoded after a "\n" that is then removed again (SentencePiece's
//     prefix space), and a lone marker (a template string method split a marked token) is
//     dropped but still separates the text around it.
// The result is byte for byte transformers' apply_chat_template(..., sanitize_control_tokens=True)
// (tests/reference/chat_templates/make_chat_prompt_fixture.py). ChatRequest::parseSpecialTokensInInput
// asks for transformers' default instead: the API's explicit opt-in.
//
// A ChatPrompt is immutable after create() and safe to use from several threads.
#pragma once

#include "runtime/chat/ChatTemplate.h"
#include "runtime/tokenizer/Tokenizer.h"
#include "support/Status.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dlm {

struct ChatRequest {
  // [{role, content, ...}, ...]; keys whose value is null are dropped, as transformers drops them.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  // null when absent (the template sees None).
  nlohmann::ordered_json tools;
  nlohmann::ordered_json documents;
  bool addGenerationPrompt = false;
  // More template variables (enable_thinking, ...); they override the special-token variables.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  // false: control tokens in the caller's strings are encoded as text (see above). true: the
  // rendered chat is encoded with every added token parsed, user text included (transformers'
  // default apply_chat_template).
  bool parseSpecialTokensInInput = false;
};

class ChatPrompt {
public:
  // The named special tokens transformers passes to the template (bos_token, eos_token, ...),
  // in the order given.
  using SpecialTokens = std::vector<std::pair<std::string, std::string>>;

  // Parses `source` (errors: ChatTemplate::parse's "chat template line N: ..."). `tokenizer` (may
  // be null: render() only) must outlive the ChatPrompt; it decides the control tokens.
  static StatusOr<ChatPrompt> create(std::string_view source, SpecialTokens specialTokens,
                                     const Tokenizer *tokenizer);

  const ChatTemplate &chatTemplate() const { return template_; }
  const SpecialTokens &specialTokens() const { return specialTokens_; }
  // Contents of the tokens user text cannot produce, longest first.
  const std::vector<std::string> &controlTokens() const { return controlTokens_; }

  // The chat as text, as apply_chat_template(..., tokenize=False) renders it (no markers).
  StatusOr<std::string> render(const ChatRequest &request,
                               const ChatTemplate::RenderOptions &options = {}) const;
  // The chat as prompt ids (no post-processor tokens: add_special_tokens=False). Errors: no
  // tokenizer, the template's errors, and "cannot encode the control token 'x' in user text as
  // text: the tokenizer produces it from plain text" (transformers raises the same).
  StatusOr<std::vector<int32_t>> encode(const ChatRequest &request,
                                        const ChatTemplate::RenderOptions &options = {}) const;

  // The marker characters (UTF-8).
  static constexpr std::string_view kMarkStart = "\xF3\xB0\x80\x80"; // U+F0000
  static constexpr std::string_view kMarkEnd = "\xF3\xB0\x80\x81";   // U+F0001

private:
  ChatPrompt(ChatTemplate chatTemplate, SpecialTokens specialTokens, const Tokenizer *tokenizer);
  nlohmann::ordered_json context(const ChatRequest &request, bool mark) const;
  std::string markString(std::string_view text) const;
  nlohmann::ordered_json mark(const nlohmann::ordered_json &value) const;
  std::vector<int32_t> encodePiece(std::string_view piece, bool asText) const;

  ChatTemplate template_;
  SpecialTokens specialTokens_;
  const Tokenizer *tokenizer_ = nullptr;
  // Longest first; ties in id order (Python's stable sort of added_tokens_decoder).
  std::vector<std::string> controlTokens_;
  std::vector<std::string> addedTokens_;
  // Indices into controlTokens_ / addedTokens_ by first byte, longest first.
  std::array<std::vector<uint32_t>, 256> controlByFirstByte_;
  std::array<std::vector<uint32_t>, 256> addedByFirstByte_;
};

} // namespace dlm
