// The tokenizer's regular expressions (Split and Replace patterns, ByteLevel's and Whitespace's
// own), compiled by Oniguruma: the engine Hugging Face's tokenizers runs them on (its onig crate,
// SysRegex in utils/onig.rs), with the same syntax (ONIG_SYNTAX_ONIGURUMA, Oniguruma 6.9's default
// and the crate's Syntax::default()), no options, UTF-8, and the crate's find_iter, so that matches
// are the same. Only the data room includes Oniguruma's header (through onig_regex.cpp).
//
// Thread-safe once built: searches share the compiled pattern and keep their state on their own.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fsdp::data {

class Regex {
 public:
  // Patterns longer than this are refused: the longest published one (DeepSeek V3's) is under
  // 1 KiB, and Oniguruma's compile time and memory grow with the pattern.
  static constexpr size_t kMaxPatternBytes = 16 * 1024;

  // Compiles `pattern`, or matches it as plain text when `literal` (tokenizers escapes a
  // {"String": ...} pattern; ONIG_SYNTAX_ASIS is that escape). Throws std::runtime_error naming
  // `where` (a file), the pattern and Oniguruma's own message when it does not compile.
  Regex(const std::string& pattern, bool literal, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // The [begin, end) byte ranges of the matches in `text`, leftmost first and not overlapping, as
  // onig's FindMatches yields them: an empty match right where the previous match ended is not
  // taken (the search moves one character on). Bytes that are not UTF-8 are searched as U+FFFD
  // (never as what they would decode to, and never read past the text) and the offsets are the
  // text's own. Throws when Oniguruma gives up (its retry limit, on catastrophic backtracking).
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

  // Whether the pattern matches at `at` (anchored there); `text` must be valid UTF-8.
  bool matches_at(std::string_view text, size_t at) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::vector<std::pair<size_t, size_t>> find_all_valid(std::string_view text) const;

  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
  std::string pattern_, where_;
};

}  // namespace fsdp::data
