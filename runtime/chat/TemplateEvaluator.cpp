#include "runtime/chat/TemplateEvaluator.h"

#include <cmath>
#include <cstdint>
#include <unordered_map>

namespace dlm::chat {
namespace {

enum class Flow { Normal, Break, Continue };

// The most bytes (of a string) or items (of a list) `*` repeats to: 4 Mi, thousands of times
// any chat, where `'x' * 10**18` would take memory until the process dies.
constexpr uint64_t kMaxRepeated = uint64_t{1} << 22;
// The most bytes a template renders: 1 MiB is a quarter of a million tokens, past the context of
// any model here, while a template that renders 4 MiB made encoding the prompt take seconds
// (fuzz finding: `{{ '...' * 396 * 392 }}`).
constexpr size_t kMaxRenderedBytes = size_t{1} << 20;

class Evaluator {
public:
  Evaluator(const Value &context, const BuiltinEnv &env) : env_(env) {
    scopes_.emplace_back();
    for (const auto &[key, value] : context.entries())
      scopes_.back()[key] = value;
  }

  int line() const { return line_; }

  Flow renderNodes(const NodeList &nodes, std::string &out) {
    for (const Node &node : nodes) {
      Flow flow = renderNode(node, out);
      if (flow != Flow::Normal)
        return flow;
    }
    return Flow::Normal;
  }

private:
  static void checkRenderedSize(const std::string &out) {
    if (out.size() > kMaxRenderedBytes)
      throw RenderError("not supported yet: a rendered chat prompt of more than " +
                        std::to_string(kMaxRenderedBytes) + " bytes");
  }

  // --- statements -------------------------------------------------------------------------------
  Flow renderNode(const Node &node, std::string &out) {
    line_ = node.line;
    switch (node.kind) {
    case Node::Kind::Text:
      out += node.text;
      checkRenderedSize(out);
      return Flow::Normal;
    case Node::Kind::Output:
      out += toPythonStr(eval(*node.expr));
      checkRenderedSize(out);
      return Flow::Normal;
    case Node::Kind::If:
      return renderIf(node, out);
    case Node::Kind::For:
      return renderFor(node, out);
    case Node::Kind::Set:
      assign(node, eval(*node.expr));
      return Flow::Normal;
    case Node::Kind::SetBlock: {
      std::string captured;
      renderNodes(node.body, captured);
      assign(node, Value::string(captured));
      return Flow::Normal;
    }
    case Node::Kind::Break:
      return Flow::Break;
    case Node::Kind::Continue:
      return Flow::Continue;
    }
    return Flow::Normal;
  }

  Flow renderIf(const Node &node, std::string &out) {
    for (size_t i = 0; i < node.conditions.size(); ++i)
      if (eval(*node.conditions[i]).truthy())
        return renderNodes(node.branches[i], out);
    return renderNodes(node.elseBody, out);
  }

  void bindTargets(const std::vector<std::string> &targets, const Value &value) {
    if (targets.size() == 1) {
      scopes_.back()[targets[0]] = value;
      return;
    }
    if (!value.isList() || value.items().size() != targets.size())
      throw RenderError("cannot unpack " + value.typeName() + " into " +
                        std::to_string(targets.size()) + " names");
    for (size_t i = 0; i < targets.size(); ++i)
      scopes_.back()[targets[i]] = value.items()[i];
  }

  void assign(const Node &node, const Value &value) {
    if (node.attribute.empty()) {
      bindTargets(node.targets, value);
      return;
    }
    Value target = lookup(node.targets[0]);
    if (!target.isNamespace())
      throw RenderError("cannot assign attribute on non-namespace object");
    if (!node.attribute.empty() && node.attribute[0] == '_')
      throw RenderError("Chat templates cannot store underscore-prefixed attributes on a namespace");
    target.setAttribute(node.attribute, value);
  }

  ValueList loopItems(const Node &node) {
    Value iterable = eval(*node.expr);
    ValueList items = applyFilter("list", iterable, {}).items();
    if (!node.filter)
      return items;
    ValueList kept;
    for (const Value &item : items) {
      scopes_.emplace_back();
      bindTargets(node.targets, item);
      bool keep = eval(*node.filter).truthy();
      scopes_.pop_back();
      if (keep)
        kept.push_back(item);
    }
    return kept;
  }

  static Value loopObject(const ValueList &items, size_t i) {
    int64_t n = static_cast<int64_t>(items.size()), k = static_cast<int64_t>(i);
    return Value::dict({
        {"index", Value::integer(k + 1)},
        {"index0", Value::integer(k)},
        {"revindex", Value::integer(n - k)},
        {"revindex0", Value::integer(n - k - 1)},
        {"first", Value::boolean(k == 0)},
        {"last", Value::boolean(k == n - 1)},
        {"length", Value::integer(n)},
        {"depth", Value::integer(1)},
        {"depth0", Value::integer(0)},
        {"previtem", k > 0 ? items[i - 1] : Value::undefined("there is no previous item")},
        {"nextitem", k + 1 < n ? items[i + 1] : Value::undefined("there is no next item")},
    });
  }

