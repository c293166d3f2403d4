// The text notation of decode records (the grammar is in DecodeProgram.h).
#include "runtime/program/DecodeProgram.h"

#include "runtime/program/DecodeProgramSpec.h"
#include "support/SplitText.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace dlm::program {

namespace dspec = spec::decode;

namespace {

constexpr std::string_view kProgramLine = "program";
constexpr std::string_view kArrow = "->";

bool isIdentifierStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool isIdentifierChar(char c) { return isIdentifierStart(c) || (c >= '0' && c <= '9'); }
bool isNameChar(char c) { return isIdentifierChar(c) || c == '.' || c == '-'; }
bool isBareChar(char c) { return isNameChar(c) || c == ',' || c == ':'; }
bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\r'; }
bool isSigil(char c) {
  return c == dspec::kRegisterPrefix || c == dspec::kKnobPrefix || c == dspec::kFactPrefix;
}

bool all(std::string_view text, bool (*predicate)(char)) {
  for (char c : text)
    if (!predicate(c))
      return false;
  return true;
}

bool isIdentifier(std::string_view text) {
  return !text.empty() && isIdentifierStart(text[0]) && all(text, isIdentifierChar);
}

// Words that read as a bool or real and so cannot be bare text.
bool isKeyword(std::string_view word) {
  return word == "true" || word == "false" || word == "inf" || word == "nan";
}

bool isBareWord(std::string_view text) {
  return !text.empty() && isIdentifierStart(text[0]) && all(text, isBareChar) && !isKeyword(text);
}

// ---- Parsing ----------------------------------------------------------------------------------

class LineParser {
public:
  LineParser(std::string_view line, size_t number) : line_(line), number_(number) {}

  Status error(const std::string &message) const {
    return Status::error("line " + std::to_string(number_) + ": " + message);
  }

  void skipSpaces() {
    while (pos_ < line_.size() && isSpace(line_[pos_]))
      ++pos_;
  }
  bool atEnd() const { return pos_ >= line_.size(); }
  char peek() const { return atEnd() ? '\0' : line_[pos_]; }
  bool consume(std::string_view text) {
    if (line_.substr(pos_, text.size()) != text)
      return false;
    pos_ += text.size();
    return true;
  }

  std::string_view take(bool (*predicate)(char)) {
    const size_t start = pos_;
    while (pos_ < line_.size() && predicate(line_[pos_]))
      ++pos_;
    return line_.substr(start, pos_ - start);
  }

  // The rest of a token: up to the next space.
  std::string_view word() {
    const size_t start = pos_;
    while (pos_ < line_.size() && !isSpace(line_[pos_]))
      ++pos_;
    return line_.substr(start, pos_ - start);
  }

  StatusOr<std::string> quoted() {
    ++pos_; // the opening quote
    std::string text;
    while (pos_ < line_.size() && line_[pos_] != '"') {
      char c = line_[pos_++];
      if (c == '\\') {
        if (pos_ >= line_.size())
          break;
        const char escaped = line_[pos_++];
        c = escaped == 'n' ? '\n' : escaped == 't' ? '\t' : escaped;
        if (escaped != 'n' && escaped != 't' && escaped != '"' && escaped != '\\')
          return error(std::string("unknown escape '\\") + escaped + "'");
      }
      text += c;
    }
    if (pos_ >= line_.size())
      return error("unterminated quoted text");
    ++pos_; // the closing quote
    if (!atEnd() && !isSpace(peek()))
      return error("expected a space after quoted text");
    return text;
  }

  StatusOr<artifact::AttributeValue> value() {
    if (atEnd() || isSpace(peek()))
      return error("missing value");
    if (peek() == '"') {
      StatusOr<std::string> text = quoted();
      if (!text)
        return text.status();
      // A literal that starts like a reference keeps its first character doubled.
      if (!text->empty() && isSigil((*text)[0]))
        text->insert(text->begin(), (*text)[0]);
      return artifact::AttributeValue(std::move(*text));
    }
    const std::string_view token = word();
    if (isSigil(token[0])) {
      if (!isIdentifier(token.substr(1)))
        return error("'" + std::string(token) + "' is not a reference (" + token[0] +
                     " and a name)");
      return artifact::AttributeValue(std::string(token));
    }
    if (token == "true" || token == "false")
      return artifact::AttributeValue(token == "true");
    if (isBareWord(token))
      return artifact::AttributeValue(std::string(token));
    return number(token);
  }

