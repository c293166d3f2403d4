// Python's string and dict methods that chat templates call, and the global functions
// transformers gives its chat templates.
#include "runtime/chat/TemplateBuiltins.h"
#include "runtime/chat/TemplateSyntax.h"

#include <algorithm>
#include <chrono>
#include <set>

namespace dlm::chat {

const Value *CallArgs::get(size_t position, const char *name) const {
  if (position < args.size())
    return &args[position];
  for (const auto &[key, value] : kwargs)
    if (key == name)
      return &value;
  return nullptr;
}

void failUndefined(const Value &value) {
  throw RenderError(value.undefinedHint().empty() ? "undefined value" : value.undefinedHint());
}

namespace {

const std::set<std::string> kStringMethods = {
    "startswith", "endswith", "split",   "rsplit", "strip", "lstrip", "rstrip", "upper",
    "lower",      "title",    "capitalize", "replace", "find", "count", "join", "splitlines"};
const std::set<std::string> kDictMethods = {"items", "keys", "values", "get"};
const std::set<std::string> kFunctions = {"raise_exception", "namespace", "range", "dict",
                                          "strftime_now"};

std::string requireString(const Value *value, const char *method, const char *what) {
  if (!value || !value->isString())
    throw RenderError(std::string(method) + "() " + what + " must be a string, not " +
                      (value ? value->typeName() : std::string("missing")));
  return value->asString();
}

int64_t optionalInt(const Value *value, int64_t fallback) {
  if (!value || value->isNone())
    return fallback;
  if (value->kind() != Value::Kind::Int && value->kind() != Value::Kind::Bool)
    throw RenderError("an integer is required, not " + value->typeName());
  return value->asInt();
}

bool affixMatches(const std::string &text, const Value &affix, bool prefix, const char *method) {
  if (affix.isList()) {
    for (const Value &item : affix.items())
      if (affixMatches(text, item, prefix, method))
        return true;
    return false;
  }
  std::string a = requireString(&affix, method, "argument");
  if (a.size() > text.size())
    return false;
  return prefix ? text.compare(0, a.size(), a) == 0
                : text.compare(text.size() - a.size(), a.size(), a) == 0;
}

std::vector<std::string> splitOnWhitespace(const std::string &text, int64_t maxSplit, bool fromRight) {
  std::vector<uint32_t> cps = decodeUtf8(text);
  std::vector<std::string> parts;
  if (fromRight) {
    // rsplit(): split from the right, then reverse.
    std::reverse(cps.begin(), cps.end());
  }
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && isPythonSpace(cps[i]))
      ++i;
    if (i == cps.size())
      break;
    size_t start = i;
    if (maxSplit >= 0 && static_cast<int64_t>(parts.size()) == maxSplit) {
      size_t end = cps.size();
      while (end > start && isPythonSpace(cps[end - 1]))
        --end;
      i = end;
    } else {
      while (i < cps.size() && !isPythonSpace(cps[i]))
        ++i;
    }
    std::vector<uint32_t> word(cps.begin() + start, cps.begin() + i);
    if (fromRight)
      std::reverse(word.begin(), word.end());
    parts.push_back(encodeUtf8(word));
  }
  if (fromRight)
    std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<std::string> splitOnSeparator(const std::string &text, const std::string &sep,
                                          int64_t maxSplit, bool fromRight) {
  if (sep.empty())
    throw RenderError("empty separator");
  std::vector<std::string> parts;
  if (!fromRight) {
    size_t start = 0, found;
    while ((maxSplit < 0 || static_cast<int64_t>(parts.size()) < maxSplit) &&
           (found = text.find(sep, start)) != std::string::npos) {
      parts.push_back(text.substr(start, found - start));
      start = found + sep.size();
    }
    parts.push_back(text.substr(start));
    return parts;
  }
  size_t end = text.size();
  while (maxSplit < 0 || static_cast<int64_t>(parts.size()) < maxSplit) {
    if (end < sep.size())
      break;
    size_t found = text.rfind(sep, end - sep.size());
    if (found == std::string::npos)
      break;
    parts.push_back(text.substr(found + sep.size(), end - found - sep.size()));
    end = found;
  }
  parts.push_back(text.substr(0, end));
  std::reverse(parts.begin(), parts.end());
  return parts;
}

Value stringList(const std::vector<std::string> &parts) {
  ValueList items;
  for (const std::string &part : parts)
    items.push_back(Value::string(part));
  return Value::list(std::move(items));
}

std::string replaceAll(const std::string &text, const std::string &from, const std::string &to,
                       int64_t count) {
  std::string out;
  size_t start = 0;
  int64_t done = 0;
  if (from.empty()) {
    // Python inserts `to` between every character (and at both ends).
    std::vector<uint32_t> cps = decodeUtf8(text);
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done++ < count)
        out += to;
      if (i < cps.size())
        appendUtf8(out, cps[i]);
    }
    return out;
  }
  size_t found;
  while ((count < 0 || done < count) && (found = text.find(from, start)) != std::string::npos) {
    out += text.substr(start, found - start) + to;
    start = found + from.size();
    ++done;
  }
  return out + text.substr(start);
}

