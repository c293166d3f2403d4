// The parsed form of a chat template: tokens from the lexer (with Jinja's whitespace control
// already applied to the text between tags) and the tree the parser builds from them.
#pragma once

#include "runtime/chat/TemplateValue.h"
#include "support/Status.h"

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dlm::chat {

struct Token {
  enum class Kind {
    Text,       // template text outside tags
    VarBegin,   // {{
    VarEnd,     // }}
    BlockBegin, // {%
    BlockEnd,   // %}
    Name,
    String,
    Int,
    Float,
    Operator, // + - * / // % ** ~ == != < > <= >= = ( ) [ ] { } , . : |
    End,
  };
  Kind kind;
  std::string text; // Text: the text; String: the unescaped value; others: the spelling
  int line;
};

// Splits a template into tokens with transformers' settings: trim_blocks, lstrip_blocks, the
// `-`/`+` modifiers, newlines normalized and one trailing newline dropped. Comments are removed.
StatusOr<std::vector<Token>> lexTemplate(std::string_view source);

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,   // value
    Name,      // name
    ListLit,   // args (tuple: isTuple)
    DictLit,   // args: key, value, key, value, ...
    Attribute, // a.name
    Index,     // a[args[0]]
    Slice,     // a[args[0]:args[1]:args[2]] (null parts allowed)
    Call,      // a(args, kwargs): a is a Name (a global function) or an Attribute (a method)
    Filter,    // a | name(args, kwargs)
    Test,      // a is [not] name(args)
    Unary,     // name: "-", "+" or "not"; a
    Binary,    // name: operator; a, b
    Conditional, // a if b else c (c may be null)
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;
  bool negated = false;
  bool isTuple = false;
  ExprPtr a, b, c;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Node;
using NodeList = std::vector<Node>;

struct Node {
  enum class Kind { Text, Output, If, For, Set, SetBlock, Break, Continue };
  Kind kind;
  int line = 0;
  std::string text;                 // Text
  ExprPtr expr;                     // Output, Set: the value; For: the iterable
  std::vector<ExprPtr> conditions;  // If: one per branch (if, elif, ...)
  std::vector<NodeList> branches;   // If: bodies of the branches
  NodeList body;                    // For, SetBlock
  NodeList elseBody;                // If (else), For (else)
  ExprPtr filter;                   // For: the `if` filter
  std::vector<std::string> targets; // For / Set: names (several when unpacking)
  std::string attribute;            // Set: `ns.attribute = ...` (targets[0] is the namespace)
};

// Parses the tokens into a tree. Errors: "chat template line N: <what>".
StatusOr<NodeList> parseTemplate(const std::vector<Token> &tokens);

// Names of the filters, tests, global functions and methods the renderer implements; the parser
// refuses the others by name.
bool isSupportedFilter(const std::string &name);
bool isSupportedTest(const std::string &name);
bool isSupportedFunction(const std::string &name);
bool isSupportedMethod(const std::string &name);

} // namespace dlm::chat
