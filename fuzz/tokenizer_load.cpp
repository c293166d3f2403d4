// tokenizer.json as the importer and the runtime load it (Tokenizer::fromJson), and a tokenizer
// that loads put to work as a served model uses it: a fixed text with special tokens, multi-byte
// and invalid UTF-8 encoded both ways, the ids decoded whole and as a stream, vocabulary lookups.
#include "fuzz/FuzzSupport.h"
#include "runtime/tokenizer/Tokenizer.h"

namespace {

// Added-token texts of the seeds' families, white space runs, digits, CJK, an emoji, a lone
// continuation byte and a truncated character.
constexpr std::string_view kText =
    "<|startoftext|>Hello  world,\tit's 2024!\n\n<|im_start|>user <|mdm_mask|><mask> "
    "\xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80 caf\xC3\xA9 \x80 end\xE6\x97";

void decodeAllWays(const dlm::Tokenizer &tokenizer, const std::vector<int32_t> &ids) {
  for (bool skipSpecial : {false, true}) {
    (void)tokenizer.decode(ids, skipSpecial);
    // What a streaming caller decodes: every prefix (the seeds' texts give a few dozen ids).
    std::vector<int32_t> prefix;
    for (int32_t id : ids) {
      prefix.push_back(id);
      (void)tokenizer.decodeBytes(prefix, skipSpecial);
    }
  }
}

void lookUpVocabulary(const dlm::Tokenizer &tokenizer) {
  const int32_t size = tokenizer.vocabSize();
  for (int32_t id : {-1, 0, 1, size / 2, size - 1, size, size + 1})
    if (std::optional<std::string> token = tokenizer.idToToken(id))
      (void)tokenizer.tokenToId(*token);
  for (const dlm::AddedToken &added : tokenizer.addedTokens())
    (void)tokenizer.specialTokenId(added.content);
  (void)tokenizer.isSpecialToken(0);
  (void)tokenizer.prefixTokenIds();
  (void)tokenizer.suffixTokenIds();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  auto tokenizer = dlm::Tokenizer::fromJson(std::string(dlm::fuzz::asText(data, size)));
  if (!dlm::fuzz::succeeded("Tokenizer::fromJson", tokenizer))
    return 0;
  for (bool addSpecial : {true, false})
    for (bool specialAsText : {false, true})
      decodeAllWays(*tokenizer, tokenizer->encode(kText, addSpecial, specialAsText));
  lookUpVocabulary(*tokenizer);
  return 0;
}
