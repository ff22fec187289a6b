// The pre-token matchers of pretokenize.h. Text is first decoded into characters with their
// classes; each pattern is then a function from a start character to the end of the match that
// Oniguruma would find there. Every character starts some alternative's match in these patterns,
// so matches are contiguous and the scan never skips text.
#include "data/pretokenize.h"

#include <stdexcept>

#include "data/unicode_classes.h"
#include "data/utf8.h"

namespace fsdp::data {
namespace {

const char kGpt2[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char kLlama3[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char kQwen2[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The text as characters: where each starts (start.back() is the text's size), its code point
// (-1: a stray byte) and class.
struct Chars {
  std::vector<size_t> start;
  std::vector<int64_t> cp;
  std::vector<CharClass> cls;
  size_t size() const { return cls.size(); }
  bool is(size_t k, char32_t c) const { return k < size() && cp[k] == static_cast<int64_t>(c); }
  bool is_class(size_t k, CharClass c) const { return k < size() && cls[k] == c; }
  bool newline(size_t k) const { return is(k, '\r') || is(k, '\n'); }
};

Chars decode(std::string_view text) {
  Chars c;
  c.start.reserve(text.size() + 1);
  c.cp.reserve(text.size());
  c.cls.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const Utf8Char u = decode_utf8(text, i);
    c.start.push_back(i);
    c.cp.push_back(u.cp);
    c.cls.push_back(char_class(u.cp));
    i = u.end;
  }
  c.start.push_back(text.size());
  return c;
}

// The end of the run of class `cls` that starts at k.
size_t run_end(const Chars& c, size_t k, CharClass cls) {
  while (k < c.size() && c.cls[k] == cls) ++k;
  return k;
}

// 's|'t|'re|'ve|'m|'ll|'d at k, case-sensitively or (Oniguruma's (?i:...)) with simple case
// folding, under which only U+017F (long s) joins the ASCII letters: the match's end, or k.
size_t contraction(const Chars& c, size_t k, bool fold) {
  if (!c.is(k, '\'') || k + 1 >= c.size()) return k;
  auto letter = [&](size_t i, char l) {
    if (i >= c.size()) return false;
    const int64_t cp = c.cp[i];
    if (cp == l) return true;
    return fold && (cp == l - 'a' + 'A' || (l == 's' && cp == 0x17F));
  };
  for (char l : {'s', 't'})
    if (letter(k + 1, l)) return k + 2;
  if (letter(k + 1, 'r') && letter(k + 2, 'e')) return k + 3;
  if (letter(k + 1, 'v') && letter(k + 2, 'e')) return k + 3;
  if (letter(k + 1, 'm')) return k + 2;
  if (letter(k + 1, 'l') && letter(k + 2, 'l')) return k + 3;
  if (letter(k + 1, 'd')) return k + 2;
  return k;
}

// \s+(?!\S)|\s+ at a whitespace character k: the run, less its last character when a
// non-space follows and the run is longer than one.
size_t space_run(const Chars& c, size_t k) {
  const size_t e = run_end(c, k, CharClass::kSpace);
  return e < c.size() && e - k > 1 ? e - 1 : e;
}

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t gpt2_match(const Chars& c, size_t k) {
  if (size_t e = contraction(c, k, false); e != k) return e;
  size_t j = k;
  if (c.is(k, ' ') && k + 1 < c.size() && c.cls[k + 1] != CharClass::kSpace) ++j;
  if (c.cls[j] != CharClass::kSpace) return run_end(c, j, c.cls[j]);
  return space_run(c, k);
}

// [^\r\n\p{L}\p{N}]?\p{L}+ at k, or k.
size_t optional_prefix_letters(const Chars& c, size_t k) {
  const bool prefix =
      !c.newline(k) && (c.cls[k] == CharClass::kSpace || c.cls[k] == CharClass::kOther);
  if (prefix && c.is_class(k + 1, CharClass::kLetter)) return run_end(c, k + 1, CharClass::kLetter);
  if (c.cls[k] == CharClass::kLetter) return run_end(c, k, CharClass::kLetter);
  return k;
}

// " ?[^\s\p{L}\p{N}]+[\r\n]*" at k, or k.
size_t punctuation(const Chars& c, size_t k) {
  size_t j = c.is(k, ' ') && c.is_class(k + 1, CharClass::kOther) ? k + 1 : k;
  if (c.cls[j] != CharClass::kOther) return k;
  j = run_end(c, j, CharClass::kOther);
  while (c.newline(j)) ++j;
  return j;
}

// \s*[\r\n]+ at k: through the last newline of the whitespace run at k, or k.
size_t spaces_to_newline(const Chars& c, size_t k) {
  size_t end = k;
  for (size_t i = k; i < c.size() && c.cls[i] == CharClass::kSpace; ++i)
    if (c.newline(i)) end = i + 1;
  return end;
}

// Llama 3 (max_digits 3) and Qwen2 (1): (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|
// \p{N}{1,max_digits}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
size_t llama3_match(const Chars& c, size_t k, size_t max_digits) {
  if (size_t e = contraction(c, k, true); e != k) return e;
  if (size_t e = optional_prefix_letters(c, k); e != k) return e;
  if (c.cls[k] == CharClass::kNumber) {
    const size_t e = run_end(c, k, CharClass::kNumber);
    return e - k > max_digits ? k + max_digits : e;
  }
  if (size_t e = punctuation(c, k); e != k) return e;
  if (size_t e = spaces_to_newline(c, k); e != k) return e;
  return space_run(c, k);
}

size_t match(const Chars& c, size_t k, SplitPattern p) {
  switch (p) {
    case SplitPattern::kGpt2:
      return gpt2_match(c, k);
    case SplitPattern::kLlama3:
      return llama3_match(c, k, 3);
    case SplitPattern::kQwen2:
      return llama3_match(c, k, 1);
  }
  return k + 1;
}

}  // namespace

const char* split_pattern_source(SplitPattern p) {
  switch (p) {
    case SplitPattern::kGpt2:
      return kGpt2;
    case SplitPattern::kLlama3:
      return kLlama3;
    case SplitPattern::kQwen2:
      return kQwen2;
  }
  return "";
}

SplitPattern recognize_split_pattern(const std::string& regex, const std::string& where) {
  for (SplitPattern p : {SplitPattern::kGpt2, SplitPattern::kLlama3, SplitPattern::kQwen2})
    if (regex == split_pattern_source(p)) return p;
  throw std::runtime_error(where + ": unsupported Split regex \"" + regex +
                           "\" (supported: the GPT-2, Llama 3 and Qwen2 pre-tokenizer patterns)");
}

void split_pretokens(std::string_view text, SplitPattern p, std::vector<std::string_view>& out) {
  const Chars c = decode(text);
  for (size_t k = 0; k < c.size();) {
    size_t e = match(c, k, p);
    if (e <= k) e = k + 1;  // unreachable for these patterns; guarantees progress
    out.push_back(text.substr(c.start[k], c.start[e] - c.start[k]));
    k = e;
  }
}

}  // namespace fsdp::data
