// Chat templates (the Jinja `chat_template` of a checkpoint's tokenizer_config.json or
// chat_template.jinja), rendered as transformers' apply_chat_template renders them: Jinja 2 with
// trim_blocks and lstrip_blocks, the loopcontrols extension, and transformers' globals
// raise_exception, strftime_now, namespace and dict and its tojson filter (json.dumps with
// ensure_ascii=False).
//
// Supported: text, {{ }} output, {# #} comments, the - and + whitespace modifiers; the tags if /
// elif / else, for (tuple targets, `if` filters, else, loop.index/index0/revindex/revindex0/
// first/last/length/previtem/nextitem), set (names, tuples, namespace attributes, block set),
// break, continue, and transformers' generation tag; literals (strings, numbers, lists, tuples,
// dicts), attribute and index access, slices (messages[1:], messages[::-1]), the operators
// and/or/not, comparisons, in / not in, + - * / // % ** ~, conditional expressions; the filters
// and tests listed in TemplateFilters.cpp and the string and dict methods in TemplateMethods.cpp.
// Anything else (macro, call, include, import, extends, block, with, raw, recursive loops,
// unknown filters, tests, functions or methods) fails parse() with a named error:
// "chat template line 3: not supported yet: the 'macro' tag".
//
// A ChatTemplate is immutable after parse() and safe to render from several threads.
#pragma once

#include "support/Status.h"

#include <nlohmann/json.hpp>

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace dlm {

namespace chat {
struct Node;
}

class ChatTemplate {
public:
  struct RenderOptions {
    // The clock of strftime_now (as datetime.now(), the local time when not set).
    std::optional<std::tm> now;
  };

  // Syntax errors and unsupported constructs: "chat template line N: ...".
  static StatusOr<ChatTemplate> parse(std::string_view source);

  // Renders with the template variables of `context`, as transformers passes them: messages
  // (role, content as a string or a list of {type, text, ...} parts, tool_calls, ...), tools and
  // documents (null when absent), add_generation_prompt, the tokenizer's special tokens
  // (bos_token, eos_token, ...) and extra variables such as enable_thinking. Objects keep their
  // key order (it shows in tojson), so pass an ordered_json for exact output. A
  // raise_exception(message) in the template fails with exactly `message`; other errors are
  // "chat template line N: ...".
  StatusOr<std::string> render(const nlohmann::ordered_json &context,
                               const RenderOptions &options) const;
  StatusOr<std::string> render(const nlohmann::ordered_json &context) const {
    return render(context, RenderOptions{});
  }
  StatusOr<std::string> render(const nlohmann::json &context,
                               const RenderOptions &options = {}) const;

  // The template's literal strings: the text between tags (after whitespace control) and every
  // string constant (adjacent constants joined, as Jinja's parser joins them), each once, joined
  // with NUL characters so that a search cannot match across two of them. transformers 5.23's
  // _get_template_literal_text; tokens found here are the template's control tokens
  // (runtime/chat/ChatPrompt.h).
  const std::string &literalText() const { return *literalText_; }

private:
  ChatTemplate(std::shared_ptr<const std::vector<chat::Node>> nodes,
               std::shared_ptr<const std::string> literalText);
  std::shared_ptr<const std::vector<chat::Node>> nodes_;
  std::shared_ptr<const std::string> literalText_;
};

} // namespace dlm
