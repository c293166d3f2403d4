// Jinja 3.1's built-in filters and tests that chat templates use, and transformers' tojson.
#include "runtime/chat/TemplateBuiltins.h"
#include "runtime/chat/TemplateSyntax.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <cstring>
#include <set>

namespace dlm::chat {
namespace {

// Items of an iterable value as Jinja iterates them: a dict's keys, a string's characters.
ValueList iterate(const Value &value) {
  switch (value.kind()) {
  case Value::Kind::Undefined:
    return {};
  case Value::Kind::List:
    return value.items();
  case Value::Kind::Dict: {
    ValueList keys;
    for (const auto &entry : value.entries())
      keys.push_back(Value::string(entry.first));
    return keys;
  }
  case Value::Kind::String: {
    ValueList chars;
    for (uint32_t cp : decodeUtf8(value.asString())) {
      std::string c;
      appendUtf8(c, cp);
      chars.push_back(Value::string(c));
    }
    return chars;
  }
  default:
    throw RenderError("'" + value.typeName() + "' object is not iterable");
  }
}

int64_t pythonLength(const Value &value) {
  switch (value.kind()) {
  case Value::Kind::Undefined:
    return 0;
  case Value::Kind::String:
    return static_cast<int64_t>(decodeUtf8(value.asString()).size());
  case Value::Kind::List:
    return static_cast<int64_t>(value.items().size());
  case Value::Kind::Dict:
    return static_cast<int64_t>(value.entries().size());
  default:
    throw RenderError("object of type '" + value.typeName() + "' has no len()");
  }
}

// Jinja's environment.getattr for attribute names given to filters ("a.b" walks a path).
Value attributePath(const Value &item, const std::string &path) {
  Value current = item;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (current.isUndefined())
      failUndefined(current);
    current = current.member(part);
    if (dot == std::string::npos)
      return current;
    start = dot + 1;
  }
}

JsonDumpOptions jsonOptions(const CallArgs &args) {
  // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
  JsonDumpOptions options;
  if (const Value *v = args.get(0, "ensure_ascii"))
    options.ensureAscii = v->truthy();
  if (const Value *v = args.get(1, "indent"); v && !v->isNone()) {
    options.hasIndent = true;
    options.indent = v->isString() ? v->asString() : std::string(std::max<int64_t>(0, v->asInt()), ' ');
  }
  if (const Value *v = args.get(2, "separators"); v && !v->isNone()) {
    if (!v->isList() || v->items().size() != 2 || !v->items()[0].isString() || !v->items()[1].isString())
      throw RenderError("tojson: separators must be a pair of strings");
    options.hasSeparators = true;
    options.itemSeparator = v->items()[0].asString();
    options.keySeparator = v->items()[1].asString();
  }
  if (const Value *v = args.get(3, "sort_keys"))
    options.sortKeys = v->truthy();
  return options;
}

std::string jinjaTitle(const std::string &text) {
  // Jinja's do_title: each word (after '-', white space, '(', '{', '[' or '<') as
  // word[0].upper() + word[1:].lower().
  std::string out, word;
  auto flush = [&] {
    std::vector<uint32_t> cps = decodeUtf8(word);
    if (!cps.empty())
      out += unicodeCase(encodeUtf8({cps[0]}), true) +
             unicodeCase(encodeUtf8(std::vector<uint32_t>(cps.begin() + 1, cps.end())), false);
    word.clear();
  };
  for (uint32_t cp : decodeUtf8(text)) {
    if (isPythonSpace(cp) || (cp > 0 && cp < 0x80 && std::strchr("-({[<", static_cast<char>(cp)))) {
      flush();
      appendUtf8(out, cp);
    } else {
      appendUtf8(word, cp);
    }
  }
  flush();
  return out;
}

Value selectItems(const Value &sequence, const CallArgs &args, bool byAttribute, bool keep) {
  ValueList out;
  size_t testPosition = byAttribute ? 1 : 0;
  std::string attribute;
  if (byAttribute) {
    if (args.args.empty() || !args.args[0].isString())
      throw RenderError("selectattr/rejectattr need an attribute name");
    attribute = args.args[0].asString();
  }
  CallArgs testArgs;
  for (size_t i = testPosition + 1; i < args.args.size(); ++i)
    testArgs.args.push_back(args.args[i]);
  for (const Value &item : iterate(sequence)) {
    Value subject = byAttribute ? attributePath(item, attribute) : item;
    bool passed;
    if (args.args.size() > testPosition) {
      if (!args.args[testPosition].isString())
        throw RenderError("a test name must be a string");
      passed = applyTest(args.args[testPosition].asString(), subject, testArgs);
    } else {
      passed = subject.truthy();
    }
    if (passed == keep)
      out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value mapItems(const Value &sequence, const CallArgs &args) {
  ValueList out;
  if (const Value *attribute = args.get(99, "attribute")) {
    const Value *fallback = args.get(99, "default");
    for (const Value &item : iterate(sequence)) {
      Value v = attributePath(item, toPythonStr(*attribute));
      out.push_back(v.isUndefined() && fallback ? *fallback : v);
    }
    return Value::list(std::move(out));
  }
  if (args.args.empty() || !args.args[0].isString())
    throw RenderError("map needs a filter name or attribute=");
  std::string filter = args.args[0].asString();
  if (!isSupportedFilter(filter))
    throw RenderError("not supported yet: the '" + filter + "' filter");
  CallArgs rest{ValueList(args.args.begin() + 1, args.args.end()), {}};
  for (const Value &item : iterate(sequence))
    out.push_back(applyFilter(filter, item, rest));
  return Value::list(std::move(out));
}

Value firstOrLast(const Value &value, bool first) {
  ValueList items = iterate(value);
  if (items.empty())
    return Value::undefined(std::string("No ") + (first ? "first" : "last") +
                            " item, sequence was empty.");
  return first ? items.front() : items.back();
}

// int(real) as Jinja's int filter takes it: NaN is not a number (the default), an infinity or a
// value past 64 bits an error (Python raises OverflowError for inf; its ints have no bound, ours
// do, and the cast would be undefined).
Value truncatedReal(double real, const Value &otherwise) {
  if (std::isnan(real))
    return otherwise;
  if (!(std::fabs(real) < 9.2e18))
    throw RenderError("not supported yet: int(" + toPythonStr(Value::real(real)) +
                      ") is beyond 64-bit integers");
  return Value::integer(static_cast<int64_t>(real));
}

Value toNumber(const Value &value, const CallArgs &args, bool integer) {
  const Value *fallback = args.get(0, "default");
  Value otherwise = fallback ? *fallback : integer ? Value::integer(0) : Value::real(0);
  if (value.isNumber()) {
    if (!integer)
      return Value::real(value.asDouble());
    return value.kind() == Value::Kind::Float ? truncatedReal(value.asDouble(), otherwise)
                                              : Value::integer(value.asInt());
  }
  if (!value.isString())
    return otherwise;
  std::string text = stripString(value.asString(), nullptr, true, true);
  try {
    size_t used = 0;
    if (integer) {
      int64_t i = std::stoll(text, &used, 10);
      if (used == text.size())
        return Value::integer(i);
      double d = std::stod(text, &used); // Jinja falls back to int(float(value))
      return used == text.size() ? truncatedReal(d, otherwise) : otherwise;
    }
    double d = std::stod(text, &used);
    return used == text.size() ? Value::real(d) : otherwise;
  } catch (const std::exception &) {
    return otherwise;
  }
}

std::string joinItems(const Value &value, const CallArgs &args) {
  std::string separator = args.get(0, "d") ? toPythonStr(*args.get(0, "d")) : "";
  const Value *attribute = args.get(1, "attribute");
  std::string out;
  bool first = true;
  for (const Value &item : iterate(value)) {
    out += (first ? "" : separator) +
           toPythonStr(attribute ? attributePath(item, toPythonStr(*attribute)) : item);
    first = false;
  }
  return out;
}

Value reversed(const Value &value) {
  if (value.isString()) {
    std::vector<uint32_t> cps = decodeUtf8(value.asString());
    std::reverse(cps.begin(), cps.end());
    return Value::string(encodeUtf8(cps));
  }
  ValueList items = iterate(value);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value itemsOf(const Value &value) {
  if (value.isUndefined())
    return Value::list({});
  if (!value.isDict())
    throw RenderError("Can only get item pairs from a mapping.");
  ValueList out;
  for (const auto &[key, item] : value.entries())
    out.push_back(Value::list({Value::string(key), item}, /*tuple=*/true));
  return Value::list(std::move(out));
}

Value defaultFilter(const Value &value, const CallArgs &args) {
  const Value *fallback = args.get(0, "default_value");
  const Value *boolean = args.get(1, "boolean");
  bool useDefault = value.isUndefined() || (boolean && boolean->truthy() && !value.truthy());
  return useDefault ? (fallback ? *fallback : Value::string("")) : value;
}

Value absolute(const Value &value) {
  if (value.kind() == Value::Kind::Float)
    return Value::real(std::fabs(value.asDouble()));
  if (value.isNumber()) {
    if (value.asInt() == INT64_MIN) // its absolute value is one past int64
      throw RenderError("not supported yet: abs(" + std::to_string(INT64_MIN) +
                        ") is beyond 64-bit integers");
    return Value::integer(std::llabs(value.asInt()));
  }
  throw RenderError("bad operand type for abs(): '" + value.typeName() + "'");
}

using FilterFunction = std::function<Value(const Value &, const CallArgs &)>;

const std::map<std::string, FilterFunction> &filters() {
  static const std::map<std::string, FilterFunction> table = {
      {"abs", [](const Value &v, const CallArgs &) { return absolute(v); }},
      {"capitalize", [](const Value &v, const CallArgs &) {
         return Value::string(pythonCapitalize(toPythonStr(v)));
       }},
      {"count", [](const Value &v, const CallArgs &) { return Value::integer(pythonLength(v)); }},
      {"length", [](const Value &v, const CallArgs &) { return Value::integer(pythonLength(v)); }},
      {"d", defaultFilter},
      {"default", defaultFilter},
      {"first", [](const Value &v, const CallArgs &) { return firstOrLast(v, true); }},
      {"last", [](const Value &v, const CallArgs &) { return firstOrLast(v, false); }},
      {"float", [](const Value &v, const CallArgs &a) { return toNumber(v, a, false); }},
      {"int", [](const Value &v, const CallArgs &a) { return toNumber(v, a, true); }},
      {"items", [](const Value &v, const CallArgs &) { return itemsOf(v); }},
      {"join", [](const Value &v, const CallArgs &a) { return Value::string(joinItems(v, a)); }},
      {"list", [](const Value &v, const CallArgs &) { return Value::list(iterate(v)); }},
      {"lower", [](const Value &v, const CallArgs &) {
         return callMethod(Value::string(toPythonStr(v)), "lower", {});
       }},
      {"upper", [](const Value &v, const CallArgs &) {
         return callMethod(Value::string(toPythonStr(v)), "upper", {});
       }},
      {"title", [](const Value &v, const CallArgs &) { return Value::string(jinjaTitle(toPythonStr(v))); }},
      {"map", mapItems},
      {"select", [](const Value &v, const CallArgs &a) { return selectItems(v, a, false, true); }},
      {"reject", [](const Value &v, const CallArgs &a) { return selectItems(v, a, false, false); }},
      {"selectattr", [](const Value &v, const CallArgs &a) { return selectItems(v, a, true, true); }},
      {"rejectattr", [](const Value &v, const CallArgs &a) { return selectItems(v, a, true, false); }},
      {"replace", [](const Value &v, const CallArgs &a) {
         return callMethod(Value::string(toPythonStr(v)), "replace", a);
       }},
      {"reverse", [](const Value &v, const CallArgs &) { return reversed(v); }},
      {"safe", [](const Value &v, const CallArgs &) { return v; }},
      {"string", [](const Value &v, const CallArgs &) { return Value::string(toPythonStr(v)); }},
      {"tojson", [](const Value &v, const CallArgs &a) { return Value::string(toPythonJson(v, jsonOptions(a))); }},
      {"trim", [](const Value &v, const CallArgs &a) {
         return Value::string(stripString(toPythonStr(v), a.get(0, "chars"), true, true));
       }},
  };
  return table;
}

bool numberTest(const Value &v, const CallArgs &a, const std::function<bool(const Value &, const Value &)> &f) {
  const Value *other = a.get(0, "other");
  if (!other)
    throw RenderError("the test needs an argument");
  return f(v, *other);
}

using TestFunction = std::function<bool(const Value &, const CallArgs &)>;

const std::map<std::string, TestFunction> &tests() {
  using K = Value::Kind;
  auto eq = [](const Value &v, const CallArgs &a) { return numberTest(v, a, pythonEquals); };
  auto ne = [](const Value &v, const CallArgs &a) {
    return numberTest(v, a, [](const Value &x, const Value &y) { return !pythonEquals(x, y); });
  };
  auto lt = [](const Value &v, const CallArgs &a) { return numberTest(v, a, pythonLess); };
  auto gt = [](const Value &v, const CallArgs &a) {
    return numberTest(v, a, [](const Value &x, const Value &y) { return pythonLess(y, x); });
  };
  auto le = [](const Value &v, const CallArgs &a) {
    return numberTest(v, a, [](const Value &x, const Value &y) { return !pythonLess(y, x); });
  };
  auto ge = [](const Value &v, const CallArgs &a) {
    return numberTest(v, a, [](const Value &x, const Value &y) { return !pythonLess(x, y); });
  };
  static const std::map<std::string, TestFunction> table = {
      {"defined", [](const Value &v, const CallArgs &) { return !v.isUndefined(); }},
      {"undefined", [](const Value &v, const CallArgs &) { return v.isUndefined(); }},
      {"none", [](const Value &v, const CallArgs &) { return v.isNone(); }},
      {"string", [](const Value &v, const CallArgs &) { return v.isString(); }},
      {"mapping", [](const Value &v, const CallArgs &) { return v.isDict(); }},
      {"iterable", [](const Value &v, const CallArgs &) {
         return v.isUndefined() || v.isString() || v.isList() || v.isDict();
       }},
      {"sequence", [](const Value &v, const CallArgs &) {
         return v.isUndefined() || v.isString() || v.isList() || v.isDict();
       }},
      {"number", [](const Value &v, const CallArgs &) { return v.isNumber(); }},
      {"integer", [](const Value &v, const CallArgs &) { return v.kind() == K::Int; }},
      {"float", [](const Value &v, const CallArgs &) { return v.kind() == K::Float; }},
      {"boolean", [](const Value &v, const CallArgs &) { return v.kind() == K::Bool; }},
      {"true", [](const Value &v, const CallArgs &) { return v.kind() == K::Bool && v.asBool(); }},
      {"false", [](const Value &v, const CallArgs &) { return v.kind() == K::Bool && !v.asBool(); }},
      {"even", [](const Value &v, const CallArgs &) { return v.isNumber() && v.asInt() % 2 == 0; }},
      {"odd", [](const Value &v, const CallArgs &) { return v.isNumber() && v.asInt() % 2 != 0; }},
      {"divisibleby", [](const Value &v, const CallArgs &a) {
         const Value *n = a.get(0, "num");
         if (!n || !n->isNumber() || n->asInt() == 0)
           throw RenderError("divisibleby needs a non-zero number");
         // INT64_MIN % -1 traps on x86; everything is divisible by -1.
         return n->asInt() == -1 || v.asInt() % n->asInt() == 0;
       }},
      {"eq", eq}, {"equalto", eq}, {"==", eq}, {"ne", ne}, {"!=", ne},
      {"lt", lt}, {"lessthan", lt}, {"<", lt}, {"gt", gt}, {"greaterthan", gt}, {">", gt},
      {"le", le}, {"<=", le}, {"ge", ge}, {">=", ge},
      {"in", [](const Value &v, const CallArgs &a) {
         const Value *seq = a.get(0, "seq");
         if (!seq)
           throw RenderError("the 'in' test needs an argument");
         if (seq->isString())
           return v.isString() && seq->asString().find(v.asString()) != std::string::npos;
         for (const Value &item : iterate(*seq))
           if (pythonEquals(item, v))
             return true;
         return false;
       }},
      {"sameas", [](const Value &v, const CallArgs &a) {
         const Value *other = a.get(0, "other");
         return other && v.kind() == other->kind() &&
                (v.isNone() || (v.kind() == K::Bool && v.asBool() == other->asBool()));
       }},
      {"lower", [](const Value &v, const CallArgs &) {
         return v.isString() && callMethod(v, "lower", {}).asString() == v.asString();
       }},
      {"upper", [](const Value &v, const CallArgs &) {
         return v.isString() && callMethod(v, "upper", {}).asString() == v.asString();
       }},
  };
  return table;
}

} // namespace

bool isSupportedFilter(const std::string &name) { return filters().count(name) > 0; }

bool isSupportedTest(const std::string &name) { return tests().count(name) > 0; }

Value applyFilter(const std::string &name, const Value &operand, const CallArgs &args) {
  return filters().at(name)(operand, args);
}

bool applyTest(const std::string &name, const Value &operand, const CallArgs &args) {
  auto it = tests().find(name);
  if (it == tests().end())
    throw RenderError("not supported yet: the '" + name + "' test");
  return it->second(operand, args);
}

} // namespace dlm::chat
