// A recursive-descent parser for the subset of Jinja chat templates use, with Jinja's operator
// precedence: conditional < or < and < not < comparisons < + - < ~ < * / // % < ** < unary
// < postfix (.attr [index] (call)) and filters / tests.
#include "runtime/chat/TemplateSyntax.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <set>

namespace dlm::chat {
namespace {

struct ParseError {
  int line;
  std::string message;
};

[[noreturn]] void fail(int line, const std::string &message) { throw ParseError{line, message}; }

// An integer literal's digits (the lexer dropped the underscores). Python's ints have no bound;
// ours stop at 64 bits, which std::stoll would report by throwing out of the parser.
int64_t integerLiteral(const std::string &digits, int line) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error != std::errc() || end != digits.data() + digits.size())
    fail(line, "not supported yet: the integer " + digits.substr(0, 40) +
                   (digits.size() > 40 ? "..." : "") + " (beyond 64 bits)");
  return value;
}

// A float literal as Python reads it: past the largest double it is inf, below the smallest 0
// (strtod's ERANGE results; std::stod would throw).
double floatLiteral(const std::string &text) { return std::strtod(text.c_str(), nullptr); }

[[noreturn]] void unsupported(int line, const std::string &what) {
  fail(line, "not supported yet: " + what);
}

ExprPtr makeExpr(Expr::Kind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

Node makeNode(Node::Kind kind, int line) {
  Node node;
  node.kind = kind;
  node.line = line;
  return node;
}

ExprPtr makeBinary(std::string op, ExprPtr a, ExprPtr b, int line) {
  auto e = makeExpr(Expr::Kind::Binary, line);
  e->name = std::move(op);
  e->a = std::move(a);
  e->b = std::move(b);
  return e;
}

class Parser {
public:
  explicit Parser(const std::vector<Token> &tokens) : tokens_(tokens) {}

  NodeList parseTemplate() {
    NodeList nodes = parseBody({});
    if (peek().kind != Token::Kind::End)
      fail(peek().line, "unexpected '" + peek().text + "' tag");
    return nodes;
  }

private:
  // --- token helpers ----------------------------------------------------------------------------
  const Token &peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token &next() { return tokens_[std::min(pos_++, tokens_.size() - 1)]; }
  bool isOp(const char *op, size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::Operator && peek(ahead).text == op;
  }
  bool isName(const char *name, size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::Name && peek(ahead).text == name;
  }
  bool acceptOp(const char *op) { return isOp(op) ? (++pos_, true) : false; }
  bool acceptName(const char *name) { return isName(name) ? (++pos_, true) : false; }
  static std::string describe(const Token &t) {
    switch (t.kind) {
    case Token::Kind::VarEnd:
      return "end of print statement '}}'";
    case Token::Kind::BlockEnd:
      return "end of statement block '%}'";
    case Token::Kind::End:
      return "end of template";
    case Token::Kind::String:
      return "string";
    default:
      return "'" + t.text + "'";
    }
  }
  void expectOp(const char *op) {
    if (!acceptOp(op))
      fail(peek().line, std::string("expected '") + op + "', got " + describe(peek()));
  }
  std::string expectName() {
    if (peek().kind != Token::Kind::Name)
      fail(peek().line, "expected a name, got " + describe(peek()));
    return next().text;
  }
  void expectKeyword(const char *name) {
    if (!acceptName(name))
      fail(peek().line, std::string("expected '") + name + "', got " + describe(peek()));
  }
  void expectBlockEnd() {
    if (peek().kind != Token::Kind::BlockEnd)
      fail(peek().line, "expected end of statement block '%}', got " + describe(peek()));
    ++pos_;
  }

  // --- statements -------------------------------------------------------------------------------
  // Parses nodes until a block tag whose name is in `stops` (left unconsumed after its `{%`).
  NodeList parseBody(const std::set<std::string> &stops) {
    NodeList nodes;
    while (true) {
      const Token &t = peek();
      if (t.kind == Token::Kind::End) {
        if (!stops.empty())
          fail(t.line, "unexpected end of template: expected '" + *stops.rbegin() + "'");
        return nodes;
      }
      if (t.kind == Token::Kind::Text) {
        Node node = makeNode(Node::Kind::Text, t.line);
        node.text = next().text;
        nodes.push_back(std::move(node));
      } else if (t.kind == Token::Kind::VarBegin) {
        ++pos_;
        Node node = makeNode(Node::Kind::Output, t.line);
        node.expr = parseTuple(true);
        if (peek().kind != Token::Kind::VarEnd)
          fail(peek().line, "expected end of print statement '}}', got " + describe(peek()));
        ++pos_;
        nodes.push_back(std::move(node));
      } else {
        ++pos_; // {%
        if (peek().kind == Token::Kind::Name && stops.count(peek().text))
          return nodes;
        parseStatement(nodes);
      }
    }
  }

  void parseStatement(NodeList &nodes) {
    int line = peek().line;
    std::string tag = expectName();
    static const std::set<std::string> kRefused = {
        "macro", "call",    "filter", "include", "import", "from",  "extends", "block",
        "raw",   "with",    "autoescape", "do",  "trans",  "pluralize", "endmacro", "endcall"};
    if (tag == "if")
      nodes.push_back(parseIf(line));
    else if (tag == "for")
      nodes.push_back(parseFor(line));
    else if (tag == "set")
      nodes.push_back(parseSet(line));
    else if (tag == "break" || tag == "continue")
      nodes.push_back(parseLoopControl(tag, line));
    else if (tag == "generation")
      parseGeneration(nodes);
    else if (kRefused.count(tag))
      unsupported(line, "the '" + tag + "' tag");
    else
      fail(line, "unknown tag '" + tag + "'");
  }

  Node parseIf(int line) {
    Node node = makeNode(Node::Kind::If, line);
    node.conditions.push_back(parseTuple(false));
    expectBlockEnd();
    while (true) {
      node.branches.push_back(parseBody({"elif", "else", "endif"}));
      std::string tag = next().text;
      if (tag == "elif") {
        node.conditions.push_back(parseTuple(false));
        expectBlockEnd();
        continue;
      }
      expectBlockEnd();
      if (tag == "else") {
        node.elseBody = parseBody({"endif"});
        ++pos_;
        expectBlockEnd();
      }
      return node;
    }
  }

  Node parseFor(int line) {
    Node node = makeNode(Node::Kind::For, line);
    do {
      node.targets.push_back(expectName());
    } while (acceptOp(","));
    expectKeyword("in");
    node.expr = parseTuple(false, /*allowConditional=*/false);
    if (acceptName("if"))
      node.filter = parseExpression();
    if (isName("recursive"))
      unsupported(peek().line, "recursive loops");
    expectBlockEnd();
    ++loopDepth_;
    node.body = parseBody({"else", "endfor"});
    --loopDepth_;
    if (next().text == "else") {
      expectBlockEnd();
      node.elseBody = parseBody({"endfor"});
      ++pos_;
    }
    expectBlockEnd();
    return node;
  }

  Node parseSet(int line) {
    Node node = makeNode(Node::Kind::Set, line);
    node.targets.push_back(expectName());
    if (acceptOp(".")) {
      node.attribute = expectName();
    } else {
      while (acceptOp(","))
        node.targets.push_back(expectName());
    }
    if (acceptOp("=")) {
      node.expr = parseTuple(false);
      expectBlockEnd();
      return node;
    }
    if (isOp("|"))
      unsupported(peek().line, "filters on a block 'set'");
    if (node.targets.size() != 1 || !node.attribute.empty())
      fail(line, "a block 'set' assigns a single name");
    expectBlockEnd();
    node.kind = Node::Kind::SetBlock;
    node.body = parseBody({"endset"});
    ++pos_;
    expectBlockEnd();
    return node;
  }

  Node parseLoopControl(const std::string &tag, int line) {
    if (loopDepth_ == 0)
      fail(line, "'" + tag + "' outside of a loop");
    expectBlockEnd();
    return makeNode(tag == "break" ? Node::Kind::Break : Node::Kind::Continue, line);
  }

  // transformers' {% generation %} marks assistant text for the assistant mask; rendering the
  // text is all it does otherwise.
  void parseGeneration(NodeList &nodes) {
    expectBlockEnd();
    for (Node &node : parseBody({"endgeneration"}))
      nodes.push_back(std::move(node));
    ++pos_;
    expectBlockEnd();
  }

  // --- expressions ------------------------------------------------------------------------------
  // An expression, or a tuple of them separated by commas (`{{ a, b }}`, `set x = a, b`).
  ExprPtr parseTuple(bool allowEmptyEnd, bool allowConditional = true) {
    (void)allowEmptyEnd;
    int line = peek().line;
    ExprPtr first = allowConditional ? parseExpression() : parseOr();
    if (!isOp(","))
      return first;
    auto tuple = makeExpr(Expr::Kind::ListLit, line);
    tuple->isTuple = true;
    tuple->args.push_back(std::move(first));
    while (acceptOp(",")) {
      if (peek().kind == Token::Kind::VarEnd || peek().kind == Token::Kind::BlockEnd)
        break;
      tuple->args.push_back(allowConditional ? parseExpression() : parseOr());
    }
    return tuple;
  }

  ExprPtr parseExpression() {
    ExprPtr value = parseOr();
    while (isName("if")) {
      int line = next().line;
      auto cond = makeExpr(Expr::Kind::Conditional, line);
      cond->a = std::move(value);
      cond->b = parseOr();
      if (acceptName("else"))
        cond->c = parseExpression();
      value = std::move(cond);
    }
    return value;
  }

  ExprPtr parseOr() {
    ExprPtr left = parseAnd();
    while (isName("or")) {
      int line = next().line;
      left = makeBinary("or", std::move(left), parseAnd(), line);
    }
    return left;
  }

  ExprPtr parseAnd() {
    ExprPtr left = parseNot();
    while (isName("and")) {
      int line = next().line;
      left = makeBinary("and", std::move(left), parseNot(), line);
    }
    return left;
  }

  ExprPtr parseNot() {
    if (isName("not")) {
      auto e = makeExpr(Expr::Kind::Unary, next().line);
      e->name = "not";
      e->a = parseNot();
      return e;
    }
    return parseCompare();
  }

  ExprPtr parseCompare() {
    ExprPtr left = parseMath1();
    while (true) {
      int line = peek().line;
      std::string op;
      for (const char *candidate : {"==", "!=", "<", ">", "<=", ">="})
        if (isOp(candidate))
          op = candidate;
      if (!op.empty())
        ++pos_;
      else if (acceptName("in"))
        op = "in";
      else if (isName("not") && isName("in", 1))
        pos_ += 2, op = "not in";
      else
        return left;
      left = makeBinary(op, std::move(left), parseMath1(), line);
    }
  }

  ExprPtr parseBinaryLevel(const std::vector<const char *> &ops, ExprPtr (Parser::*operand)()) {
    ExprPtr left = (this->*operand)();
    while (true) {
      const char *matched = nullptr;
      for (const char *op : ops)
        if (isOp(op))
          matched = op;
      if (!matched)
        return left;
      int line = next().line;
      left = makeBinary(matched, std::move(left), (this->*operand)(), line);
    }
  }
  ExprPtr parseMath1() { return parseBinaryLevel({"+", "-"}, &Parser::parseConcat); }
  ExprPtr parseConcat() { return parseBinaryLevel({"~"}, &Parser::parseMath2); }
  ExprPtr parseMath2() { return parseBinaryLevel({"*", "/", "//", "%"}, &Parser::parsePow); }
  ExprPtr parsePow() { return parseBinaryLevel({"**"}, &Parser::parseUnaryWithFilters); }
  ExprPtr parseUnaryWithFilters() { return parseUnary(true); }

  ExprPtr parseUnary(bool withFilters) {
    ExprPtr node;
    if (isOp("-") || isOp("+")) {
      node = makeExpr(Expr::Kind::Unary, peek().line);
      node->name = next().text;
      node->a = parseUnary(false);
    } else {
      node = parsePrimary();
    }
    node = parsePostfix(std::move(node));
    return withFilters ? parseFilterChain(std::move(node)) : std::move(node);
  }

  ExprPtr parsePrimary() {
    const Token &t = next();
    switch (t.kind) {
    case Token::Kind::Name:
      return parseName(t);
    case Token::Kind::String: {
      std::string text = t.text;
      while (peek().kind == Token::Kind::String)
        text += next().text;
      auto e = makeExpr(Expr::Kind::Literal, t.line);
      e->value = Value::string(std::move(text));
      return e;
    }
    case Token::Kind::Int:
    case Token::Kind::Float: {
      auto e = makeExpr(Expr::Kind::Literal, t.line);
      e->value = t.kind == Token::Kind::Int ? Value::integer(integerLiteral(t.text, t.line))
                                            : Value::real(floatLiteral(t.text));
      return e;
    }
    case Token::Kind::Operator:
      if (t.text == "(")
        return parseParenthesized(t.line);
      if (t.text == "[")
        return parseListLiteral(t.line);
      if (t.text == "{")
        return parseDictLiteral(t.line);
      break;
    default:
      break;
    }
    fail(t.line, "unexpected " + describe(t));
  }

  ExprPtr parseName(const Token &t) {
    auto e = makeExpr(Expr::Kind::Literal, t.line);
    if (t.text == "true" || t.text == "True")
      e->value = Value::boolean(true);
    else if (t.text == "false" || t.text == "False")
      e->value = Value::boolean(false);
    else if (t.text == "none" || t.text == "None")
      e->value = Value::none();
    else {
      e->kind = Expr::Kind::Name;
      e->name = t.text;
    }
    return e;
  }

  ExprPtr parseParenthesized(int line) {
    if (acceptOp(")")) {
      auto e = makeExpr(Expr::Kind::ListLit, line);
      e->isTuple = true;
      return e;
    }
    ExprPtr first = parseExpression();
    if (acceptOp(")"))
      return first;
    auto tuple = makeExpr(Expr::Kind::ListLit, line);
    tuple->isTuple = true;
    tuple->args.push_back(std::move(first));
    while (acceptOp(",") && !isOp(")"))
      tuple->args.push_back(parseExpression());
    expectOp(")");
    return tuple;
  }

  ExprPtr parseListLiteral(int line) {
    auto e = makeExpr(Expr::Kind::ListLit, line);
    while (!acceptOp("]")) {
      if (!e->args.empty())
        expectOp(",");
      if (acceptOp("]"))
        break;
      e->args.push_back(parseExpression());
    }
    return e;
  }

  ExprPtr parseDictLiteral(int line) {
    auto e = makeExpr(Expr::Kind::DictLit, line);
    while (!acceptOp("}")) {
      if (!e->args.empty())
        expectOp(",");
      if (acceptOp("}"))
        break;
      e->args.push_back(parseExpression());
      expectOp(":");
      e->args.push_back(parseExpression());
    }
    return e;
  }

  ExprPtr parsePostfix(ExprPtr node) {
    while (true) {
      int line = peek().line;
      if (acceptOp(".")) {
        auto e = makeExpr(Expr::Kind::Attribute, line);
        if (peek().kind == Token::Kind::Int) {
          e->kind = Expr::Kind::Index;
          auto index = makeExpr(Expr::Kind::Literal, line);
          const Token &digits = next();
          index->value = Value::integer(integerLiteral(digits.text, digits.line));
          e->args.push_back(std::move(index));
        } else {
          e->name = expectName();
        }
        e->a = std::move(node);
        node = std::move(e);
      } else if (acceptOp("[")) {
        node = parseSubscript(std::move(node), line);
      } else if (isOp("(")) {
        node = parseCall(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parseSubscript(ExprPtr object, int line) {
    std::vector<ExprPtr> parts(1);
    bool isSlice = false;
    while (!acceptOp("]")) {
      if (acceptOp(":")) {
        isSlice = true;
        parts.emplace_back();
        continue;
      }
      if (parts.back())
        fail(peek().line, "expected ']' or ':', got " + describe(peek()));
      parts.back() = parseExpression();
    }
    if (!isSlice && !parts[0])
      fail(line, "expected a subscript");
    if (parts.size() > 3)
      fail(line, "a slice has at most three parts");
    auto e = makeExpr(isSlice ? Expr::Kind::Slice : Expr::Kind::Index, line);
    e->a = std::move(object);
    parts.resize(isSlice ? 3 : 1);
    e->args = std::move(parts);
    return e;
  }

  void parseArguments(Expr &e) {
    expectOp("(");
    while (!acceptOp(")")) {
      if (!e.args.empty() || !e.kwargs.empty())
        expectOp(",");
      if (acceptOp(")"))
        break;
      if (isOp("*") || isOp("**"))
        unsupported(peek().line, "'*' and '**' arguments");
      if (peek().kind == Token::Kind::Name && isOp("=", 1)) {
        std::string key = next().text;
        ++pos_;
        e.kwargs.emplace_back(key, parseExpression());
      } else {
        if (!e.kwargs.empty())
          fail(peek().line, "positional argument after keyword argument");
        e.args.push_back(parseExpression());
      }
    }
  }

  ExprPtr parseCall(ExprPtr callee) {
    auto e = makeExpr(Expr::Kind::Call, peek().line);
    if (callee->kind == Expr::Kind::Name) {
      if (!isSupportedFunction(callee->name))
        unsupported(e->line, "the function '" + callee->name + "'");
    } else if (callee->kind == Expr::Kind::Attribute) {
      if (!isSupportedMethod(callee->name))
        unsupported(e->line, "the method '" + callee->name + "'");
    } else {
      unsupported(e->line, "calling this kind of expression");
    }
    e->a = std::move(callee);
    parseArguments(*e);
    return e;
  }

  ExprPtr parseFilterChain(ExprPtr node) {
    while (true) {
      if (isOp("|")) {
        node = parseFilter(std::move(node));
      } else if (isName("is")) {
        node = parseTest(std::move(node));
      } else if (isOp("(")) {
        node = parseCall(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parseFilter(ExprPtr operand) {
    int line = next().line;
    auto e = makeExpr(Expr::Kind::Filter, line);
    e->name = expectName();
    if (!isSupportedFilter(e->name))
      unsupported(line, "the '" + e->name + "' filter");
    e->a = std::move(operand);
    if (isOp("("))
      parseArguments(*e);
    return e;
  }

  ExprPtr parseTest(ExprPtr operand) {
    int line = next().line;
    auto e = makeExpr(Expr::Kind::Test, line);
    e->negated = acceptName("not");
    e->name = expectName();
    if (!isSupportedTest(e->name))
      unsupported(line, "the '" + e->name + "' test");
    e->a = std::move(operand);
    if (isOp("(")) {
      parseArguments(*e);
    } else if (takesBareArgument()) {
      e->args.push_back(parsePostfix(parsePrimary()));
    }
    return e;
  }

  // `x is divisibleby 3`, `x is sameas none`: a test's single argument without parentheses.
  bool takesBareArgument() const {
    const Token &t = peek();
    if (t.kind == Token::Kind::String || t.kind == Token::Kind::Int || t.kind == Token::Kind::Float)
      return true;
    if (t.kind == Token::Kind::Operator)
      return t.text == "[" || t.text == "{";
    if (t.kind != Token::Kind::Name)
      return false;
    return t.text != "else" && t.text != "or" && t.text != "and" && t.text != "if" &&
           t.text != "in" && t.text != "is" && t.text != "not";
  }

  const std::vector<Token> &tokens_;
  size_t pos_ = 0;
  int loopDepth_ = 0;
};

} // namespace

StatusOr<NodeList> parseTemplate(const std::vector<Token> &tokens) {
  try {
    return Parser(tokens).parseTemplate();
  } catch (const ParseError &error) {
    return Status::error("chat template line " + std::to_string(error.line) + ": " + error.message);
  }
}

} // namespace dlm::chat
