// The split machinery of pretokenize.h, ported from tokenizers' tokenizer/pattern.rs and
// NormalizedString::split (tokenizer/normalizer.rs).
#include "data/pretokenize.h"

#include <algorithm>

#include "data/utf8.h"

namespace fsdp::data {
namespace {

const char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
#define FSDP_RUST_WORD R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control})"
const char kWhitespacePattern[] = "[" FSDP_RUST_WORD "]+|[^" FSDP_RUST_WORD R"(\s]+)";
const char kWordCharPattern[] = "[" FSDP_RUST_WORD "]";
#undef FSDP_RUST_WORD

void invert_spans(std::vector<Span>& spans, bool invert) {
  if (invert)
    for (Span& s : spans) s.match = !s.match;
}

}  // namespace

std::vector<Span> regex_spans(const Regex& re, std::string_view text, bool invert) {
  std::vector<Span> out;
  if (text.empty()) return {{0, 0, invert}};
  size_t prev = 0;
  for (const auto& [start, end] : re.find_all(text)) {
    if (prev != start) out.push_back({prev, start, false});
    out.push_back({start, end, true});
    prev = end;
  }
  if (prev != text.size()) out.push_back({prev, text.size(), false});
  invert_spans(out, invert);
  return out;
}

std::vector<Span> char_spans(std::string_view text, bool (*pred)(int64_t), bool invert) {
  std::vector<Span> out;
  if (text.empty()) return {{0, 0, invert}};
  size_t last = 0;
  for (size_t i = 0; i < text.size();) {
    const Utf8Char c = decode_utf8(text, i);
    if (pred(c.cp)) {
      if (last < i) out.push_back({last, i, false});
      out.push_back({i, c.end, true});
      last = c.end;
    }
    i = c.end;
  }
  if (last < text.size()) out.push_back({last, text.size(), false});
  invert_spans(out, invert);
  return out;
}

// The folds of NormalizedString::split, one per behaviour: which spans join their neighbour.
std::vector<std::pair<size_t, size_t>> split_spans(const std::vector<Span>& spans,
                                                   SplitBehavior behavior) {
  std::vector<Span> kept;
  bool previous = false;
  auto fold = [&](const Span& s, bool joins) {
    if (joins && !kept.empty()) {
      if (behavior == SplitBehavior::kMergedWithNext)
        kept.back().begin = s.begin;
      else
        kept.back().end = s.end;
    } else {
      kept.push_back({s.begin, s.end, false});
    }
    previous = s.match;
  };
  switch (behavior) {
    case SplitBehavior::kIsolated:
      kept = spans;
      break;
    case SplitBehavior::kRemoved:
      for (const Span& s : spans)
        if (!s.match) kept.push_back(s);
      break;
    case SplitBehavior::kContiguous:
      for (const Span& s : spans) fold(s, s.match == previous);
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& s : spans) fold(s, s.match && !previous);
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) fold(*it, it->match && !previous);
      std::reverse(kept.begin(), kept.end());
      break;
  }
  std::vector<std::pair<size_t, size_t>> out;
  for (const Span& s : kept)
    if (s.end > s.begin) out.emplace_back(s.begin, s.end);
  return out;
}

const Regex& gpt2_regex() {
  static const Regex re(kGpt2Pattern, false, "the ByteLevel pre-tokenizer");
  return re;
}

const Regex& whitespace_regex() {
  static const Regex re(kWhitespacePattern, false, "the Whitespace pre-tokenizer");
  return re;
}

const Regex& word_char_regex() {
  static const Regex re(kWordCharPattern, false, "the added tokens' word check");
  return re;
}

}  // namespace fsdp::data
