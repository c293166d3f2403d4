// Real tokenizers on hostile text and ids, as a served model meets them: the bytes encoded as
// text (special tokens cut out or kept as text, post-processor tokens or not) by a byte-level BPE
// (the demo checkpoint's), a SentencePiece-style BPE with byte fallback (Gemma's layout) and a
// WordLevel vocabulary (DiffusionGemma's tiny fixture); the bytes read as ids (negative and past
// the vocabulary too) decoded whole and streamed, and the text's own ids streamed back.
#include "fuzz/FuzzSupport.h"
#include "runtime/tokenizer/Tokenizer.h"

#include <memory>
#include <vector>

namespace {

// Streaming decodes every prefix; past this many ids the cost is quadratic for no new paths.
constexpr size_t kStreamedIds = 64;

std::vector<std::unique_ptr<dlm::Tokenizer>> tokenizers;

void loadTokenizer(const std::string &relative) {
  auto loaded = dlm::Tokenizer::fromJson(dlm::fuzz::readFixture(relative));
  if (!loaded) {
    std::fprintf(stderr, "dlm fuzz: %s: %s\n", relative.c_str(),
                 loaded.status().message().c_str());
    std::exit(1);
  }
  tokenizers.push_back(std::make_unique<dlm::Tokenizer>(std::move(*loaded)));
}

// Two bytes a signed id: -32768..32767 covers every fixture's vocabulary, negative ids and ids
// past its end.
std::vector<int32_t> idsFromBytes(const uint8_t *data, size_t size) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < size; i += 2)
    ids.push_back(static_cast<int16_t>(data[i] | data[i + 1] << 8));
  return ids;
}

void decodeStreamed(const dlm::Tokenizer &tokenizer, const std::vector<int32_t> &ids) {
  std::vector<int32_t> prefix;
  for (size_t i = 0; i < ids.size() && i < kStreamedIds; ++i) {
    prefix.push_back(ids[i]);
    if (!tokenizer.decodeBytes(prefix, /*skipSpecialTokens=*/true))
      return; // an id naming no token fails every longer prefix as well
  }
}

void decodeAllWays(const dlm::Tokenizer &tokenizer, const std::vector<int32_t> &ids) {
  (void)tokenizer.decode(ids, /*skipSpecialTokens=*/false);
  (void)tokenizer.decode(ids, /*skipSpecialTokens=*/true);
  (void)tokenizer.decodeBytes(ids, /*skipSpecialTokens=*/false);
  decodeStreamed(tokenizer, ids);
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  loadTokenizer("tests/models/demo/checkpoint/tokenizer.json");
  loadTokenizer("fuzz/fixtures/sentencepiece_gemma.tokenizer.json");
  loadTokenizer("tests/reference/diffusion_gemma/fixtures/tiny_bf16/tokenizer.json");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string_view text = dlm::fuzz::asText(data, size);
  const std::vector<int32_t> byteIds = idsFromBytes(data, size);
  for (const auto &tokenizer : tokenizers) {
    decodeStreamed(*tokenizer, tokenizer->encode(text, /*addSpecialTokens=*/true,
                                                 /*specialTokensAsText=*/false));
    (void)tokenizer->encode(text, /*addSpecialTokens=*/false, /*specialTokensAsText=*/true);
    decodeAllWays(*tokenizer, byteIds);
  }
  return 0;
}
