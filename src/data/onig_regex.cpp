// Regex (onig_regex.h) on Oniguruma's C API.
#include "data/onig_regex.h"

#include <oniguruma.h>

#include <mutex>
#include <stdexcept>

#include "data/utf8.h"

namespace fsdp::data {
namespace {

// onig_initialize once per process; onig_new and onig_free under a lock: Oniguruma's FAQ forbids
// making or freeing regex objects on two threads at once, even different ones (the onig crate
// takes the same lock). Searches need none: they leave the regex object as it is.
std::mutex& compile_lock() {
  static std::mutex m;
  return m;
}

void initialize_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
  });
}

std::string onig_message(int code, OnigErrorInfo* info = nullptr) {
  UChar buf[ONIG_MAX_ERROR_MESSAGE_LEN];
  const int n = info ? onig_error_code_to_str(buf, code, info) : onig_error_code_to_str(buf, code);
  return std::string(reinterpret_cast<const char*>(buf), n > 0 ? static_cast<size_t>(n) : 0);
}

struct RegionDeleter {
  void operator()(OnigRegion* r) const { onig_region_free(r, 1); }
};
using Region = std::unique_ptr<OnigRegion, RegionDeleter>;

const UChar* bytes(std::string_view s) { return reinterpret_cast<const UChar*>(s.data()); }

}  // namespace

struct Regex::Compiled {
  regex_t* reg = nullptr;
  ~Compiled() {
    if (!reg) return;
    std::lock_guard<std::mutex> lock(compile_lock());
    onig_free(reg);
  }
};

Regex::Regex(const std::string& pattern, bool literal, const std::string& where)
    : compiled_(std::make_unique<Compiled>()), pattern_(pattern), where_(where) {
  if (pattern.size() > kMaxPatternBytes) {
    throw std::runtime_error(where + ": a regex pattern of " + std::to_string(pattern.size()) +
                             " bytes, more than " + std::to_string(kMaxPatternBytes));
  }
  // Oniguruma reads a pattern as UTF-8 characters and is not made to meet broken ones.
  if (first_invalid_utf8(pattern) != std::string::npos)
    throw std::runtime_error(where + ": regex \"" + utf8_lossy(pattern) + "\" is not UTF-8");
  initialize_once();
  OnigErrorInfo info{};
  const std::string_view p = pattern;
  int r;
  {
    std::lock_guard<std::mutex> lock(compile_lock());
    r = onig_new(&compiled_->reg, bytes(p), bytes(p) + p.size(), ONIG_OPTION_NONE,
                 ONIG_ENCODING_UTF8, literal ? ONIG_SYNTAX_ASIS : ONIG_SYNTAX_ONIGURUMA, &info);
  }
  if (r != ONIG_NORMAL) {
    compiled_->reg = nullptr;
    throw std::runtime_error(where + ": invalid regex \"" + pattern + "\": " +
                             onig_message(r, &info) + " (Oniguruma " + onig_version() + ")");
  }
}

Regex::~Regex() = default;

// onig's FindMatches::next over the whole text: each search starts where the last match ended
// (look-behind and \A still see the text before), and an empty match where the previous one ended
// moves the start one character on instead.
std::vector<std::pair<size_t, size_t>> Regex::find_all_valid(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  Region region(onig_region_new());
  const UChar *begin = bytes(text), *end = begin + text.size();
  size_t last_end = 0;
  bool matched = false;
  size_t last_match_end = 0;
  while (last_end <= text.size()) {
    onig_region_clear(region.get());
    const int r = onig_search(compiled_->reg, begin, end, begin + last_end, end, region.get(),
                              ONIG_OPTION_NONE);
    if (r == ONIG_MISMATCH) break;
    if (r < 0) {
      throw std::runtime_error(where_ + ": regex \"" + pattern_ + "\" failed on a text of " +
                               std::to_string(text.size()) + " bytes: " + onig_message(r));
    }
    const auto s = static_cast<size_t>(region->beg[0]), e = static_cast<size_t>(region->end[0]);
    if (s == e && matched && last_match_end == e) {
      last_end = last_end < text.size() ? decode_utf8(text, last_end).end : last_end + 1;
      continue;
    }
    last_end = e;
    matched = true;
    last_match_end = e;
    out.emplace_back(s, e);
  }
  return out;
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  if (first_invalid_utf8(text) == std::string::npos) return find_all_valid(text);
  // Hugging Face only ever sees valid UTF-8 (a Rust &str); our texts may hold stray bytes, which
  // the pre-tokenizers keep as they are (the byte-level model encodes them). Oniguruma would take
  // a lead byte's length on trust and read past the text, so each stray byte is searched as U+FFFD
  // (a symbol, as the hand-written matchers before this classed such bytes) and the match offsets
  // are mapped back.
  std::string clean;
  std::vector<size_t> original(1, 0);  // original[i]: the text offset of clean offset i
  for (size_t i = 0; i < text.size();) {
    const Utf8Char c = decode_utf8(text, i);
    const size_t before = clean.size();
    if (c.cp < 0)
      clean += "\xEF\xBF\xBD";
    else
      clean.append(text.substr(i, c.end - i));
    original.resize(clean.size() + 1, i);
    original[before] = i;
    i = c.end;
    original[clean.size()] = i;
  }
  auto matches = find_all_valid(clean);
  for (auto& [s, e] : matches) {
    s = original[s];
    e = original[e];
  }
  return matches;
}

bool Regex::matches_at(std::string_view text, size_t at) const {
  const UChar *begin = bytes(text), *end = begin + text.size();
  const int r = onig_match(compiled_->reg, begin, end, begin + at, nullptr, ONIG_OPTION_NONE);
  return r >= 0;
}

}  // namespace fsdp::data
