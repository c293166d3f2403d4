#include "runtime/chat/TemplateValue.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace dlm::chat {

Value Value::undefined(std::string name) {
  Value v;
  v.s_ = std::move(name);
  return v;
}

Value Value::none() { return Value(Kind::None); }

Value Value::boolean(bool b) {
  Value v(Kind::Bool);
  v.b_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v(Kind::Int);
  v.i_ = i;
  return v;
}

Value Value::real(double d) {
  Value v(Kind::Float);
  v.d_ = d;
  return v;
}

Value Value::string(std::string s) {
  Value v(Kind::String);
  v.s_ = std::move(s);
  return v;
}

Value Value::list(ValueList items, bool tuple) {
  Value v(Kind::List);
  v.tuple_ = tuple;
  v.list_ = std::make_shared<const ValueList>(std::move(items));
  return v;
}

Value Value::dict(ValueDict items) {
  Value v(Kind::Dict);
  v.dict_ = std::make_shared<ValueDict>(std::move(items));
  return v;
}

Value Value::makeNamespace(ValueDict items) {
  Value v(Kind::Namespace);
  v.dict_ = std::make_shared<ValueDict>(std::move(items));
  return v;
}

Value Value::fromJson(const nlohmann::ordered_json &json) {
  using T = nlohmann::ordered_json::value_t;
  switch (json.type()) {
  case T::null:
    return none();
  case T::boolean:
    return boolean(json.get<bool>());
  case T::number_integer:
    return integer(json.get<int64_t>());
  case T::number_unsigned:
    return integer(static_cast<int64_t>(json.get<uint64_t>()));
  case T::number_float:
    return real(json.get<double>());
  case T::string:
    return string(json.get<std::string>());
  case T::array: {
    ValueList items;
    for (const auto &item : json)
      items.push_back(fromJson(item));
    return list(std::move(items));
  }
  case T::object: {
    ValueDict items;
    for (auto it = json.begin(); it != json.end(); ++it)
      items.emplace_back(it.key(), fromJson(it.value()));
    return dict(std::move(items));
  }
  default:
    return undefined();
  }
}

Value Value::member(const std::string &key) const {
  if (kind_ == Kind::Dict || kind_ == Kind::Namespace)
    for (const auto &[k, v] : *dict_)
      if (k == key)
        return v;
  return undefined(key);
}

bool Value::hasMember(const std::string &key) const {
  if (kind_ == Kind::Dict || kind_ == Kind::Namespace)
    for (const auto &entry : *dict_)
      if (entry.first == key)
        return true;
  return false;
}

void Value::setAttribute(const std::string &key, Value value) const {
  for (auto &entry : *dict_)
    if (entry.first == key) {
      entry.second = std::move(value);
      return;
    }
  dict_->emplace_back(key, std::move(value));
}

bool Value::truthy() const {
  switch (kind_) {
  case Kind::Undefined:
  case Kind::None:
    return false;
  case Kind::Bool:
    return b_;
  case Kind::Int:
    return i_ != 0;
  case Kind::Float:
    return d_ != 0;
  case Kind::String:
    return !s_.empty();
  case Kind::List:
    return !list_->empty();
  case Kind::Dict:
    return !dict_->empty();
  case Kind::Namespace:
    return true;
  }
  return false;
}

std::string Value::typeName() const {
  switch (kind_) {
  case Kind::Undefined:
    return "Undefined";
  case Kind::None:
    return "NoneType";
  case Kind::Bool:
    return "bool";
  case Kind::Int:
    return "int";
  case Kind::Float:
    return "float";
  case Kind::String:
    return "str";
  case Kind::List:
    return tuple_ ? "tuple" : "list";
  case Kind::Dict:
    return "dict";
  case Kind::Namespace:
    return "Namespace";
  }
  return "object";
}

// --- Python formatting --------------------------------------------------------------------------

std::string formatPythonFloat(double d) {
  if (std::isnan(d))
    return "nan";
  if (std::isinf(d))
    return d < 0 ? "-inf" : "inf";
  // Shortest digits that round-trip, as Python's repr.
  char buffer[64];
  int precision = 1;
  for (; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof buffer, "%.*e", precision - 1, d);
    if (std::strtod(buffer, nullptr) == d)
      break;
  }
  std::string text = buffer;
  bool negative = text[0] == '-';
  if (negative)
    text.erase(0, 1);
  size_t e = text.find('e');
  int exponent = std::atoi(text.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (text[i] != '.')
      digits += text[i];
  while (digits.size() > 1 && digits.back() == '0')
    digits.pop_back();
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1)
      out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp;
  }
  if (exponent < 0)
    return out + "0." + std::string(-exponent - 1, '0') + digits;
  if (static_cast<int>(digits.size()) <= exponent + 1)
    return out + digits + std::string(exponent + 1 - digits.size(), '0') + ".0";
  return out + digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
}

