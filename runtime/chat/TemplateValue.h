// Values a chat template computes with: the JSON types of the context (strings, numbers, booleans,
// null, lists, objects in insertion order) plus Jinja's `undefined` and `namespace` objects.
// Lists and objects are immutable once built (transformers renders in Jinja's immutable sandbox)
// and shared; a namespace is the one mutable object, shared by reference as in Python.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dlm::chat {

// A template error while rendering. Internal to the renderer; ChatTemplate::render turns it into
// a Status. `raised` marks raise_exception(message), whose message is passed on unchanged.
struct RenderError : std::runtime_error {
  explicit RenderError(const std::string &message, bool raised = false)
      : std::runtime_error(message), raised(raised) {}
  bool raised;
};

class Value;
using ValueList = std::vector<Value>;
using ValueDict = std::vector<std::pair<std::string, Value>>; // insertion order, as in Python

class Value {
public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace };

  Value() = default; // undefined
  static Value undefined(std::string name = {});
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value real(double d);
  static Value string(std::string s);
  static Value list(ValueList items, bool tuple = false);
  static Value dict(ValueDict items);
  static Value makeNamespace(ValueDict items);
  static Value fromJson(const nlohmann::ordered_json &json);

  Kind kind() const { return kind_; }
  bool isUndefined() const { return kind_ == Kind::Undefined; }
  bool isNone() const { return kind_ == Kind::None; }
  bool isString() const { return kind_ == Kind::String; }
  bool isList() const { return kind_ == Kind::List; }
  bool isDict() const { return kind_ == Kind::Dict; }
  bool isNamespace() const { return kind_ == Kind::Namespace; }
  bool isNumber() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool isTuple() const { return tuple_; }

  bool asBool() const { return b_; }
  int64_t asInt() const { return kind_ == Kind::Bool ? (b_ ? 1 : 0) : i_; }
  double asDouble() const { return kind_ == Kind::Float ? d_ : static_cast<double>(asInt()); }
  const std::string &asString() const { return s_; }
  const ValueList &items() const { return *list_; }
  const ValueDict &entries() const { return *dict_; }
  // For undefined values: the name or attribute that was missing, for error messages.
  const std::string &undefinedHint() const { return s_; }

  // Member of a dict or namespace by key; undefined when absent.
  Value member(const std::string &key) const;
  bool hasMember(const std::string &key) const;
  // Sets an attribute of a namespace (the namespace is shared, so every copy sees it).
  void setAttribute(const std::string &key, Value value) const;

  bool truthy() const;
  // Python's type name for error messages: 'str', 'list', 'dict', ...
  std::string typeName() const;

private:
  explicit Value(Kind kind) : kind_(kind) {}

  Kind kind_ = Kind::Undefined;
  bool b_ = false;
  bool tuple_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::string s_;
  std::shared_ptr<const ValueList> list_;
  std::shared_ptr<ValueDict> dict_; // const for Dict; mutable only for Namespace
};

// Python's str(value) as Jinja prints it ({{ x }}): undefined prints as "".
std::string toPythonStr(const Value &value);
// Python's repr(value).
std::string toPythonRepr(const Value &value);
// Python's repr(float).
std::string formatPythonFloat(double d);

// json.dumps(value, ensure_ascii, indent, separators, sort_keys) as transformers' tojson filter
// calls it. indent: empty for None; otherwise the string each level is indented by.
struct JsonDumpOptions {
  bool ensureAscii = false;
  bool hasIndent = false;
  std::string indent;
  bool hasSeparators = false;
  std::string itemSeparator;
  std::string keySeparator;
  bool sortKeys = false;
};
std::string toPythonJson(const Value &value, const JsonDumpOptions &options);

// Python ==, and < for ordering comparisons (throws RenderError on unorderable types).
bool pythonEquals(const Value &a, const Value &b);
bool pythonLess(const Value &a, const Value &b);

// UTF-8 helpers: code points of a string, and a string from code points.
std::vector<uint32_t> decodeUtf8(std::string_view text);
std::string encodeUtf8(const std::vector<uint32_t> &codePoints);
void appendUtf8(std::string &out, uint32_t codePoint);
bool isPythonSpace(uint32_t codePoint);

// Python's Unicode string functions (TemplateUnicode.cpp, through ICU): str.upper / str.lower
// (full case mappings), str.title, str.capitalize, and str.isprintable for one character.
std::string unicodeCase(std::string_view text, bool upper);
std::string pythonTitle(std::string_view text);
std::string pythonCapitalize(std::string_view text);
bool isPythonPrintable(uint32_t codePoint);

} // namespace dlm::chat
