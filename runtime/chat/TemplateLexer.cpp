// Jinja's lexer as transformers configures it (trim_blocks=True, lstrip_blocks=True): the text
// between tags is trimmed by the `-` modifiers, a block or comment tag's line is stripped of its
// indentation when the tag is alone on it, and the newline after a block or comment tag is dropped.
#include "runtime/chat/TemplateSyntax.h"

#include <cctype>
#include <cstring>

namespace dlm::chat {
namespace {

Status lexError(int line, const std::string &what) {
  return Status::error("chat template line " + std::to_string(line) + ": " + what);
}

// One tag or the text between tags, before whitespace control.
struct Piece {
  enum class Kind { Text, Var, Block, Comment } kind = Kind::Text;
  std::string text;
  std::vector<Token> tokens;
  char leftModifier = 0;  // '-' or '+' right after {{ {% {#
  char rightModifier = 0; // '-' or '+' right before }} %} #}
  int line = 0;
  bool lineStarting = true; // Text: starts at the beginning of a line
};

std::string normalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n')
        ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') // keep_trailing_newline=False
    out.pop_back();
  return out;
}

bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

void appendHexEscape(std::string &out, std::string_view digits) {
  appendUtf8(out, static_cast<uint32_t>(std::stoul(std::string(digits), nullptr, 16)));
}

// Python's unicode-escape decoding of a string literal's body.
std::string unescape(std::string_view body) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out += body[i];
      continue;
    }
    char c = body[++i];
    size_t hexDigits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (hexDigits && i + hexDigits < body.size()) {
      std::string_view digits = body.substr(i + 1, hexDigits);
      bool valid = digits.size() == hexDigits;
      for (char d : digits)
        valid = valid && std::isxdigit(static_cast<unsigned char>(d));
      if (valid) {
        appendHexEscape(out, digits);
        i += hexDigits;
        continue;
      }
    }
    const char *from = "ntr\\'\"0abfv\n";
    const char *to = "\n\t\r\\'\"\0\a\b\f\v";
    const char *found = std::strchr(from, c);
    if (found && c != 0) {
      if (c != '\n') // a backslash-newline is a line continuation
        out += to[found - from];
    } else {
      out += '\\';
      out += c;
    }
  }
  return out;
}

class TagLexer {
public:
  TagLexer(const std::string &source, size_t pos, int line) : src_(source), pos_(pos), line_(line) {}

  // Lexes the inside of a {{ }} or {% %} tag up to its end (`close` is '}' or '%').
  Status lexTag(char close, Piece &piece) {
    int depth = 0;
    while (true) {
      skipSpaces();
      if (pos_ >= src_.size())
        return lexError(piece.line, std::string("unexpected end of template: the tag opened here "
                                                "is not closed"));
      if (depth == 0 && endsTag(close, piece))
        return Status::ok();
      char c = src_[pos_];
      if (c == '"' || c == '\'') {
        DLM_RETURN_IF_ERROR(lexString(piece));
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lexNumber(piece);
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t start = pos_;
        while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_'))
          ++pos_;
        piece.tokens.push_back({Token::Kind::Name, src_.substr(start, pos_ - start), line_});
      } else {
        DLM_RETURN_IF_ERROR(lexOperator(piece, depth));
      }
    }
  }

  size_t pos() const { return pos_; }
  int line() const { return line_; }

private:
  void skipSpaces() {
    while (pos_ < src_.size() && isSpace(src_[pos_])) {
      if (src_[pos_] == '\n')
        ++line_;
      ++pos_;
    }
  }

  bool endsTag(char close, Piece &piece) {
    char modifier = src_[pos_];
    size_t at = (modifier == '-' || modifier == '+') ? pos_ + 1 : pos_;
    if (src_.compare(at, 2, std::string{close, '}'}) != 0)
      return false;
    if (at != pos_)
      piece.rightModifier = modifier;
    pos_ = at + 2;
    return true;
  }

  Status lexString(Piece &piece) {
    char quote = src_[pos_];
    size_t start = pos_ + 1, i = start;
    int startLine = line_;
    while (i < src_.size() && src_[i] != quote) {
      if (src_[i] == '\\')
        ++i;
      else if (src_[i] == '\n')
        ++line_;
      ++i;
    }
    if (i >= src_.size())
      return lexError(startLine, "unterminated string");
    piece.tokens.push_back({Token::Kind::String, unescape(std::string_view(src_).substr(start, i - start)), startLine});
    pos_ = i + 1;
    return Status::ok();
  }

  void lexNumber(Piece &piece) {
    size_t start = pos_;
    auto digits = [&] {
      while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_'))
        ++pos_;
    };
    digits();
    bool isFloat = false;
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      isFloat = true;
      ++pos_;
      digits();
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t save = pos_++;
      if (pos_ < src_.size() && (src_[pos_] == '+' || src_[pos_] == '-'))
        ++pos_;
      if (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) {
        isFloat = true;
        digits();
      } else {
        pos_ = save;
      }
    }
    std::string text;
    for (size_t i = start; i < pos_; ++i)
      if (src_[i] != '_')
        text += src_[i];
    piece.tokens.push_back({isFloat ? Token::Kind::Float : Token::Kind::Int, text, line_});
  }

  Status lexOperator(Piece &piece, int &depth) {
    static const char *const kOperators[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/",
                                             "%",  "~",  "<",  ">",  "=",  "(", ")", "[", "]", "{",
                                             "}",  ",",  ".",  ":",  "|"};
    for (const char *op : kOperators) {
      size_t length = std::strlen(op);
      if (src_.compare(pos_, length, op) != 0)
        continue;
      if (std::strchr("([{", op[0]) && length == 1)
        ++depth;
      if (std::strchr(")]}", op[0]) && length == 1 && depth > 0)
        --depth;
      piece.tokens.push_back({Token::Kind::Operator, op, line_});
      pos_ += length;
      return Status::ok();
    }
    return lexError(line_, std::string("unexpected character '") + src_[pos_] + "'");
  }

  const std::string &src_;
  size_t pos_;
  int line_;
};