namespace {

std::string reprString(const std::string &s) {
  bool hasSingle = s.find('\'') != std::string::npos;
  bool hasDouble = s.find('"') != std::string::npos;
  char quote = hasSingle && !hasDouble ? '"' : '\'';
  std::string out(1, quote);
  for (uint32_t cp : decodeUtf8(s)) {
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!isPythonPrintable(cp)) {
      char hex[16];
      std::snprintf(hex, sizeof hex, cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x", cp);
      out += hex;
    } else {
      appendUtf8(out, cp);
    }
  }
  return out + quote;
}

std::string reprItems(const Value &value) {
  std::string out;
  if (value.isList()) {
    out = value.isTuple() ? "(" : "[";
    const auto &items = value.items();
    for (size_t i = 0; i < items.size(); ++i)
      out += (i ? ", " : "") + toPythonRepr(items[i]);
    if (value.isTuple() && items.size() == 1)
      out += ",";
    return out + (value.isTuple() ? ")" : "]");
  }
  out = "{";
  bool first = true;
  for (const auto &[key, item] : value.entries()) {
    out += (first ? "" : ", ") + reprString(key) + ": " + toPythonRepr(item);
    first = false;
  }
  return out + "}";
}

} // namespace

std::string toPythonRepr(const Value &value) {
  switch (value.kind()) {
  case Value::Kind::String:
    return reprString(value.asString());
  case Value::Kind::Undefined:
    return "Undefined";
  default:
    return toPythonStr(value);
  }
}

std::string toPythonStr(const Value &value) {
  switch (value.kind()) {
  case Value::Kind::Undefined:
    return "";
  case Value::Kind::None:
    return "None";
  case Value::Kind::Bool:
    return value.asBool() ? "True" : "False";
  case Value::Kind::Int:
    return std::to_string(value.asInt());
  case Value::Kind::Float:
    return formatPythonFloat(value.asDouble());
  case Value::Kind::String:
    return value.asString();
  case Value::Kind::List:
  case Value::Kind::Dict:
    return reprItems(value);
  case Value::Kind::Namespace:
    return "<Namespace " + reprItems(Value::dict(value.entries())) + ">";
  }
  return "";
}

// --- json.dumps ---------------------------------------------------------------------------------

namespace {

void appendJsonString(std::string &out, const std::string &s, bool ensureAscii) {
  out += '"';
  for (uint32_t cp : decodeUtf8(s)) {
    char hex[16];
    switch (cp) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\b':
      out += "\\b";
      break;
    case '\f':
      out += "\\f";
      break;
    default:
      if (cp < 0x20 || (ensureAscii && cp > 0x7e)) {
        if (cp >= 0x10000) {
          uint32_t v = cp - 0x10000;
          std::snprintf(hex, sizeof hex, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
        } else {
          std::snprintf(hex, sizeof hex, "\\u%04x", cp);
        }
        out += hex;
      } else {
        appendUtf8(out, cp);
      }
    }
  }
  out += '"';
}

void dumpJson(std::string &out, const Value &value, const JsonDumpOptions &options, int depth);

std::string jsonNewline(const JsonDumpOptions &options, int depth) {
  std::string out = "\n";
  for (int i = 0; i < depth; ++i)
    out += options.indent;
  return out;
}

void dumpJsonContainer(std::string &out, const Value &value, const JsonDumpOptions &options,
                       int depth) {
  std::string itemSeparator = options.hasSeparators ? options.itemSeparator
                              : options.hasIndent   ? ","
                                                    : ", ";
  std::string keySeparator = options.hasSeparators ? options.keySeparator : ": ";
  bool isList = value.isList();
  size_t count = isList ? value.items().size() : value.entries().size();
  out += isList ? '[' : '{';
  if (count == 0) {
    out += isList ? ']' : '}';
    return;
  }
  ValueDict entries;
  if (!isList) {
    entries = value.entries();
    if (options.sortKeys)
      std::sort(entries.begin(), entries.end(),
                       [](const auto &a, const auto &b) { return a.first < b.first; });
  }
  for (size_t i = 0; i < count; ++i) {
    if (i)
      out += itemSeparator;
    if (options.hasIndent)
      out += jsonNewline(options, depth + 1);
    if (isList) {
      dumpJson(out, value.items()[i], options, depth + 1);
    } else {
      appendJsonString(out, entries[i].first, options.ensureAscii);
      out += keySeparator;
      dumpJson(out, entries[i].second, options, depth + 1);
    }
  }
  if (options.hasIndent)
    out += jsonNewline(options, depth);
  out += isList ? ']' : '}';
}

void dumpJson(std::string &out, const Value &value, const JsonDumpOptions &options, int depth) {
  switch (value.kind()) {
  case Value::Kind::None:
    out += "null";
    return;
  case Value::Kind::Bool:
    out += value.asBool() ? "true" : "false";
    return;
  case Value::Kind::Int:
    out += std::to_string(value.asInt());
    return;
  case Value::Kind::Float: {
    double d = value.asDouble();
    out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity")
                                                 : formatPythonFloat(d);
    return;
  }
  case Value::Kind::String:
    appendJsonString(out, value.asString(), options.ensureAscii);
    return;
  case Value::Kind::List:
  case Value::Kind::Dict:
    dumpJsonContainer(out, value, options, depth);
    return;
  default:
    throw RenderError("Object of type " + value.typeName() + " is not JSON serializable");
  }
}

} // namespace

