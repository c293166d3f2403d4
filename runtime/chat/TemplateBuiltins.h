// The filters, tests, global functions and methods of values that chat templates call, as
// Jinja 3.1 and Python define them, with transformers' overrides (tojson, raise_exception,
// strftime_now, namespace, dict).
#pragma once

#include "runtime/chat/TemplateValue.h"

#include <ctime>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dlm::chat {

struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;

  // The argument at `position` or named `name`; null when not passed.
  const Value *get(size_t position, const char *name) const;
};

struct BuiltinEnv {
  std::optional<std::tm> now; // strftime_now's clock; the local time when not set
};

// Throws RenderError, e.g. on an undefined operand the operation cannot use.
Value applyFilter(const std::string &name, const Value &operand, const CallArgs &args);
bool applyTest(const std::string &name, const Value &operand, const CallArgs &args);
Value callMethod(const Value &object, const std::string &name, const CallArgs &args);
Value callFunction(const std::string &name, const CallArgs &args, const BuiltinEnv &env);

// Raises Jinja's UndefinedError for an undefined value used where a value is needed.
[[noreturn]] void failUndefined(const Value &value);
// Python's str.strip / lstrip / rstrip; `chars` null for white space.
std::string stripString(const std::string &text, const Value *chars, bool left, bool right);

} // namespace dlm::chat
