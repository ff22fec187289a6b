// How a pre-tokenizer cuts a piece of text, as tokenizers' NormalizedString::split does: a pattern
// marks the text as runs that match and runs that do not (a Regex, or a predicate on characters,
// each matching character a match of its own; Invert swaps the two), then a delimiter behaviour
// says what becomes of the matches (Removed, Isolated, MergedWithPrevious, MergedWithNext,
// Contiguous). Empty pieces are dropped, as PreTokenizedString::split drops them. The regexes
// that pre-tokenizers carry as their own (ByteLevel's GPT-2 pattern, Whitespace's) are here too.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/onig_regex.h"

namespace fsdp::data {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// A run of the text and whether the pattern matched it; a pattern's runs cover the text in order.
struct Span {
  size_t begin, end;
  bool match;
};

// Pattern for &SysRegex (utils/onig.rs): the matches and the text between them.
std::vector<Span> regex_spans(const Regex& re, std::string_view text, bool invert);
// Pattern for Fn(char) -> bool (tokenizer/pattern.rs); bytes that are not UTF-8 never match.
std::vector<Span> char_spans(std::string_view text, bool (*pred)(int64_t), bool invert = false);

// The [begin, end) pieces that `behavior` keeps of `spans`, none of them empty.
std::vector<std::pair<size_t, size_t>> split_spans(const std::vector<Span>& spans,
                                                   SplitBehavior behavior);

// pre_tokenizers/byte_level.rs's regex, compiled once.
const Regex& gpt2_regex();
// whitespace.rs's \w+|[^\w\s]+ with Rust regex's Unicode \w (Alphabetic, marks, Nd, Pc and the
// joiners U+200C, U+200D), which Oniguruma's \w (letters, marks, every number, Pc) is not.
const Regex& whitespace_regex();
// Rust regex's \w on one character (added tokens' single_word check).
const Regex& word_char_regex();

}  // namespace fsdp::data