int64_t codePointIndex(const std::string &text, size_t byteOffset) {
  return static_cast<int64_t>(decodeUtf8(std::string_view(text).substr(0, byteOffset)).size());
}

Value callStringMethod(const std::string &s, const std::string &name, const CallArgs &args) {
  if (name == "startswith" || name == "endswith") {
    const Value *affix = args.get(0, "prefix");
    if (!affix)
      throw RenderError(name + "() takes at least 1 argument");
    return Value::boolean(affixMatches(s, *affix, name == "startswith", name.c_str()));
  }
  if (name == "split" || name == "rsplit") {
    const Value *sep = args.get(0, "sep");
    int64_t maxSplit = optionalInt(args.get(1, "maxsplit"), -1);
    bool fromRight = name == "rsplit";
    if (!sep || sep->isNone())
      return stringList(splitOnWhitespace(s, maxSplit, fromRight));
    return stringList(splitOnSeparator(s, requireString(sep, name.c_str(), "separator"), maxSplit, fromRight));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return Value::string(stripString(s, args.get(0, "chars"), name != "rstrip", name != "lstrip"));
  if (name == "upper" || name == "lower")
    return Value::string(unicodeCase(s, name == "upper"));
  if (name == "title")
    return Value::string(pythonTitle(s));
  if (name == "capitalize")
    return Value::string(pythonCapitalize(s));
  if (name == "replace")
    return Value::string(replaceAll(s, requireString(args.get(0, "old"), "replace", "argument 1"),
                                    requireString(args.get(1, "new"), "replace", "argument 2"),
                                    optionalInt(args.get(2, "count"), -1)));
  if (name == "find") {
    size_t found = s.find(requireString(args.get(0, "sub"), "find", "argument"));
    return Value::integer(found == std::string::npos ? -1 : codePointIndex(s, found));
  }
  if (name == "count") {
    std::string sub = requireString(args.get(0, "sub"), "count", "argument");
    if (sub.empty())
      return Value::integer(static_cast<int64_t>(decodeUtf8(s).size()) + 1);
    int64_t n = 0;
    for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size()))
      ++n;
    return Value::integer(n);
  }
  if (name == "join") {
    const Value *items = args.get(0, "iterable");
    if (!items || !items->isList())
      throw RenderError("join() expects a list of strings");
    std::string out;
    for (size_t i = 0; i < items->items().size(); ++i)
      out += (i ? s : "") + requireString(&items->items()[i], "join", "item");
    return Value::string(out);
  }
  // splitlines
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] == '\n' || s[i] == '\r') {
      lines.push_back(s.substr(start, i - start));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n')
        ++i;
      start = i + 1;
    }
  if (start < s.size())
    lines.push_back(s.substr(start));
  return stringList(lines);
}

Value callDictMethod(const Value &object, const std::string &name, const CallArgs &args) {
  ValueList out;
  if (name == "get") {
    const Value *key = args.get(0, "key");
    if (key && key->isString() && object.hasMember(key->asString()))
      return object.member(key->asString());
    const Value *fallback = args.get(1, "default");
    return fallback ? *fallback : Value::none();
  }
  for (const auto &[key, value] : object.entries()) {
    if (name == "keys")
      out.push_back(Value::string(key));
    else if (name == "values")
      out.push_back(value);
    else
      out.push_back(Value::list({Value::string(key), value}, /*tuple=*/true));
  }
  return Value::list(std::move(out));
}

