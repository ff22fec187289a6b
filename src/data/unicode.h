// What the tokenizer needs to know of Unicode, from utf8proc rather than tables of our own: the
// normalization forms (the NFC, NFKC, NFD and NFKD normalizers), Rust's char::to_lowercase (the
// Lowercase normalizer), and the character predicates the pre-tokenizers split on, each defined
// as the Rust function tokenizers calls. Bytes that are not valid UTF-8 are kept as they are: a
// normalization runs on each valid stretch between them (so nothing composes across one), and
// no predicate holds for one. Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace fsdp::data {

enum class NormalForm { kNfc, kNfkc, kNfd, kNfkd };

std::string normalize_unicode(std::string_view text, NormalForm form);

// Each character through Rust's char::to_lowercase: the full (SpecialCasing) mapping where it has
// one, which for lowercasing is U+0130 alone ("İ" -> "i̇"); Σ is always σ (no final-sigma rule).
std::string to_lowercase(std::string_view text);

bool is_whitespace(int64_t cp);   // char::is_whitespace: the White_Space property
bool is_numeric(int64_t cp);      // char::is_numeric: categories Nd, Nl, No
bool is_punctuation(int64_t cp);  // punctuation.rs is_punc: ASCII punctuation or categories P*

// The Unicode version of utf8proc's tables, e.g. "15.0.0".
const char* unicode_version();

}  // namespace fsdp::data
