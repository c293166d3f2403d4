#include "runtime/chat/ChatPrompt.h"
#include "support/JsonText.h"

#include <algorithm>
#include <numeric>

namespace dlm {
namespace {

using OrderedJson = nlohmann::ordered_json;

// Python's str.isspace() for the token contents that matter (tokens such as Gemma's "\n").
bool isSpaceOnly(std::string_view text) {
  if (text.empty())
    return false;
  size_t i = 0;
  while (i < text.size()) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte == ' ' || (byte >= 0x09 && byte <= 0x0D) || (byte >= 0x1C && byte <= 0x1F)) {
      ++i;
    } else if (text.substr(i, 2) == "\xC2\x85" || text.substr(i, 2) == "\xC2\xA0") {
      i += 2;
    } else if (text.substr(i, 3) == "\xE3\x80\x80" || text.substr(i, 3) == "\xE2\x80\xA8" ||
               text.substr(i, 3) == "\xE2\x80\xA9" || text.substr(i, 3) == "\xE2\x80\xAF" ||
               text.substr(i, 3) == "\xE2\x81\x9F" || text.substr(i, 3) == "\xE1\x9A\x80" ||
               (text.substr(i, 2) == "\xE2\x80" && i + 2 < text.size() &&
                static_cast<unsigned char>(text[i + 2]) >= 0x80 &&
                static_cast<unsigned char>(text[i + 2]) <= 0x8A)) {
      i += 3;
    } else {
      return false;
    }
  }
  return true;
}

// Sorted longest first, stably (ties keep their order), with an index by first byte.
void index(std::vector<std::string> &tokens, std::array<std::vector<uint32_t>, 256> &byFirst) {
  std::stable_sort(tokens.begin(), tokens.end(),
                   [](const std::string &a, const std::string &b) { return a.size() > b.size(); });
  for (uint32_t i = 0; i < tokens.size(); ++i)
    if (!tokens[i].empty())
      byFirst[static_cast<unsigned char>(tokens[i][0])].push_back(i);
}

// The first (so longest) token of `byFirst` at text[offset]; -1 when none.
int64_t tokenAt(std::string_view text, size_t offset, const std::vector<std::string> &tokens,
                const std::array<std::vector<uint32_t>, 256> &byFirst) {
  for (uint32_t i : byFirst[static_cast<unsigned char>(text[offset])])
    if (text.compare(offset, tokens[i].size(), tokens[i]) == 0)
      return i;
  return -1;
}

void eraseAll(std::string &text, std::string_view what) {
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at))
    text.erase(at, what.size());
}

} // namespace

ChatPrompt::ChatPrompt(ChatTemplate chatTemplate, SpecialTokens specialTokens,
                       const Tokenizer *tokenizer)
    : template_(std::move(chatTemplate)), specialTokens_(std::move(specialTokens)),
      tokenizer_(tokenizer) {}

StatusOr<ChatPrompt> ChatPrompt::create(std::string_view source, SpecialTokens specialTokens,
                                        const Tokenizer *tokenizer) {
  DLM_ASSIGN_OR_RETURN(ChatTemplate parsed, ChatTemplate::parse(source));
  ChatPrompt prompt(std::move(parsed), std::move(specialTokens), tokenizer);
  if (!tokenizer)
    return prompt;
  // transformers' _get_control_tokens without tokenizer.chat_control_tokens: the added tokens
  // (added_tokens_decoder, in id order) that are special or appear in the template's literal
  // text and are not white space.
  std::vector<AddedToken> added = tokenizer->addedTokens();
  std::stable_sort(added.begin(), added.end(),
                   [](const AddedToken &a, const AddedToken &b) { return a.id < b.id; });
  const std::string &literals = prompt.template_.literalText();
  for (const AddedToken &token : added) {
    prompt.addedTokens_.push_back(token.content);
    if (token.special ||
        (literals.find(token.content) != std::string::npos && !isSpaceOnly(token.content)))
      prompt.controlTokens_.push_back(token.content);
  }
  index(prompt.controlTokens_, prompt.controlByFirstByte_);
  index(prompt.addedTokens_, prompt.addedByFirstByte_);
  return prompt;
}