Value rangeFunction(const CallArgs &args) {
  if (args.args.empty() || args.args.size() > 3)
    throw RenderError("range expected 1 to 3 arguments");
  int64_t start = 0, stop, step = 1;
  if (args.args.size() == 1) {
    stop = optionalInt(&args.args[0], 0);
  } else {
    start = optionalInt(&args.args[0], 0);
    stop = optionalInt(&args.args[1], 0);
    if (args.args.size() == 3)
      step = optionalInt(&args.args[2], 1);
  }
  if (step == 0)
    throw RenderError("range() arg 3 must not be zero");
  ValueList out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    out.push_back(Value::integer(i));
    if (out.size() > 100000) // the sandbox's MAX_RANGE
      throw RenderError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    if (__builtin_add_overflow(i, step, &i)) // the next one is past int64, so past `stop`
      break;
  }
  return Value::list(std::move(out));
}

ValueDict keywordDict(const CallArgs &args, const char *function) {
  ValueDict entries;
  if (!args.args.empty()) {
    if (args.args.size() > 1 || !args.args[0].isDict())
      throw RenderError(std::string(function) + "() takes a mapping and keyword arguments");
    entries = args.args[0].entries();
  }
  for (const auto &[key, value] : args.kwargs) {
    const std::string &name = key;
    auto it = std::find_if(entries.begin(), entries.end(), [&](const auto &e) { return e.first == name; });
    if (it != entries.end())
      it->second = value;
    else
      entries.emplace_back(key, value);
  }
  return entries;
}

Value strftimeNow(const CallArgs &args, const BuiltinEnv &env) {
  std::string format = requireString(args.get(0, "format"), "strftime_now", "format");
  std::tm now{};
  if (env.now) {
    now = *env.now;
  } else {
    std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    localtime_r(&t, &now);
  }
  char buffer[512];
  size_t length = format.empty() ? 0 : std::strftime(buffer, sizeof buffer, format.c_str(), &now);
  if (length == 0 && !format.empty())
    throw RenderError("strftime_now: the format '" + format + "' gives no text");
  return Value::string(std::string(buffer, length));
}

} // namespace

bool isSupportedMethod(const std::string &name) {
  return kStringMethods.count(name) || kDictMethods.count(name);
}

bool isSupportedFunction(const std::string &name) { return kFunctions.count(name) > 0; }

std::string stripString(const std::string &text, const Value *chars, bool left, bool right) {
  std::vector<uint32_t> cps = decodeUtf8(text);
  std::vector<uint32_t> set;
  bool whitespace = !chars || chars->isNone();
  if (!whitespace)
    set = decodeUtf8(requireString(chars, "strip", "argument"));
  auto strip = [&](uint32_t cp) {
    return whitespace ? isPythonSpace(cp) : std::find(set.begin(), set.end(), cp) != set.end();
  };
  size_t begin = 0, end = cps.size();
  while (left && begin < end && strip(cps[begin]))
    ++begin;
  while (right && end > begin && strip(cps[end - 1]))
    --end;
  return encodeUtf8(std::vector<uint32_t>(cps.begin() + begin, cps.begin() + end));
}

Value callMethod(const Value &object, const std::string &name, const CallArgs &args) {
  if (object.isUndefined())
    failUndefined(object);
  if (object.isString() && kStringMethods.count(name))
    return callStringMethod(object.asString(), name, args);
  if (object.isDict() && kDictMethods.count(name))
    return callDictMethod(object, name, args);
  std::string type = object.isNone() ? "None" : "'" + object.typeName() + " object'";
  throw RenderError(type + " has no attribute '" + name + "'");
}

Value callFunction(const std::string &name, const CallArgs &args, const BuiltinEnv &env) {
  if (name == "raise_exception") {
    const Value *message = args.get(0, "message");
    throw RenderError(message ? toPythonStr(*message) : std::string(), /*raised=*/true);
  }
  if (name == "namespace") {
    ValueDict entries = keywordDict(args, "namespace");
    for (const auto &entry : entries)
      if (!entry.first.empty() && entry.first[0] == '_')
        throw RenderError("Chat templates cannot store underscore-prefixed attributes on a "
                          "namespace, but got '" + entry.first + "'. Please rename the attribute.");
    return Value::makeNamespace(std::move(entries));
  }
  if (name == "dict")
    return Value::dict(keywordDict(args, "dict"));
  if (name == "range")
    return rangeFunction(args);
  return strftimeNow(args, env);
}

} // namespace dlm::chat
