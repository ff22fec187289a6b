// UTF-8 decoding shared by the tokenizer (which keeps bytes that are not UTF-8 as they are) and the
// trainer's config (which refuses them): one definition of well-formed, with no overlong forms, no
// surrogates and nothing past U+10FFFF. Needs nothing but the standard library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace fsdp::data {

// One decoded character: its code point (-1 for a byte that does not start valid UTF-8, which then
// stands alone) and where its bytes end.
struct Utf8Char {
  int64_t cp;
  size_t end;
};

inline Utf8Char decode_utf8(std::string_view s, size_t i) {
  auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return {b, i + 1};
  int len = b >= 0xF0 && b <= 0xF4 ? 4 : b >= 0xE0 ? 3 : b >= 0xC2 && b < 0xE0 ? 2 : 0;
  if (b >= 0xF5) len = 0;
  if (len == 0 || i + len > s.size()) return {-1, i + 1};
  uint32_t cp = b & (0x7F >> len);
  for (int k = 1; k < len; ++k) {
    auto c = static_cast<unsigned char>(s[i + k]);
    if ((c & 0xC0) != 0x80) return {-1, i + 1};
    cp = (cp << 6) | (c & 0x3F);
  }
  // Reject overlong forms, surrogates and code points past U+10FFFF.
  static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return {-1, i + 1};
  return {cp, i + len};
}

// The offset of the first byte that is not part of well-formed UTF-8, or npos.
inline size_t first_invalid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const Utf8Char c = decode_utf8(s, i);
    if (c.cp < 0) return i;
    i = c.end;
  }
  return std::string_view::npos;
}

}  // namespace fsdp::data