// mark_control_tokens on one string: drop markers already there, wrap each control token
// (leftmost, longest at a position) in the markers.
std::string ChatPrompt::markString(std::string_view input) const {
  std::string text(input);
  eraseAll(text, kMarkStart);
  eraseAll(text, kMarkEnd);
  if (controlTokens_.empty())
    return text;
  std::string marked;
  marked.reserve(text.size());
  size_t offset = 0;
  while (offset < text.size()) {
    const int64_t token = tokenAt(text, offset, controlTokens_, controlByFirstByte_);
    if (token < 0) {
      marked += text[offset++];
      continue;
    }
    const std::string &content = controlTokens_[static_cast<size_t>(token)];
    marked.append(kMarkStart).append(content).append(kMarkEnd);
    offset += content.size();
  }
  return marked;
}

// Strings marked recursively through lists and dict values; dict keys are not marked.
OrderedJson ChatPrompt::mark(const OrderedJson &value) const {
  if (value.is_string())
    return markString(value.get_ref<const std::string &>());
  if (value.is_array()) {
    OrderedJson out = OrderedJson::array();
    for (const OrderedJson &item : value)
      out.push_back(mark(item));
    return out;
  }
  if (value.is_object()) {
    OrderedJson out = OrderedJson::object();
    for (auto it = value.begin(); it != value.end(); ++it)
      out[it.key()] = mark(it.value());
    return out;
  }
  return value;
}

// The variables apply_chat_template gives the template: messages (null-valued keys dropped,
// reasoning fields aliased as _alias_reasoning_fields does), tools, documents,
// add_generation_prompt, the special tokens, then the extra variables (overriding them).
OrderedJson ChatPrompt::context(const ChatRequest &request, bool markInputs) const {
  static const char *const kReasoningFields[] = {"reasoning_content", "thinking", "reasoning"};
  OrderedJson messages = OrderedJson::array();
  {
    for (const OrderedJson &message : request.messages) {
      OrderedJson kept = OrderedJson::object();
      for (auto it = message.begin(); it != message.end(); ++it)
        if (!it.value().is_null())
          kept[it.key()] = markInputs ? mark(it.value()) : it.value();
      const OrderedJson *reasoning = nullptr;
      for (const char *field : kReasoningFields)
        if (kept.contains(field)) {
          reasoning = &kept[field];
          break;
        }
      if (reasoning) {
        OrderedJson aliased = OrderedJson::object();
        aliased["thinking"] = *reasoning;
        for (auto it = kept.begin(); it != kept.end(); ++it)
          aliased[it.key()] = it.value();
        aliased["reasoning_content"] = *reasoning;
        kept = std::move(aliased);
      }
      messages.push_back(std::move(kept));
    }
  }
  OrderedJson context = OrderedJson::object();
  context["messages"] = std::move(messages);
  context["tools"] = markInputs ? mark(request.tools) : request.tools;
  context["documents"] = markInputs ? mark(request.documents) : request.documents;
  context["add_generation_prompt"] = request.addGenerationPrompt;
  for (const auto &[name, content] : specialTokens_)
    context[name] = content;
  if (request.extra.is_object())
    for (auto it = request.extra.begin(); it != request.extra.end(); ++it)
      context[it.key()] = markInputs ? mark(it.value()) : it.value();
  return context;
}

namespace {

Status checkMessages(const OrderedJson &messages) {
  if (!messages.is_array() || messages.empty())
    return Status::error("a chat needs at least one message");
  for (const OrderedJson &message : messages)
    if (!message.is_object())
      return Status::error("chat messages must be objects, got " + jsonExcerpt(message));
  return Status::ok();
}

} // namespace

StatusOr<std::string> ChatPrompt::render(const ChatRequest &request,
                                         const ChatTemplate::RenderOptions &options) const {
  DLM_RETURN_IF_ERROR(checkMessages(request.messages));
  return template_.render(context(request, /*markInputs=*/false), options);
}

