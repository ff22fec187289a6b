// Unicode character classes for the pre-tokenizers' regular expressions: \p{L}, \p{N} and \s
// as Oniguruma (the regex engine of Hugging Face's tokenizers) defines them. Needs nothing but the
// standard library.
#pragma once

#include <cstdint>

namespace fsdp::data {

// The classes the pre-tokenizer patterns tell apart. kOther is everything else: punctuation,
// symbols, emoji, and bytes that are not valid UTF-8 (cp < 0).
enum class CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

CharClass char_class(int64_t cp);

}  // namespace fsdp::data