  Flow renderFor(const Node &node, std::string &out) {
    ValueList items = loopItems(node);
    for (size_t i = 0; i < items.size(); ++i) {
      scopes_.emplace_back();
      scopes_.back()["loop"] = loopObject(items, i);
      bindTargets(node.targets, items[i]);
      Flow flow = renderNodes(node.body, out);
      scopes_.pop_back();
      if (flow == Flow::Break)
        break;
    }
    if (items.empty())
      return renderNodes(node.elseBody, out);
    return Flow::Normal;
  }

  // --- expressions ------------------------------------------------------------------------------
  Value lookup(const std::string &name) const {
    for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope) {
      auto it = scope->find(name);
      if (it != scope->end())
        return it->second;
    }
    return Value::undefined("'" + name + "' is undefined");
  }

  Value eval(const Expr &e) {
    line_ = e.line;
    switch (e.kind) {
    case Expr::Kind::Literal:
      return e.value;
    case Expr::Kind::Name:
      return lookup(e.name);
    case Expr::Kind::ListLit: {
      ValueList items;
      for (const ExprPtr &item : e.args)
        items.push_back(eval(*item));
      return Value::list(std::move(items), e.isTuple);
    }
    case Expr::Kind::DictLit:
      return evalDict(e);
    case Expr::Kind::Attribute:
      return attribute(eval(*e.a), e.name);
    case Expr::Kind::Index:
      return subscript(eval(*e.a), eval(*e.args[0]));
    case Expr::Kind::Slice:
      return evalSlice(e);
    case Expr::Kind::Call:
      return evalCall(e);
    case Expr::Kind::Filter: {
      Value operand = eval(*e.a);
      return applyFilter(e.name, operand, evalArgs(e));
    }
    case Expr::Kind::Test: {
      Value operand = eval(*e.a);
      return Value::boolean(applyTest(e.name, operand, evalArgs(e)) != e.negated);
    }
    case Expr::Kind::Unary:
      return evalUnary(e);
    case Expr::Kind::Binary:
      return evalBinary(e);
    case Expr::Kind::Conditional:
      if (eval(*e.b).truthy())
        return eval(*e.a);
      return e.c ? eval(*e.c) : Value::undefined("the conditional expression has no else");
    }
    return Value::undefined();
  }

  Value evalDict(const Expr &e) {
    ValueDict entries;
    for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
      Value key = eval(*e.args[i]);
      if (!key.isString())
        throw RenderError("not supported yet: dict keys that are not strings");
      Value value = eval(*e.args[i + 1]);
      bool replaced = false;
      for (auto &entry : entries)
        if (entry.first == key.asString())
          entry.second = value, replaced = true;
      if (!replaced)
        entries.emplace_back(key.asString(), value);
    }
    return Value::dict(std::move(entries));
  }

  CallArgs evalArgs(const Expr &e) {
    CallArgs args;
    for (const ExprPtr &arg : e.args)
      args.args.push_back(eval(*arg));
    for (const auto &[key, arg] : e.kwargs)
      args.kwargs.emplace_back(key, eval(*arg));
    return args;
  }

  Value evalCall(const Expr &e) {
    if (e.a->kind == Expr::Kind::Name) {
      CallArgs args = evalArgs(e);
      line_ = e.line;
      return callFunction(e.a->name, args, env_);
    }
    Value object = eval(*e.a->a);
    CallArgs args = evalArgs(e);
    line_ = e.line;
    return callMethod(object, e.a->name, args);
  }

  static std::string objectName(const Value &v) {
    return v.isNone() ? "None" : "'" + v.typeName() + " object'";
  }

  static Value attribute(const Value &object, const std::string &name) {
    if (object.isUndefined())
      failUndefined(object);
    if (object.isDict() || object.isNamespace()) {
      if (object.hasMember(name))
        return object.member(name);
    }
    return Value::undefined(objectName(object) + " has no attribute '" + name + "'");
  }

  static Value subscript(const Value &object, const Value &key) {
    if (object.isUndefined())
      failUndefined(object);
    if ((object.isDict() || object.isNamespace()) && key.isString())
      return attribute(object, key.asString());
    if ((object.isList() || object.isString()) &&
        (key.kind() == Value::Kind::Int || key.kind() == Value::Kind::Bool)) {
      ValueList items = applyFilter("list", object, {}).items();
      int64_t n = static_cast<int64_t>(items.size()), i = key.asInt();
      if (i < 0)
        i += n;
      if (i >= 0 && i < n)
        return items[i];
    }
    if (key.isString())
      return attribute(object, key.asString());
    return Value::undefined(objectName(object) + " has no element " + toPythonRepr(key));
  }