// _encode_chat_piece: encoded after a "\n" that is removed again when the ids start with the
// newline's, so that SentencePiece tokenizers do not add their prefix space mid-chat.
std::vector<int32_t> ChatPrompt::encodePiece(std::string_view piece, bool asText) const {
  const std::vector<int32_t> newline = tokenizer_->encode("\n", false, asText);
  std::vector<int32_t> ids = tokenizer_->encode("\n" + std::string(piece), false, asText);
  if (ids.size() >= newline.size() && std::equal(newline.begin(), newline.end(), ids.begin()))
    return std::vector<int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(newline.size()),
                                ids.end());
  return tokenizer_->encode(piece, false, asText);
}

StatusOr<std::vector<int32_t>> ChatPrompt::encode(const ChatRequest &request,
                                                  const ChatTemplate::RenderOptions &options) const {
  if (!tokenizer_)
    return Status::error("the chat cannot be encoded: the artifact has no tokenizer");
  DLM_RETURN_IF_ERROR(checkMessages(request.messages));
  if (request.parseSpecialTokensInInput) {
    DLM_ASSIGN_OR_RETURN(std::string text,
                         template_.render(context(request, /*markInputs=*/false), options));
    return tokenizer_->encode(text, /*addSpecialTokens=*/false);
  }
  DLM_ASSIGN_OR_RETURN(std::string chat,
                       template_.render(context(request, /*markInputs=*/true), options));

  // encode_marked_chat: split at START token END (a marked token, any added token) and at lone
  // markers; the text before the first split is encoded plainly, the later pieces with
  // encodePiece.
  std::vector<int32_t> ids;
  size_t pieceStart = 0;
  bool first = true;
  auto flushText = [&](size_t end) {
    std::string_view text(chat.data() + pieceStart, end - pieceStart);
    if (first) {
      ids = tokenizer_->encode(text, /*addSpecialTokens=*/false);
      first = false;
    } else if (!text.empty()) {
      std::vector<int32_t> pieceIds = encodePiece(text, /*asText=*/false);
      ids.insert(ids.end(), pieceIds.begin(), pieceIds.end());
    }
  };
  size_t offset = 0;
  while (offset < chat.size()) {
    const bool atStart = chat.compare(offset, kMarkStart.size(), kMarkStart) == 0;
    const bool atEnd = chat.compare(offset, kMarkEnd.size(), kMarkEnd) == 0;
    if (!atStart && !atEnd) {
      ++offset;
      continue;
    }
    // START (token) END, trying the added tokens longest first as the regex alternation does.
    int64_t marked = -1;
    if (atStart) {
      const size_t inner = offset + kMarkStart.size();
      if (inner < chat.size())
        for (uint32_t i : addedByFirstByte_[static_cast<unsigned char>(chat[inner])]) {
          const std::string &content = addedTokens_[i];
          if (chat.compare(inner, content.size(), content) == 0 &&
              chat.compare(inner + content.size(), kMarkEnd.size(), kMarkEnd) == 0) {
            marked = i;
            break;
          }
        }
    }
    flushText(offset);
    if (marked < 0) { // a lone marker: dropped, but it separates the text around it
      offset += kMarkStart.size(); // both markers are 4 bytes
      pieceStart = offset;
      continue;
    }
    const std::string &content = addedTokens_[static_cast<size_t>(marked)];
    std::vector<int32_t> pieceIds = encodePiece(content, /*asText=*/true);
    const std::optional<int32_t> tokenId = tokenizer_->tokenToId(content);
    if (tokenId && std::find(pieceIds.begin(), pieceIds.end(), *tokenId) != pieceIds.end())
      return Status::error("cannot encode the control token '" + content +
                           "' in user text as text: the tokenizer produces it from plain text");
    ids.insert(ids.end(), pieceIds.begin(), pieceIds.end());
    offset += kMarkStart.size() + content.size() + kMarkEnd.size();
    pieceStart = offset;
  }
  flushText(chat.size());
  return ids;
}

} // namespace dlm