  StatusOr<artifact::AttributeValue> number(std::string_view token) const {
    const std::string text(token);
    if (text == "inf" || text == "-inf")
      return artifact::AttributeValue(text[0] == '-' ? -std::numeric_limits<double>::infinity()
                                                     : std::numeric_limits<double>::infinity());
    if (text == "nan")
      return artifact::AttributeValue(std::numeric_limits<double>::quiet_NaN());
    const bool integral = text.find_first_of(".eE") == std::string::npos;
    char *end = nullptr;
    errno = 0;
    if (integral) {
      const long long integer = std::strtoll(text.c_str(), &end, 10);
      if (end == text.c_str() + text.size() && errno == 0 && !text.empty())
        return artifact::AttributeValue(static_cast<int64_t>(integer));
    } else {
      const double real = std::strtod(text.c_str(), &end);
      if (end == text.c_str() + text.size() && errno == 0 && text != "." &&
          text.find_first_of("xXpP") == std::string::npos)
        return artifact::AttributeValue(real);
    }
    return error("'" + text + "' is not a value (quote text that is not a bare word)");
  }

  size_t position() const { return pos_; }
  void rewind(size_t position) { pos_ = position; }

private:
  std::string_view line_;
  size_t number_;
  size_t pos_ = 0;
};

// `line` without its comment ('#' outside quotes).
std::string_view stripComment(std::string_view line) {
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    if (quoted && line[i] == '\\') {
      ++i;
      continue;
    }
    if (line[i] == '"')
      quoted = !quoted;
    else if (line[i] == '#' && !quoted)
      return line.substr(0, i);
  }
  return line;
}

const dspec::ParamSpec *findParam(const dspec::KindSpec *kind, std::string_view key) {
  if (!kind)
    return nullptr;
  const size_t index = dspec::paramIndex(*kind, key);
  return index < kind->paramCount ? &kind->params[index] : nullptr;
}

Status parseRecordTail(LineParser &parser, DecodeRecord &record) {
  const dspec::KindSpec *kind = dspec::findKind(record.kind);
  bool results = false;
  while (true) {
    parser.skipSpaces();
    if (parser.atEnd())
      return Status::ok();
    if (parser.consume(kArrow)) {
      if (results)
        return parser.error("a second '->'");
      results = true;
      continue;
    }
    const size_t start = parser.position();
    const std::string key(parser.take(isIdentifierChar));
    if (key.empty() || !isIdentifierStart(key[0]) || !parser.consume("=")) {
      parser.rewind(start);
      return parser.error("expected key=value, got '" + std::string(parser.word()) + "'");
    }
    StatusOr<artifact::AttributeValue> value = parser.value();
    if (!value)
      return value.status();
    if (record.parameters.count(key))
      return parser.error("parameter '" + key + "' given twice");
    // The arrow is checked against the spec for the kinds it knows; the loader rejects others.
    const dspec::ParamSpec *param = findParam(kind, key);
    const bool isResult = param && param->role == dspec::ParamRole::result;
    if (param && isResult != results)
      return parser.error("'" + key + "' " +
                          (isResult ? "is a result of '" + record.kind + "': put it after '->'"
                                    : "is not a result of '" + record.kind + "'"));
    record.parameters.emplace(key, std::move(*value));
  }
}

StatusOr<std::string> parseName(LineParser &parser) {
  if (parser.peek() == '"')
    return parser.quoted();
  std::string name(parser.take(isNameChar));
  if (name.empty())
    return parser.error("expected a record name after ':'");
  return name;
}

} // namespace

