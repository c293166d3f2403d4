#include "runtime/chat/ChatTemplate.h"

#include "runtime/chat/TemplateEvaluator.h"
#include "runtime/chat/TemplateSyntax.h"

#include <set>

namespace dlm {

ChatTemplate::ChatTemplate(std::shared_ptr<const std::vector<chat::Node>> nodes,
                           std::shared_ptr<const std::string> literalText)
    : nodes_(std::move(nodes)), literalText_(std::move(literalText)) {}

namespace {

// Jinja's TemplateData and string Const nodes, as a set (jinja2.nodes.find_all into a Python set:
// each distinct string once; the order does not matter to a substring search).
std::string literalTextOf(const std::vector<chat::Token> &tokens) {
  std::set<std::string> literals;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i].kind == chat::Token::Kind::Text) {
      literals.insert(tokens[i].text);
    } else if (tokens[i].kind == chat::Token::Kind::String) {
      std::string joined = tokens[i].text;
      while (i + 1 < tokens.size() && tokens[i + 1].kind == chat::Token::Kind::String)
        joined += tokens[++i].text;
      literals.insert(std::move(joined));
    }
  }
  std::string text;
  for (const std::string &literal : literals) {
    if (!text.empty())
      text += '\0';
    text += literal;
  }
  return text;
}

} // namespace

StatusOr<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  DLM_ASSIGN_OR_RETURN(std::vector<chat::Token> tokens, chat::lexTemplate(source));
  DLM_ASSIGN_OR_RETURN(chat::NodeList nodes, chat::parseTemplate(tokens));
  return ChatTemplate(std::make_shared<const chat::NodeList>(std::move(nodes)),
                      std::make_shared<const std::string>(literalTextOf(tokens)));
}

StatusOr<std::string> ChatTemplate::render(const nlohmann::ordered_json &context,
                                           const RenderOptions &options) const {
  if (!context.is_object())
    return Status::error("chat template context must be a JSON object");
  chat::BuiltinEnv env;
  env.now = options.now;
  return chat::renderTemplate(*nodes_, chat::Value::fromJson(context), env);
}

StatusOr<std::string> ChatTemplate::render(const nlohmann::json &context,
                                           const RenderOptions &options) const {
  return render(nlohmann::ordered_json::parse(context.dump()), options);
}

} // namespace dlm
