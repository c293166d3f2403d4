// Renders a parsed chat template: Jinja's scoping (a for loop's body is a new scope for each
// iteration; if does not open one), Python's semantics for operators and values, and Jinja's
// default Undefined (prints as "", iterates as empty, fails on attribute access and arithmetic).
#pragma once

#include "runtime/chat/TemplateBuiltins.h"
#include "runtime/chat/TemplateSyntax.h"

namespace dlm::chat {

// `context` is a dict of the template's variables.
StatusOr<std::string> renderTemplate(const NodeList &nodes, const Value &context,
                                     const BuiltinEnv &env);

} // namespace dlm::chat
