// dlm-tokenize: runs the runtime tokenizer from the command line, for tests and for checking a
// checkpoint's tokenizer.json by hand.
//
//   dlm-tokenize TOKENIZER.json --encode [--no-special-tokens]   text on stdin -> ids on stdout
//   dlm-tokenize TOKENIZER.json --decode [--skip-special-tokens]  ids on stdin  -> text on stdout
//   dlm-tokenize TOKENIZER.json --encode-jsonl [...]  one JSON string per line -> JSON id list
//   dlm-tokenize TOKENIZER.json --decode-jsonl [...]  one JSON id list per line -> JSON string
//   dlm-tokenize TOKENIZER.json --info                vocabulary size and added tokens
//
// The JSON-lines modes let a test compare thousands of samples with one process.
#include "runtime/tokenizer/Tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

namespace {

using Json = nlohmann::json;

int usage() {
  std::cerr << "usage: dlm-tokenize TOKENIZER.json (--encode | --decode | --encode-jsonl | "
               "--decode-jsonl | --info) [--no-special-tokens] [--skip-special-tokens]\n";
  return 2;
}

bool fitsInt32(long long value) { return value >= INT32_MIN && value <= INT32_MAX; }

std::string joinIds(const std::vector<int32_t> &ids) {
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i)
      line += ' ';
    line += std::to_string(ids[i]);
  }
  return line;
}

int encodeText(const dlm::Tokenizer &tokenizer, bool addSpecialTokens) {
  const std::string text((std::istreambuf_iterator<char>(std::cin)),
                         std::istreambuf_iterator<char>());
  std::cout << joinIds(tokenizer.encode(text, addSpecialTokens)) << '\n';
  return 0;
}

int decodeIds(const dlm::Tokenizer &tokenizer, bool skipSpecialTokens) {
  std::vector<int32_t> ids;
  long long id;
  while (std::cin >> id) {
    if (!fitsInt32(id)) {
      std::cerr << "dlm-tokenize: id " << id << " does not fit in 32 bits\n";
      return 1;
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  if (!std::cin.eof()) {
    std::cerr << "dlm-tokenize: --decode expects whitespace-separated integer ids\n";
    return 1;
  }
  dlm::StatusOr<std::string> text = tokenizer.decode(ids, skipSpecialTokens);
  if (!text) {
    std::cerr << "dlm-tokenize: " << text.status().message() << '\n';
    return 1;
  }
  std::cout << *text;
  return 0;
}

// Each input line is parsed on its own; a bad line is reported with its number.
int processJsonLines(const dlm::Tokenizer &tokenizer, bool encode, bool specialTokensFlag) {
  std::string line;
  size_t lineNumber = 0;
  while (std::getline(std::cin, line)) {
    ++lineNumber;
    const Json value = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (encode) {
      if (!value.is_string()) {
        std::cerr << "dlm-tokenize: line " << lineNumber << " is not a JSON string\n";
        return 1;
      }
      std::cout << Json(tokenizer.encode(value.get<std::string>(), specialTokensFlag)).dump()
                << '\n';
      continue;
    }
    std::vector<int32_t> ids;
    if (!value.is_array()) {
      std::cerr << "dlm-tokenize: line " << lineNumber << " is not a JSON list of ids\n";
      return 1;
    }
    for (const Json &id : value) {
      if (!id.is_number_integer() || !fitsInt32(id.get<int64_t>())) {
        std::cerr << "dlm-tokenize: line " << lineNumber << " has an id that is not a 32-bit "
                  << "integer\n";
        return 1;
      }
      ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    dlm::StatusOr<std::string> text = tokenizer.decode(ids, specialTokensFlag);
    if (!text) {
      std::cerr << "dlm-tokenize: line " << lineNumber << ": " << text.status().message() << '\n';
      return 1;
    }
    // ASCII-only JSON: raw U+2028 or U+0085 would look like line breaks to some readers.
    std::cout << Json(*text).dump(-1, ' ', /*ensure_ascii=*/true) << '\n';
  }
  return 0;
}

int printInfo(const dlm::Tokenizer &tokenizer) {
  std::cout << "vocab size: " << tokenizer.vocabSize() << '\n';
  std::cout << "prefix ids: " << joinIds(tokenizer.prefixTokenIds()) << '\n';
  std::cout << "suffix ids: " << joinIds(tokenizer.suffixTokenIds()) << '\n';
  for (const dlm::AddedToken &token : tokenizer.addedTokens())
    std::cout << "added " << token.id << ' ' << Json(token.content).dump()
              << (token.special ? " special" : "") << '\n';
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 3)
    return usage();
  std::string mode;
  bool noSpecialTokens = false, skipSpecialTokens = false;
  for (int i = 2; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "--no-special-tokens")
      noSpecialTokens = true;
    else if (argument == "--skip-special-tokens")
      skipSpecialTokens = true;
    else if (argument.rfind("--", 0) == 0 && mode.empty())
      mode = argument;
    else
      return usage();
  }
  dlm::StatusOr<dlm::Tokenizer> tokenizer = dlm::Tokenizer::fromFile(argv[1]);
  if (!tokenizer) {
    std::cerr << "dlm-tokenize: " << tokenizer.status().message() << '\n';
    return 1;
  }
  std::ios::sync_with_stdio(false);
  if (mode == "--encode")
    return encodeText(*tokenizer, !noSpecialTokens);
  if (mode == "--decode")
    return decodeIds(*tokenizer, skipSpecialTokens);
  if (mode == "--encode-jsonl")
    return processJsonLines(*tokenizer, /*encode=*/true, !noSpecialTokens);
  if (mode == "--decode-jsonl")
    return processJsonLines(*tokenizer, /*encode=*/false, skipSpecialTokens);
  if (mode == "--info")
    return printInfo(*tokenizer);
  return usage();
}
