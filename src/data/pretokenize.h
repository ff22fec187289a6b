// The regular expressions that split text into pre-tokens, written out by hand: GPT-2's (the
// ByteLevel pre-tokenizer's), and the Split patterns of Llama 3 and Qwen2 tokenizers. Each matcher
// follows Oniguruma's leftmost-first alternation and backtracking for its pattern exactly (classes
// from unicode_classes.h), so pre-tokens equal Hugging Face's. Any other pattern is refused by
// name, since a general regex engine is what we do not carry. Needs nothing but the standard
// library.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fsdp::data {

enum class SplitPattern { kGpt2, kLlama3, kQwen2 };

// The pattern's source text, exactly as tokenizer.json spells it (after JSON unescaping).
const char* split_pattern_source(SplitPattern p);

// The pattern whose source is `regex`; throws std::runtime_error quoting `regex` (and `where`, a
// file name for the message) when it is none of ours.
SplitPattern recognize_split_pattern(const std::string& regex, const std::string& where);

// Appends the pre-tokens of `text` (views into it, in order, together covering it) to `out`.
// Bytes that are not valid UTF-8 count as punctuation.
void split_pretokens(std::string_view text, SplitPattern p, std::vector<std::string_view>& out);

}  // namespace fsdp::data
