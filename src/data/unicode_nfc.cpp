// NFC (unicode_nfc.h) after UAX #15: every character is fully decomposed, each run of combining
// marks is sorted by combining class, then each mark is composed with the last starter unless a
// mark of the same or a higher class, or a starter, stands between them.
#include "data/unicode_nfc.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <vector>

#include "data/utf8.h"

namespace fsdp::data {
namespace {

struct CombiningClass {
  uint32_t cp;
  uint8_t ccc;
};
struct Decomposition {
  uint32_t cp, first, second;  // second == 0: a singleton
};
struct Composition {
  uint32_t first, second, composite;
};

#include "data/unicode_nfc_tables.inc"

// Hangul syllables (Unicode 3.12): S = SBase + (L * VCount + V) * TCount + T.
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kSCount = kLCount * kVCount * kTCount;

// A character of the text: a code point, or (cp < 0) a byte that is not valid UTF-8.
struct Char {
  int64_t cp;
  char raw;
};

int ccc(int64_t cp) {
  if (cp < 0x300) return 0;
  auto it = std::lower_bound(std::begin(kCombiningClasses), std::end(kCombiningClasses), cp,
                             [](const CombiningClass& c, int64_t v) { return c.cp < v; });
  return it != std::end(kCombiningClasses) && it->cp == cp ? it->ccc : 0;
}

const Decomposition* find_decomposition(uint32_t cp) {
  auto it = std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), cp,
                             [](const Decomposition& d, uint32_t v) { return d.cp < v; });
  return it != std::end(kDecompositions) && it->cp == cp ? &*it : nullptr;
}

void decompose(uint32_t cp, std::vector<Char>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back({kLBase + s / (kVCount * kTCount), 0});
    out.push_back({kVBase + (s % (kVCount * kTCount)) / kTCount, 0});
    if (s % kTCount != 0) out.push_back({kTBase + s % kTCount, 0});
    return;
  }
  const Decomposition* d = cp >= 0xC0 ? find_decomposition(cp) : nullptr;
  if (!d) {
    out.push_back({cp, 0});
    return;
  }
  decompose(d->first, out);
  if (d->second != 0) decompose(d->second, out);
}

// The primary composite of the pair, or 0.
uint32_t compose(int64_t first, int64_t second) {
  if (first < 0 || second < 0) return 0;
  const auto a = static_cast<uint32_t>(first), b = static_cast<uint32_t>(second);
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  auto it =
      std::lower_bound(std::begin(kCompositions), std::end(kCompositions), std::make_pair(a, b),
                       [](const Composition& c, const std::pair<uint32_t, uint32_t>& v) {
                         return c.first != v.first ? c.first < v.first : c.second < v.second;
                       });
  return it != std::end(kCompositions) && it->first == a && it->second == b ? it->composite : 0;
}

std::vector<Char> decompose_all(std::string_view text) {
  std::vector<Char> out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const Utf8Char c = decode_utf8(text, i);
    if (c.cp < 0)
      out.push_back({-1, text[i]});
    else
      decompose(static_cast<uint32_t>(c.cp), out);
    i = c.end;
  }
  return out;
}

// Canonical ordering: a stable sort of each run of non-starters by combining class.
void reorder(std::vector<Char>& s) {
  for (size_t i = 0; i < s.size();) {
    if (ccc(s[i].cp) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < s.size() && ccc(s[j].cp) != 0) ++j;
    std::stable_sort(s.begin() + i, s.begin() + j,
                     [](const Char& x, const Char& y) { return ccc(x.cp) < ccc(y.cp); });
    i = j;
  }
}

// Canonical composition (the reference algorithm of UAX #15's sample code). last_class is the
// class of the last character kept after the starter, 0 when that is the starter itself.
void compose_all(std::vector<Char>& s) {
  constexpr size_t kNone = static_cast<size_t>(-1);
  size_t starter = kNone, kept = 0;
  int last_class = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const Char ch = s[i];
    const int cls = ccc(ch.cp);
    if (starter != kNone && (last_class < cls || last_class == 0)) {
      if (const uint32_t composite = compose(s[starter].cp, ch.cp)) {
        s[starter].cp = composite;
        continue;
      }
    }
    if (cls == 0) starter = kept;  // a stray byte too: compose() refuses it as a starter
    last_class = cls;
    s[kept++] = ch;
  }
  s.resize(kept);
}

// Text whose characters are all below U+0300 is already NFC: none of them decomposes to
// anything that recomposes differently, and no mark below U+0300 exists.
bool trivially_nfc(std::string_view text) {
  for (unsigned char b : text)
    if (b >= 0xCC) return false;
  return true;
}

}  // namespace

std::string nfc(std::string_view text) {
  if (trivially_nfc(text)) return std::string(text);
  std::vector<Char> s = decompose_all(text);
  reorder(s);
  compose_all(s);
  std::string out;
  out.reserve(text.size());
  for (const Char& c : s) {
    if (c.cp < 0)
      out += c.raw;
    else
      append_utf8(out, static_cast<uint32_t>(c.cp));
  }
  return out;
}

const char* nfc_unicode_version() { return FSDP_UNICODE_NFC_VERSION; }

}  // namespace fsdp::data
