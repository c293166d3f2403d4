// The byte-level alphabet of GPT-2 style BPE: every byte 0-255 is shown as one printable Unicode
// character, so that any byte string becomes a string of vocabulary symbols (space is 'Ġ',
// newline is 'Ċ'). The ByteLevel pre-tokenizer maps text into this alphabet and the ByteLevel
// decoder maps tokens back to bytes.
#pragma once

#include <string>
#include <string_view>

namespace dlm::tokenizer {

// Appends the byte-level spelling of `bytes` (two or one UTF-8 bytes per input byte).
void appendByteLevelEncoded(std::string &out, std::string_view bytes);

// Appends the bytes a token stands for. A token that contains a character outside the byte-level
// alphabet (an added token such as "<|im start|>" with a real space) is appended unchanged, as
// Hugging Face's ByteLevel decoder does.
void appendByteLevelDecoded(std::string &out, std::string_view token);

} // namespace dlm::tokenizer