StatusOr<DecodeProgramText> parseDecodeProgram(std::string_view text) {
  DecodeProgramText program;
  size_t number = 0;
  for (std::string_view line : splitText(text, '\n')) {
    LineParser parser(stripComment(line), ++number);
    parser.skipSpaces();
    if (parser.atEnd())
      continue;
    DecodeRecord record;
    record.kind = std::string(parser.take(isIdentifierChar));
    if (record.kind.empty() || !isIdentifierStart(record.kind[0]))
      return parser.error("expected a record kind, got '" + std::string(parser.word()) + "'");
    if (record.kind == kProgramLine) {
      if (!program.records.empty() || !program.policy.empty())
        return parser.error("'program' must be the first line");
      parser.skipSpaces();
      StatusOr<artifact::AttributeValue> name = parser.value();
      if (!name)
        return name.status();
      const auto *policy = std::get_if<std::string>(&*name);
      parser.skipSpaces();
      if (!policy || policy->empty() || !parser.atEnd())
        return parser.error("expected 'program <name>'");
      program.policy = *policy;
      continue;
    }
    if (parser.consume(":")) {
      StatusOr<std::string> name = parseName(parser);
      if (!name)
        return name.status();
      record.name = std::move(*name);
    }
    if (!parser.atEnd() && !isSpace(parser.peek()))
      return parser.error("expected a space after '" + record.kind + "'");
    DLM_RETURN_IF_ERROR(parseRecordTail(parser, record));
    program.records.push_back(std::move(record));
  }
  return program;
}

// ---- Printing ---------------------------------------------------------------------------------

namespace {

std::string quote(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c == '\n' ? std::string("\\n") : c == '\t' ? std::string("\\t") : std::string(1, c);
  }
  return out + "\"";
}

// The shortest %g form that reads back as `value`, with a '.' or an exponent so that it reads
// back as a real.
std::string realText(double value) {
  if (std::isnan(value))
    return "nan";
  if (std::isinf(value))
    return value < 0 ? "-inf" : "inf";
  char text[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(text, sizeof text, "%.*g", precision, value);
    if (std::strtod(text, nullptr) == value)
      break;
  }
  std::string out = text;
  if (out.find_first_of(".eE") == std::string::npos)
    out += ".0";
  return out;
}

std::string valueText(const artifact::AttributeValue &value) {
  if (const auto *text = std::get_if<std::string>(&value)) {
    if (!text->empty() && isSigil((*text)[0])) {
      if (text->size() > 1 && (*text)[1] == (*text)[0])
        return quote(text->substr(1)); // a literal that starts like a reference
      return *text;                    // a reference
    }
    return isBareWord(*text) ? *text : quote(*text);
  }
  if (const auto *real = std::get_if<double>(&value))
    return realText(*real);
  return artifact::attributeValueText(value);
}

std::string pair(const std::string &key, const artifact::AttributeValue &value) {
  return " " + key + "=" + valueText(value);
}

} // namespace

std::string printDecodeRecord(const DecodeRecord &record) {
  std::string out = record.kind;
  if (!record.name.empty())
    out += ":" + (all(record.name, isNameChar) ? record.name : quote(record.name));
  const dspec::KindSpec *kind = dspec::findKind(record.kind);
  std::string results;
  // Known parameters in the order of the kind's table, then the others by key.
  if (kind) {
    for (size_t i = 0; i < kind->paramCount; ++i) {
      const dspec::ParamSpec &param = kind->params[i];
      auto it = record.parameters.find(param.key);
      if (it == record.parameters.end())
        continue;
      (param.role == dspec::ParamRole::result ? results : out) += pair(it->first, it->second);
    }
  }
  for (const auto &[key, value] : record.parameters)
    if (!findParam(kind, key))
      out += pair(key, value);
  if (!results.empty())
    out += " " + std::string(kArrow) + results;
  return out;
}

std::string printDecodeProgram(const DecodeProgramText &program) {
  std::string out;
  if (!program.policy.empty())
    out += std::string(kProgramLine) + " " + valueText(program.policy) + "\n";
  int depth = 0;
  for (const DecodeRecord &record : program.records) {
    const bool closes = record.kind == dspec::kKindEnd || record.kind == dspec::kKindElse;
    const bool opens = record.kind == dspec::kKindBlockLoop ||
                       record.kind == dspec::kKindDenoiseLoop || record.kind == dspec::kKindIf ||
                       record.kind == dspec::kKindElse;
    if (closes && depth > 0)
      --depth;
    out += std::string(static_cast<size_t>(2 * depth), ' ') + printDecodeRecord(record) + "\n";
    if (opens)
      ++depth;
  }
  return out;
}

} // namespace dlm::program
