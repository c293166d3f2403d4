// Character classes of Rust's regex crate, which Hugging Face tokenizers uses for white space and
// word boundaries (lstrip / rstrip / single_word of added tokens, the Whitespace and
// WhitespaceSplit pre-tokenizers). ICU supplies the Unicode properties.
#pragma once

namespace dlm::tokenizer {

// Rust regex's \s and char::is_whitespace: the Unicode White_Space property.
bool isWhiteSpace(char32_t c);

// Rust regex's \w: [\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}].
bool isWordCharacter(char32_t c);

} // namespace dlm::tokenizer
