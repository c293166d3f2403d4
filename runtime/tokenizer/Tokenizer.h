// Hugging Face tokenizer.json for BPE and WordLevel models, implemented without Python or Rust:
// byte-level BPE (GPT-2, Llama 3, Qwen2/3, LLaDA, Dream), SentencePiece-converted BPE with byte
// fallback (Gemma, Llama 2, Mistral) and word-level vocabularies (the tiny DiffusionGemma test
// checkpoints). Added tokens are cut out first, the rest is normalized, pre-tokenized and turned
// into ids by the model, then the post-processor adds special tokens. encode() and
// decode() give the same ids and text as the `tokenizers` library does for these files.
//
// A Tokenizer is immutable after loading and safe to use from several threads.
#pragma once

#include "support/Status.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dlm {

// An entry of "added_tokens": special tokens such as <|endoftext|> and extra ordinary tokens.
struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;    // skipped by decode(skipSpecialTokens = true)
  bool singleWord = false; // only matches when not inside a word
  bool lstrip = false;     // swallows white space on its left
  bool rstrip = false;     // swallows white space on its right
  bool normalized = true;  // matched against normalized text rather than the raw text
};

class Tokenizer {
public:
  // Errors name the problem: "tokenizer.json is not valid JSON: ...", "not supported yet:
  // tokenizer model 'Unigram'", "BPE merge 3 (...) references unknown token 'x'", ...
  static StatusOr<Tokenizer> fromJson(const std::string &jsonText);
  static StatusOr<Tokenizer> fromFile(const std::string &path);

  Tokenizer(Tokenizer &&) noexcept;
  Tokenizer &operator=(Tokenizer &&) noexcept;
  ~Tokenizer();

  // Token ids of `text`. Invalid UTF-8 is first replaced by U+FFFD. With addSpecialTokens the
  // post-processor's tokens are added (Llama 3's BOS), as Hugging Face's encode(text) does.
  // With specialTokensAsText the special added tokens (special: true) are not cut out: their
  // text is encoded like any other, as transformers' encode(..., split_special_tokens=True) does
  // (tokenizers' encode_special_tokens). Ordinary added tokens are still matched.
  std::vector<int32_t> encode(std::string_view text, bool addSpecialTokens = true,
                              bool specialTokensAsText = false) const;

  // Text of `ids`; byte sequences that are not valid UTF-8 become U+FFFD, as in Hugging Face.
  // Fails on an id that names no token.
  StatusOr<std::string> decode(const std::vector<int32_t> &ids,
                               bool skipSpecialTokens = false) const;
  // The part of decode() that later ids cannot change, for streaming: a character cut short at
  // the very end (byte-level BPE) stays as its first raw bytes instead of becoming U+FFFD, and a
  // run of <0xNN> tokens at the very end (byte fallback) is left out, since Hugging Face turns a
  // whole run into U+FFFDs when it does not end as valid UTF-8. A streaming caller decodes the
  // ids so far, emits text up to the last complete character, and ends with decode().
  StatusOr<std::string> decodeBytes(const std::vector<int32_t> &ids,
                                    bool skipSpecialTokens = false) const;
  // Generated ids as a user reads them: special tokens skipped and ids that name no token (a
  // vocabulary padded past the tokenizer's) left out, as Hugging Face's decode skips them.
  // `final`: decode(); otherwise decodeBytes(), of which streamableLength() bytes may go out.
  StatusOr<std::string> decodeGenerated(const std::vector<int32_t> &ids, bool final) const;
  // The length of decodeBytes()'s text that is final: all of it but a character cut short at
  // its end.
  static size_t streamableLength(std::string_view text);

  // Vocabulary lookups cover the model's vocabulary and the added tokens.
  std::optional<int32_t> tokenToId(std::string_view token) const;
  std::optional<std::string> idToToken(int32_t id) const;
  // One more than the largest id (the embedding table needs at least this many rows).
  int32_t vocabSize() const;

  const std::vector<AddedToken> &addedTokens() const;
  // The id of a special added token with this content, e.g. "<|mdm_mask|>".
  std::optional<int32_t> specialTokenId(std::string_view content) const;
  bool isSpecialToken(int32_t id) const;
  // Ids the post-processor puts before / after a sequence when special tokens are added.
  const std::vector<int32_t> &prefixTokenIds() const;
  const std::vector<int32_t> &suffixTokenIds() const;

private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace dlm