int countNewlines(const std::string &s, size_t from, size_t to) {
  int n = 0;
  for (size_t i = from; i < to; ++i)
    n += s[i] == '\n';
  return n;
}

StatusOr<std::vector<Piece>> splitPieces(const std::string &src) {
  std::vector<Piece> pieces;
  size_t pos = 0;
  int line = 1;
  while (pos < src.size()) {
    size_t open = pos;
    while ((open = src.find('{', open)) != std::string::npos && open + 1 < src.size() &&
           !std::strchr("{%#", src[open + 1]))
      ++open;
    if (open == std::string::npos || open + 1 >= src.size())
      open = src.size();
    if (open > pos) {
      Piece text;
      text.text = src.substr(pos, open - pos);
      text.line = line;
      pieces.push_back(std::move(text));
    }
    line += countNewlines(src, pos, open);
    if (open == src.size())
      break;
    Piece tag;
    tag.kind = src[open + 1] == '{'   ? Piece::Kind::Var
               : src[open + 1] == '%' ? Piece::Kind::Block
                                      : Piece::Kind::Comment;
    tag.line = line;
    pos = open + 2;
    if (pos < src.size() && (src[pos] == '-' || src[pos] == '+'))
      tag.leftModifier = src[pos++];
    if (tag.kind == Piece::Kind::Comment) {
      size_t close = src.find("#}", pos);
      if (close == std::string::npos)
        return lexError(line, "unexpected end of template: the comment opened here is not closed");
      if (close > pos && (src[close - 1] == '-' || src[close - 1] == '+'))
        tag.rightModifier = src[close - 1];
      line += countNewlines(src, pos, close);
      pos = close + 2;
    } else {
      TagLexer lexer(src, pos, line);
      DLM_RETURN_IF_ERROR(lexer.lexTag(tag.kind == Piece::Kind::Var ? '}' : '%', tag));
      pos = lexer.pos();
      line = lexer.line();
    }
    pieces.push_back(std::move(tag));
  }
  return pieces;
}

bool isBlockLike(const Piece &piece) {
  return piece.kind == Piece::Kind::Block || piece.kind == Piece::Kind::Comment;
}

// Whitespace control of the text after tag `previous`: `-` strips all leading white space,
// trim_blocks the first newline after a block or comment tag.
void trimAfter(Piece &text, const Piece *previous) {
  if (!previous)
    return;
  size_t cut = 0;
  if (previous->rightModifier == '-') {
    while (cut < text.text.size() && isSpace(text.text[cut]))
      ++cut;
  } else if (isBlockLike(*previous) && previous->rightModifier != '+' && !text.text.empty() &&
             text.text[0] == '\n') {
    cut = 1;
  }
  text.line += countNewlines(text.text, 0, cut);
  text.lineStarting = cut > 0 ? text.text[cut - 1] == '\n' : false;
  text.text.erase(0, cut);
}

// Whitespace control of the text before tag `next`: `-` strips all trailing white space,
// lstrip_blocks the indentation of a block or comment tag alone on its line.
void trimBefore(Piece &text, const Piece *next) {
  if (!next)
    return;
  std::string &t = text.text;
  if (next->leftModifier == '-') {
    size_t end = t.size();
    while (end > 0 && isSpace(t[end - 1]))
      --end;
    t.resize(end);
  } else if (isBlockLike(*next) && next->leftModifier != '+') {
    size_t lineStart = t.rfind('\n');
    lineStart = lineStart == std::string::npos ? 0 : lineStart + 1;
    if (lineStart == 0 && !text.lineStarting)
      return;
    bool allSpace = lineStart < t.size();
    for (size_t i = lineStart; i < t.size(); ++i)
      allSpace = allSpace && isSpace(t[i]);
    if (allSpace)
      t.resize(lineStart);
  }
}

} // namespace

StatusOr<std::vector<Token>> lexTemplate(std::string_view source) {
  std::string src = normalizeNewlines(source);
  DLM_ASSIGN_OR_RETURN(std::vector<Piece> pieces, splitPieces(src));
  std::vector<Token> tokens;
  for (size_t i = 0; i < pieces.size(); ++i) {
    Piece &piece = pieces[i];
    if (piece.kind == Piece::Kind::Text) {
      piece.lineStarting = true;
      trimAfter(piece, i > 0 ? &pieces[i - 1] : nullptr);
      trimBefore(piece, i + 1 < pieces.size() ? &pieces[i + 1] : nullptr);
      if (!piece.text.empty())
        tokens.push_back({Token::Kind::Text, piece.text, piece.line});
      continue;
    }
    if (piece.kind == Piece::Kind::Comment)
      continue;
    bool isVar = piece.kind == Piece::Kind::Var;
    tokens.push_back({isVar ? Token::Kind::VarBegin : Token::Kind::BlockBegin, "", piece.line});
    for (Token &token : piece.tokens)
      tokens.push_back(std::move(token));
    int endLine = tokens.back().line;
    tokens.push_back({isVar ? Token::Kind::VarEnd : Token::Kind::BlockEnd, "", endLine});
  }
  tokens.push_back({Token::Kind::End, "", tokens.empty() ? 1 : tokens.back().line});
  return tokens;
}

} // namespace dlm::chat
