#include "runtime/chat/ChatTemplate.h"

#include "runtime/chat/TemplateEvaluator.h"
#include "runtime/chat/TemplateSyntax.h"

namespace dlm {

ChatTemplate::ChatTemplate(std::shared_ptr<const std::vector<chat::Node>> nodes)
    : nodes_(std::move(nodes)) {}

StatusOr<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  DLM_ASSIGN_OR_RETURN(std::vector<chat::Token> tokens, chat::lexTemplate(source));
  DLM_ASSIGN_OR_RETURN(chat::NodeList nodes, chat::parseTemplate(tokens));
  return ChatTemplate(std::make_shared<const chat::NodeList>(std::move(nodes)));
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
