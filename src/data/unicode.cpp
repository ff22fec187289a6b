// unicode.h on utf8proc.
#include "data/unicode.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>
#include <stdexcept>

#include "data/utf8.h"

namespace fsdp::data {
namespace {

utf8proc_option_t options_of(NormalForm form) {
  // Without UTF8PROC_NULLTERM: the length is given, so a NUL character is text like any other.
  switch (form) {
    case NormalForm::kNfc:
      return static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    case NormalForm::kNfkc:
      return static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    case NormalForm::kNfd:
      return static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
    case NormalForm::kNfkd:
      return static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  }
  return UTF8PROC_STABLE;
}

// One stretch of valid UTF-8 through utf8proc_map.
void normalize_valid(std::string_view s, NormalForm form, std::string& out) {
  if (s.empty()) return;
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                   static_cast<utf8proc_ssize_t>(s.size()), &result, options_of(form));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(result, &std::free);
  if (n < 0) throw std::runtime_error(std::string("utf8proc: ") + utf8proc_errmsg(n));
  out.append(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
}

}  // namespace

std::string normalize_unicode(std::string_view text, NormalForm form) {
  std::string out;
  out.reserve(text.size());
  size_t run = 0;  // where the current valid stretch began
  for (size_t i = 0; i < text.size();) {
    const Utf8Char c = decode_utf8(text, i);
    if (c.cp < 0) {
      normalize_valid(text.substr(run, i - run), form, out);
      out += text[i];
      run = c.end;
    }
    i = c.end;
  }
  normalize_valid(text.substr(run), form, out);
  return out;
}

std::string to_lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const Utf8Char c = decode_utf8(text, i);
    if (c.cp < 0) {
      out += text[i];
    } else if (c.cp == 0x130) {  // SpecialCasing.txt: LATIN CAPITAL LETTER I WITH DOT ABOVE
      out += "i\xCC\x87";
    } else {
      append_utf8(out,
                  static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c.cp))));
    }
    i = c.end;
  }
  return out;
}

bool is_whitespace(int64_t cp) {
  if (cp < 0) return false;
  if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return true;
  if (cp < 0x80) return false;
  // The White_Space property's other members (PropList.txt), as Rust's core::unicode holds them.
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool is_numeric(int64_t cp) {
  if (cp < 0) return false;
  const auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool is_punctuation(int64_t cp) {
  if (cp < 0) return false;
  const bool ascii = (cp >= '!' && cp <= '/') || (cp >= ':' && cp <= '@') ||
                     (cp >= '[' && cp <= '`') || (cp >= '{' && cp <= '~');
  if (ascii) return true;
  const auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

const char* unicode_version() { return utf8proc_unicode_version(); }

}  // namespace fsdp::data