  static int64_t sliceBound(const Value *v, int64_t n, int64_t fallback, bool forward) {
    if (!v || v->isNone())
      return fallback;
    if (!v->isNumber() || v->kind() == Value::Kind::Float)
      throw RenderError("slice indices must be integers or None");
    int64_t i = v->asInt();
    if (i < 0)
      i = std::max<int64_t>(i + n, forward ? 0 : -1);
    return std::min(i, forward ? n : n - 1);
  }

  Value evalSlice(const Expr &e) {
    Value object = eval(*e.a);
    Value parts[3];
    for (int i = 0; i < 3; ++i)
      parts[i] = e.args[i] ? eval(*e.args[i]) : Value::none();
    if (object.isUndefined())
      failUndefined(object);
    if (!object.isList() && !object.isString())
      throw RenderError("'" + object.typeName() + "' object is not subscriptable");
    int64_t step = parts[2].isNone() ? 1 : parts[2].asInt();
    if (step == 0)
      throw RenderError("slice step cannot be zero");
    ValueList items = applyFilter("list", object, {}).items();
    int64_t n = static_cast<int64_t>(items.size());
    bool forward = step > 0;
    int64_t start = sliceBound(&parts[0], n, forward ? 0 : n - 1, forward);
    int64_t stop = sliceBound(&parts[1], n, forward ? n : -1, forward);
    ValueList out;
    for (int64_t i = start; forward ? i < stop : i > stop; i += step)
      out.push_back(items[i]);
    if (!object.isString())
      return Value::list(std::move(out));
    std::string text;
    for (const Value &c : out)
      text += c.asString();
    return Value::string(text);
  }

  Value evalUnary(const Expr &e) {
    Value v = eval(*e.a);
    if (e.name == "not")
      return Value::boolean(!v.truthy());
    if (v.isUndefined())
      failUndefined(v);
    if (!v.isNumber())
      throw RenderError("bad operand type for unary " + e.name + ": '" + v.typeName() + "'");
    if (e.name == "+")
      return v.kind() == Value::Kind::Float ? v : Value::integer(v.asInt());
    if (v.kind() == Value::Kind::Float)
      return Value::real(-v.asDouble());
    return integerArithmetic("-", 0, v.asInt());
  }

  Value evalBinary(const Expr &e) {
    if (e.name == "and" || e.name == "or") {
      Value left = eval(*e.a);
      bool shortCircuit = e.name == "and" ? !left.truthy() : left.truthy();
      return shortCircuit ? left : eval(*e.b);
    }
    Value left = eval(*e.a);
    Value right = eval(*e.b);
    line_ = e.line;
    return binaryOperation(e.name, left, right);
  }

  static Value binaryOperation(const std::string &op, const Value &a, const Value &b) {
    if (op == "~")
      return Value::string(toPythonStr(a) + toPythonStr(b));
    if (op == "==")
      return Value::boolean(pythonEquals(a, b));
    if (op == "!=")
      return Value::boolean(!pythonEquals(a, b));
    if (op == "in" || op == "not in")
      return Value::boolean(applyTest("in", a, CallArgs{{b}, {}}) == (op == "in"));
    if (a.isUndefined())
      failUndefined(a);
    if (b.isUndefined())
      failUndefined(b);
    if (op == "<")
      return Value::boolean(pythonLess(a, b));
    if (op == ">")
      return Value::boolean(pythonLess(b, a));
    if (op == "<=")
      return Value::boolean(!pythonLess(b, a));
    if (op == ">=")
      return Value::boolean(!pythonLess(a, b));
    return arithmetic(op, a, b);
  }

  static Value repeat(const Value &sequence, int64_t times) {
    const size_t size = sequence.isString() ? sequence.asString().size() : sequence.items().size();
    if (times > 0 && size > 0 && static_cast<uint64_t>(times) > kMaxRepeated / size)
      throw RenderError("not supported yet: repeating " + std::to_string(size) +
                        (sequence.isString() ? " bytes " : " items ") + std::to_string(times) +
                        " times (more than " + std::to_string(kMaxRepeated) + ")");
    // An empty sequence repeated any number of times is empty: no loop of `times` rounds.
    if (size == 0 || times <= 0)
      return sequence.isString() ? Value::string("") : Value::list({});
    if (sequence.isString()) {
      std::string out;
      for (int64_t i = 0; i < times; ++i)
        out += sequence.asString();
      return Value::string(out);
    }
    ValueList out;
    for (int64_t i = 0; i < times; ++i)
      out.insert(out.end(), sequence.items().begin(), sequence.items().end());
    return Value::list(std::move(out));
  }