std::string toPythonJson(const Value &value, const JsonDumpOptions &options) {
  std::string out;
  dumpJson(out, value, options, 0);
  return out;
}

// --- comparisons --------------------------------------------------------------------------------

bool pythonEquals(const Value &a, const Value &b) {
  if (a.isNumber() && b.isNumber()) {
    if (a.kind() == Value::Kind::Float || b.kind() == Value::Kind::Float)
      return a.asDouble() == b.asDouble();
    return a.asInt() == b.asInt();
  }
  if (a.kind() != b.kind())
    return false;
  switch (a.kind()) {
  case Value::Kind::Undefined:
  case Value::Kind::None:
    return true;
  case Value::Kind::String:
    return a.asString() == b.asString();
  case Value::Kind::List: {
    const auto &x = a.items(), &y = b.items();
    if (x.size() != y.size() || a.isTuple() != b.isTuple())
      return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (!pythonEquals(x[i], y[i]))
        return false;
    return true;
  }
  case Value::Kind::Dict: {
    if (a.entries().size() != b.entries().size())
      return false;
    for (const auto &[key, item] : a.entries())
      if (!b.hasMember(key) || !pythonEquals(item, b.member(key)))
        return false;
    return true;
  }
  case Value::Kind::Namespace:
    return &a.entries() == &b.entries();
  default:
    return false;
  }
}

bool pythonLess(const Value &a, const Value &b) {
  if (a.isNumber() && b.isNumber()) {
    if (a.kind() == Value::Kind::Float || b.kind() == Value::Kind::Float)
      return a.asDouble() < b.asDouble();
    return a.asInt() < b.asInt();
  }
  if (a.isString() && b.isString())
    return a.asString() < b.asString(); // UTF-8 byte order is code point order
  if (a.isList() && b.isList()) {
    const auto &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!pythonEquals(x[i], y[i]))
        return pythonLess(x[i], y[i]);
    return x.size() < y.size();
  }
  throw RenderError("'<' not supported between instances of '" + a.typeName() + "' and '" +
                    b.typeName() + "'");
}

// --- UTF-8 --------------------------------------------------------------------------------------

std::vector<uint32_t> decodeUtf8(std::string_view text) {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    unsigned char c = text[i];
    int length = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (length == 0 || i + length > text.size()) {
      out.push_back(0xfffd);
      ++i;
      continue;
    }
    uint32_t cp = length == 1 ? c : c & (0x7f >> length);
    for (int k = 1; k < length; ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3f);
    out.push_back(cp);
    i += length;
  }
  return out;
}

void appendUtf8(std::string &out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

std::string encodeUtf8(const std::vector<uint32_t> &codePoints) {
  std::string out;
  for (uint32_t cp : codePoints)
    appendUtf8(out, cp);
  return out;
}

bool isPythonSpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

} // namespace dlm::chat
