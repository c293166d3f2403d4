// Finds the kernels of a CUDA C++ translation unit: its extern "C" __global__ entry points, with
// the namespaces they are declared in (the emulated driver's wrappers take their addresses). A
// light tokenizer, not a parser: it knows comments, string literals, preprocessor lines,
// namespaces, extern "C" blocks and __launch_bounds__, which is what generated kernels use.
#include "runtime/cuda/emu/EmuModule.h"

#include <algorithm>
#include <cctype>

namespace dlm::emu {

namespace {

struct Token {
  enum Kind { identifier, string, punctuation } kind;
  std::string text;
};

// C++ tokens enough to find entry points: identifiers, string literals (their contents), single
// punctuation characters; comments and preprocessor lines dropped.
std::vector<Token> tokenize(const std::string &source) {
  std::vector<Token> tokens;
  const size_t size = source.size();
  bool lineStart = true;
  for (size_t i = 0; i < size;) {
    const char c = source[i];
    if (c == '\n') {
      lineStart = true;
      ++i;
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    if (c == '#' && lineStart) { // a directive, with its continuation lines
      while (i < size && source[i] != '\n')
        i += source[i] == '\\' && i + 1 < size ? 2 : 1;
      continue;
    }
    lineStart = false;
    if (source.compare(i, 2, "//") == 0) {
      while (i < size && source[i] != '\n')
        ++i;
      continue;
    }
    if (source.compare(i, 2, "/*") == 0) {
      const size_t end = source.find("*/", i + 2);
      i = end == std::string::npos ? size : end + 2;
      continue;
    }
    if (c == '"' || c == '\'') {
      std::string text;
      for (++i; i < size && source[i] != c; ++i) {
        if (source[i] == '\\' && i + 1 < size)
          text += source[i++];
        text += source[i];
      }
      ++i;
      tokens.push_back({c == '"' ? Token::string : Token::punctuation, text});
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t end = i;
      while (end < size &&
             (std::isalnum(static_cast<unsigned char>(source[end])) || source[end] == '_'))
        ++end;
      tokens.push_back({Token::identifier, source.substr(i, end - i)});
      i = end;
      continue;
    }
    tokens.push_back({Token::punctuation, std::string(1, c)});
    ++i;
  }
  return tokens;
}

bool is(const std::vector<Token> &tokens, size_t i, Token::Kind kind, const char *text) {
  return i < tokens.size() && tokens[i].kind == kind && tokens[i].text == text;
}

} // namespace

std::vector<std::string> findEntryPoints(const std::string &source) {
  const std::vector<Token> tokens = tokenize(source);
  // One entry per open brace: a named namespace's name, "" for an unnamed namespace or an
  // extern "C" block (both transparent to qualification), nullopt-like "{" for any other scope.
  const std::string kOtherScope = "{";
  std::vector<std::string> scopes;
  std::vector<std::string> entries;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const Token &token = tokens[i];
    if (token.kind == Token::identifier && token.text == "namespace") {
      std::string name;
      size_t j = i + 1;
      while (j < tokens.size() && !is(tokens, j, Token::punctuation, "{") &&
             !is(tokens, j, Token::punctuation, ";") && !is(tokens, j, Token::punctuation, "="))
        name += tokens[j++].text; // "a", ":", ":", "b" -> "a::b"
      if (is(tokens, j, Token::punctuation, "{")) {
        scopes.push_back(name);
        i = j;
      }
      continue;
    }
    if (token.kind == Token::identifier && token.text == "extern" &&
        is(tokens, i + 1, Token::string, "C")) {
      if (is(tokens, i + 2, Token::punctuation, "{")) {
        scopes.push_back("");
        i += 2;
        continue;
      }
      // A declaration: the name is the identifier before the first parenthesis that does not
      // belong to __launch_bounds__(...); it is an entry point when __global__ precedes it.
      bool global = false;
      std::string name;
      for (size_t j = i + 2; j < tokens.size(); ++j) {
        if (is(tokens, j, Token::identifier, "__global__"))
          global = true;
        if (is(tokens, j, Token::identifier, "__launch_bounds__") &&
            is(tokens, j + 1, Token::punctuation, "(")) {
          int depth = 0;
          for (j = j + 1; j < tokens.size(); ++j) {
            depth += is(tokens, j, Token::punctuation, "(") ? 1 : 0;
            depth -= is(tokens, j, Token::punctuation, ")") ? 1 : 0;
            if (depth == 0)
              break;
          }
          continue;
        }
        if (is(tokens, j, Token::punctuation, "(")) {
          if (tokens[j - 1].kind == Token::identifier)
            name = tokens[j - 1].text;
          break;
        }
        if (is(tokens, j, Token::punctuation, ";") || is(tokens, j, Token::punctuation, "{"))
          break;
      }
      bool namespaceScope = true;
      std::string qualified;
      for (const std::string &scope : scopes) {
        if (scope == kOtherScope)
          namespaceScope = false;
        else if (!scope.empty())
          qualified += scope + "::";
      }
      qualified += name;
      if (global && !name.empty() && namespaceScope &&
          std::find(entries.begin(), entries.end(), qualified) == entries.end())
        entries.push_back(qualified);
      continue;
    }
    if (is(tokens, i, Token::punctuation, "{"))
      scopes.push_back(kOtherScope);
    else if (is(tokens, i, Token::punctuation, "}") && !scopes.empty())
      scopes.pop_back();
  }
  return entries;
}

} // namespace dlm::emu
