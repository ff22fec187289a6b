// UTF-8 decoding shared by the tokenizers (which keep bytes that are not UTF-8 as they are) and the
// trainer's config (which refuses them): one definition of well-formed, with no overlong forms, no
// surrogates and nothing past U+10FFFF; encoding, and Rust's lossy conversion (what Hugging Face's
// decoders return). Needs nothing but the standard library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
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

inline void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// The length of the invalid sequence at s[i] (at least 1): the longest prefix of a well-formed
// sequence found there, which Rust's String::from_utf8_lossy replaces with one U+FFFD.
inline size_t invalid_utf8_length(std::string_view s, size_t i) {
  auto b = static_cast<unsigned char>(s[i]);
  int len = b >= 0xC2 && b <= 0xDF   ? 2
            : b >= 0xE0 && b <= 0xEF ? 3
            : b >= 0xF0 && b <= 0xF4 ? 4
                                     : 0;
  if (len == 0) return 1;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range (Unicode Table 3-7)
  if (b == 0xE0) lo = 0xA0;
  if (b == 0xED) hi = 0x9F;
  if (b == 0xF0) lo = 0x90;
  if (b == 0xF4) hi = 0x8F;
  size_t k = 1;
  for (; k < static_cast<size_t>(len) && i + k < s.size(); ++k) {
    auto c = static_cast<unsigned char>(s[i + k]);
    if (k == 1 ? (c < lo || c > hi) : (c & 0xC0) != 0x80) break;
  }
  return k;
}

// s with every invalid sequence replaced by U+FFFD, as String::from_utf8_lossy does.
inline std::string utf8_lossy(std::string_view s) {
  if (first_invalid_utf8(s) == std::string_view::npos) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  for (size_t i = 0; i < s.size();) {
    const Utf8Char c = decode_utf8(s, i);
    if (c.cp >= 0) {
      out.append(s.substr(i, c.end - i));
      i = c.end;
    } else {
      out += "\xEF\xBF\xBD";
      i += invalid_utf8_length(s, i);
    }
  }
  return out;
}

}  // namespace fsdp::data