  [[noreturn]] static void badOperands(const std::string &op, const Value &a, const Value &b) {
    throw RenderError("unsupported operand type(s) for " + op + ": '" + a.typeName() + "' and '" +
                      b.typeName() + "'");
  }

  static Value arithmetic(const std::string &op, const Value &a, const Value &b) {
    if (op == "+" && a.isString() && b.isString())
      return Value::string(a.asString() + b.asString());
    if (op == "+" && a.isList() && b.isList() && a.isTuple() == b.isTuple()) {
      ValueList items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return Value::list(std::move(items), a.isTuple());
    }
    if (op == "*" && (a.isString() || a.isList()) && b.isNumber() && b.kind() != Value::Kind::Float)
      return repeat(a, b.asInt());
    if (op == "*" && (b.isString() || b.isList()) && a.isNumber() && a.kind() != Value::Kind::Float)
      return repeat(b, a.asInt());
    if (!a.isNumber() || !b.isNumber())
      badOperands(op, a, b);
    bool real = a.kind() == Value::Kind::Float || b.kind() == Value::Kind::Float;
    if (op == "/" || real)
      return realArithmetic(op, a.asDouble(), b.asDouble());
    return integerArithmetic(op, a.asInt(), b.asInt());
  }

  static Value realArithmetic(const std::string &op, double x, double y) {
    if ((op == "/" || op == "//" || op == "%") && y == 0)
      throw RenderError("float division by zero");
    if (op == "+")
      return Value::real(x + y);
    if (op == "-")
      return Value::real(x - y);
    if (op == "*")
      return Value::real(x * y);
    if (op == "/")
      return Value::real(x / y);
    if (op == "//")
      return Value::real(std::floor(x / y));
    if (op == "%") {
      double r = std::fmod(x, y);
      return Value::real(r != 0 && ((r < 0) != (y < 0)) ? r + y : r);
    }
    return Value::real(std::pow(x, y));
  }

  // Python's ints have no bound; a result past 64 bits is refused by name instead of wrapping
  // (undefined behaviour).
  [[noreturn]] static void integerOverflow(const std::string &op, int64_t x, int64_t y) {
    throw RenderError("not supported yet: " + std::to_string(x) + " " + op + " " +
                      std::to_string(y) + " is beyond 64-bit integers");
  }

  // x ** y for y >= 0 by squaring: 63 multiplications at most, where a loop of y would run up to
  // 2^63 times.
  static int64_t integerPower(int64_t x, int64_t y) {
    int64_t result = 1, base = x;
    for (int64_t exponent = y; exponent > 0; exponent >>= 1) {
      if ((exponent & 1) && __builtin_mul_overflow(result, base, &result))
        integerOverflow("**", x, y);
      // A square that overflows is needed by a later bit unless |base| <= 1, which never does.
      if (exponent > 1 && __builtin_mul_overflow(base, base, &base))
        integerOverflow("**", x, y);
    }
    return result;
  }

  static Value integerArithmetic(const std::string &op, int64_t x, int64_t y) {
    if ((op == "//" || op == "%") && y == 0)
      throw RenderError("integer division or modulo by zero");
    int64_t result = 0;
    if (op == "+" && __builtin_add_overflow(x, y, &result))
      integerOverflow(op, x, y);
    if (op == "-" && __builtin_sub_overflow(x, y, &result))
      integerOverflow(op, x, y);
    if (op == "*" && __builtin_mul_overflow(x, y, &result))
      integerOverflow(op, x, y);
    if (op == "+" || op == "-" || op == "*")
      return Value::integer(result);
    // INT64_MIN // -1 overflows and INT64_MIN % -1 traps on x86; the remainder is 0.
    if ((op == "//" || op == "%") && y == -1)
      return op == "%" ? Value::integer(0) : integerArithmetic("-", 0, x);
    if (op == "//") {
      int64_t q = x / y;
      return Value::integer((x % y != 0 && ((x < 0) != (y < 0))) ? q - 1 : q);
    }
    if (op == "%") {
      int64_t r = x % y;
      return Value::integer(r != 0 && ((r < 0) != (y < 0)) ? r + y : r);
    }
    if (y < 0)
      return Value::real(std::pow(static_cast<double>(x), static_cast<double>(y)));
    return Value::integer(integerPower(x, y));
  }

  const BuiltinEnv &env_;
  std::vector<std::unordered_map<std::string, Value>> scopes_;
  int line_ = 1;
};

} // namespace

StatusOr<std::string> renderTemplate(const NodeList &nodes, const Value &context,
                                     const BuiltinEnv &env) {
  Evaluator evaluator(context, env);
  std::string out;
  try {
    evaluator.renderNodes(nodes, out);
  } catch (const RenderError &error) {
    if (error.raised)
      return Status::error(error.what());
    return Status::error("chat template line " + std::to_string(evaluator.line()) + ": " +
                         error.what());
  }
  return out;
}

} // namespace dlm::chat
