// The engine of hf_pipeline.h. Function comments name the tokenizers (Rust) code each one ports.
#include "data/hf_pipeline.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "data/pretokenize.h"
#include "data/unicode.h"
#include "data/utf8.h"

namespace fsdp::data::hf {
namespace {

// GPT-2's bytes_to_unicode (pre_tokenizers/byte_level.rs bytes_char): printable bytes stand for
// themselves, the others move to U+0100 and up.
struct ByteTable {
  std::string byte_to_char[256];  // UTF-8 of each byte's character
  int16_t char_to_byte[512];      // the inverse over U+0000..U+01FF; -1 where none
  ByteTable() {
    std::fill(std::begin(char_to_byte), std::end(char_to_byte), -1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const uint32_t cp = printable ? b : next++;
      append_utf8(byte_to_char[b], cp);
      char_to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};
const ByteTable& byte_table() {
  static const ByteTable t;
  return t;
}

std::string byte_level_encode(std::string_view s) {
  std::string out;
  out.reserve(s.size() * 2);
  for (unsigned char b : s) out += byte_table().byte_to_char[b];
  return out;
}

// The ByteLevel decoder on one token: its characters' bytes, or the token's own bytes when one of
// its characters is not a byte's character.
void byte_level_decode(std::string_view token, std::string& out) {
  std::string bytes;
  for (size_t i = 0; i < token.size();) {
    const Utf8Char c = decode_utf8(token, i);
    if (c.cp < 0 || c.cp >= 512 || byte_table().char_to_byte[c.cp] < 0) {
      out.append(token);
      return;
    }
    bytes += static_cast<char>(byte_table().char_to_byte[c.cp]);
    i = c.end;
  }
  out += bytes;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size())
    out.append(s, pos, hit - pos).append(to);
  if (pos == 0) return;
  out.append(s, pos, std::string::npos);
  s.swap(out);
}

// NormalizedString::replace: every match (empty ones too) becomes `content`.
std::string replaced(const std::string& s, const std::vector<std::pair<size_t, size_t>>& matches,
                     const std::string& content) {
  if (matches.empty()) return s;
  std::string out;
  size_t last = 0;
  for (const auto& [b, e] : matches) {
    out.append(s, last, b - last).append(content);
    last = e;
  }
  return out.append(s, last, std::string::npos);
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// Rust regex's \w on the character at i (added_vocabulary.rs's single_word checks), matched on
// that character's bytes alone.
bool word_char_at(std::string_view s, size_t i) {
  const Utf8Char c = decode_utf8(s, i);
  return c.cp >= 0 && word_char_regex().matches_at(s.substr(i, c.end - i), 0);
}

bool ends_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  if (decode_utf8(s, i).end != s.size()) i = s.size() - 1;  // a stray continuation byte
  return word_char_at(s, i);
}

bool starts_with_word(std::string_view s) { return !s.empty() && word_char_at(s, 0); }

// Where the whitespace at the end of s begins (LEFTMOST_SPACE_AT_END, \s*$).
size_t trailing_space_start(std::string_view s) {
  size_t start = s.size();
  for (size_t i = 0; i < s.size();) {
    const Utf8Char c = decode_utf8(s, i);
    if (!is_whitespace(c.cp))
      start = s.size();
    else if (start == s.size())
      start = i;
    i = c.end;
  }
  return start;
}

// The length of the whitespace at the start of s (RIGHTMOST_SPACE_AT_START, ^\s*).
size_t leading_space_length(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && is_whitespace(decode_utf8(s, i).cp)) i = decode_utf8(s, i).end;
  return i;
}

using Tokens = std::vector<std::string>;

// decoders/byte_level.rs: all tokens' bytes as one string, made valid UTF-8 as
// String::from_utf8_lossy does (unless raw).
Tokens decode_byte_level(const Tokens& tokens, bool raw) {
  std::string bytes;
  for (const auto& t : tokens) byte_level_decode(t, bytes);
  return {raw ? bytes : utf8_lossy(bytes)};
}

// pre_tokenizers/metaspace.rs (Decoder): the replacement character becomes a space, and is
// dropped from the first token unless the prepend scheme is "never".
Tokens decode_metaspace(Tokens tokens, const DecoderStep& d) {
  for (size_t i = 0; i < tokens.size(); ++i)
    replace_all(tokens[i], d.text, i == 0 && d.prepend_scheme != PrependScheme::kNever ? "" : " ");
  return tokens;
}

// The byte of a "<0xNN>" token (u8::from_str_radix on its two characters), or -1.
int fallback_byte(const std::string& t) {
  if (t.size() != 6 || !starts_with(t, "<0x") || t[5] != '>') return -1;
  auto hex = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  if (t[3] == '+' && lo >= 0) return lo;  // Rust accepts a leading '+'
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// decoders/byte_fallback.rs: runs of <0xNN> tokens become their bytes when those are valid UTF-8,
// else one U+FFFD per byte.
Tokens decode_byte_fallback(const Tokens& tokens) {
  Tokens out;
  std::string bytes;
  size_t n_bytes = 0;
  auto flush = [&] {
    if (n_bytes == 0) return;
    if (first_invalid_utf8(bytes) == std::string::npos)
      out.push_back(bytes);
    else
      for (size_t i = 0; i < n_bytes; ++i) out.push_back("\xEF\xBF\xBD");
    bytes.clear();
    n_bytes = 0;
  };
  for (const auto& t : tokens) {
    const int b = fallback_byte(t);
    if (b >= 0) {
      bytes += static_cast<char>(b);
      ++n_bytes;
      continue;
    }
    flush();
    out.push_back(t);
  }
  flush();
  return out;
}

// decoders/strip.rs: up to `start` leading and `stop` trailing copies of the character removed
// from each token.
std::string strip(const std::string& token, const DecoderStep& d) {
  std::vector<size_t> starts;  // each character's first byte
  for (size_t i = 0; i < token.size(); i = decode_utf8(token, i).end) starts.push_back(i);
  starts.push_back(token.size());
  const size_t n = starts.size() - 1;
  auto is_content = [&](size_t k) {
    return token.compare(starts[k], starts[k + 1] - starts[k], d.content) == 0;
  };
  size_t begin = 0, end = n;
  for (size_t i = 0; i < std::min(d.start, n) && is_content(i); ++i) begin = i + 1;
  for (size_t i = 0; i < std::min(d.stop, n) && is_content(n - i - 1); ++i) end = n - i - 1;
  if (begin >= end) return "";
  return token.substr(starts[begin], starts[end] - starts[begin]);
}

Tokens run_decoder(const DecoderStep& d, Tokens tokens, bool raw_bytes) {
  switch (d.kind) {
    case DecoderStep::Kind::kByteLevel:
      return decode_byte_level(tokens, raw_bytes);
    case DecoderStep::Kind::kMetaspace:
      return decode_metaspace(std::move(tokens), d);
    case DecoderStep::Kind::kReplace:
      for (auto& t : tokens) t = replaced(t, d.regex->find_all(t), d.content);
      return tokens;
    case DecoderStep::Kind::kByteFallback:
      return decode_byte_fallback(tokens);
    case DecoderStep::Kind::kFuse: {
      std::string all;
      for (const auto& t : tokens) all += t;
      return {all};
    }
    case DecoderStep::Kind::kStrip:
      for (auto& t : tokens) t = strip(t, d);
      return tokens;
  }
  return tokens;
}

std::string join(const Tokens& tokens, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) out += (i ? sep : "") + tokens[i];
  return out;
}

}  // namespace

// A piece of the text on its way to the model: either an added token's id, or text with whether
// it starts at the text's first byte (Metaspace's prepend_scheme "first" asks).
struct Pipeline::Piece {
  std::string text;
  int32_t token = -1;
  bool at_start = false;
};

void assign_added_ids(std::vector<AddedToken>& tokens, const BpeModel& model) {
  std::unordered_map<std::string, int32_t> assigned;
  auto next_id = static_cast<int32_t>(model.vocab().size());
  std::vector<AddedToken> kept;
  for (AddedToken& t : tokens) {
    if (t.content.empty()) continue;
    auto a = assigned.find(t.content);
    auto m = model.vocab().find(t.content);
    t.id = a != assigned.end() ? a->second : m != model.vocab().end() ? m->second : next_id++;
    if (a != assigned.end()) {  // the same content again: its latest properties win
      for (AddedToken& k : kept)
        if (k.content == t.content) k = t;
      continue;
    }
    assigned.emplace(t.content, t.id);
    kept.push_back(t);
  }
  tokens.swap(kept);
}

Pipeline::Pipeline(PipelineSpec spec, BpeModel model)
    : spec_(std::move(spec)), model_(std::move(model)) {
  for (auto& buckets : by_first_byte_) buckets.assign(256, {});
  for (size_t i = 0; i < spec_.added_tokens.size(); ++i) {
    const AddedToken& t = spec_.added_tokens[i];
    // AddedVocabulary caches a normalized token's normalized form: it is matched in normalized
    // text and handed to the decoder.
    match_form_.push_back(t.normalized ? normalize(t.content) : t.content);
    added_by_id_[t.id] = i;
    if (!match_form_.back().empty())
      by_first_byte_[t.normalized][static_cast<unsigned char>(match_form_.back()[0])].push_back(i);
  }
  for (auto& buckets : by_first_byte_)
    for (auto& bucket : buckets)
      std::stable_sort(bucket.begin(), bucket.end(), [this](size_t a, size_t b) {
        return match_form_[a].size() > match_form_[b].size();
      });
}

namespace {

// normalizers/strip.rs (NormalizedString::lrstrip): char::is_whitespace characters off either end.
// Returns how many bytes left the start.
size_t strip_text(std::string& text, bool left, bool right) {
  size_t begin = 0, end = text.size();
  if (left)
    while (begin < end && is_whitespace(decode_utf8(text, begin).cp))
      begin = decode_utf8(text, begin).end;
  if (right) {
    size_t last = begin;  // the end of the last character that is not whitespace
    for (size_t i = begin; i < end;) {
      const Utf8Char c = decode_utf8(text, i);
      i = c.end;
      if (!is_whitespace(c.cp)) last = i;
    }
    end = last;
  }
  text = text.substr(begin, end - begin);
  return begin;
}

// The end of the character that holds byte i - 1 of s (i rounded up to a character boundary).
size_t char_ceil(std::string_view s, size_t i) {
  size_t j = 0;
  while (j < i && j < s.size()) j = decode_utf8(s, j).end;
  return j;
}

// The original's first character as tokenizers' alignments follow it through a Replace: `start`
// bytes of the text come from it (alignments that begin at offset 0), or none. Kept text keeps its
// alignment; the content that replaces a match takes the alignment of the match's last character
// (NormalizedString::replace), an empty match's that of the character before it, or (0, 0) at the
// very start: so "^" replaced brings a lost start back, as in tokenizers.
size_t replaced_start(const std::vector<std::pair<size_t, size_t>>& matches,
                      const std::string& content, size_t start) {
  size_t out = 0, pos = 0;
  for (const auto& [b, e] : matches) {
    out += std::min(b, start) - std::min(pos, start);
    if (b > start || e > start) return out;  // text or content from later characters follows
    out += content.size();
    pos = e;
  }
  return out + (start > pos ? start - pos : 0);
}

NormalForm form_of(NormalizerStep::Kind k) {
  using K = NormalizerStep::Kind;
  return k == K::kNfc    ? NormalForm::kNfc
         : k == K::kNfkc ? NormalForm::kNfkc
         : k == K::kNfd  ? NormalForm::kNfd
                         : NormalForm::kNfkd;
}

// One normalizer on `text`: normalizers/unicode.rs (NFC, NFKC, NFD, NFKD), utils.rs (Lowercase),
// strip.rs, prepend.rs (only to non-empty text), replace.rs. `start` follows the bytes that come
// from the original's first character (see replaced_start): a per-character transform maps them to
// what they become, a strip or a removal can take them all.
void normalize_step(const NormalizerStep& n, std::string& text, size_t& start) {
  using K = NormalizerStep::Kind;
  switch (n.kind) {
    case K::kNfc:
    case K::kNfkc:
    case K::kNfd:
    case K::kNfkd: {
      const std::string head = normalize_unicode(text.substr(0, start), form_of(n.kind));
      text = normalize_unicode(text, form_of(n.kind));
      start = start ? char_ceil(text, std::max<size_t>(head.size(), 1)) : 0;
      break;
    }
    case K::kLowercase:
      start = to_lowercase(text.substr(0, start)).size();
      text = to_lowercase(text);
      break;
    case K::kStrip: {
      const size_t removed = strip_text(text, n.left, n.right);
      start = removed >= start ? 0 : std::min(start - removed, text.size());
      break;
    }
    case K::kPrepend:
      if (text.empty()) break;
      text = n.text + text;
      if (start) start += n.text.size();
      break;
    case K::kReplace: {
      const auto matches = n.regex->find_all(text);
      start = replaced_start(matches, n.content, start);
      text = replaced(text, matches, n.content);
      break;
    }
  }
}

}  // namespace

// The normalizers in order. `at_start`, when given, is cleared where the normalized text no longer
// begins with what the original's first character became (its NormalizedString's
// offsets_original().0 is then not 0), which Metaspace's prepend_scheme "first" reads.
std::string Pipeline::normalize(std::string text, bool* at_start) const {
  size_t start = text.empty() ? 0 : decode_utf8(text, 0).end;
  for (const NormalizerStep& n : spec_.normalizers) normalize_step(n, text, start);
  if (at_start && start == 0) *at_start = false;
  return text;
}

// The leftmost-longest, non-overlapping matches of the added tokens (the daachorse automaton of
// AddedVocabulary::refresh_added_tokens, MatchKind::LeftmostLongest).
std::vector<Pipeline::Match> Pipeline::find_added(std::string_view text, bool normalized) const {
  std::vector<Match> out;
  const auto& buckets = by_first_byte_[normalized];
  for (size_t i = 0; i < text.size();) {
    const Match* found = nullptr;
    Match m{};
    for (size_t t : buckets[static_cast<unsigned char>(text[i])]) {
      if (text.compare(i, match_form_[t].size(), match_form_[t]) == 0) {
        m = {i, i + match_form_[t].size(), &spec_.added_tokens[t]};
        found = &m;
        break;
      }
    }
    if (!found) {
      ++i;
      continue;
    }
    out.push_back(m);
    i = m.end;
  }
  return out;
}

// AddedVocabulary::find_matches + split_with_indices: single_word, lstrip and rstrip widen or
// discard a match; the text between matches becomes pieces (empty ones dropped, as
// PreTokenizedString::split does).
void Pipeline::split_added(const Piece& piece, bool normalized, std::vector<Piece>& out) const {
  const std::string_view s = piece.text;
  size_t start_offset = 0;
  auto emit_text = [&](size_t b, size_t e) {
    if (e > b) out.push_back({std::string(s.substr(b, e - b)), -1, piece.at_start && b == 0});
  };
  for (const Match& m : find_added(s, normalized)) {
    size_t start = m.start, stop = m.end;
    if (m.token->single_word) {
      const bool start_space = start == 0 || !ends_with_word(s.substr(0, start));
      const bool stop_space = stop == s.size() || !starts_with_word(s.substr(stop));
      if (!start_space || !stop_space) continue;
    }
    if (m.token->lstrip) start = std::max(trailing_space_start(s.substr(0, start)), start_offset);
    if (m.token->rstrip) stop += leading_space_length(s.substr(stop));
    if (start_offset < start) emit_text(start_offset, start);
    out.push_back({std::string(s.substr(start, stop - start)), m.token->id, false});
    start_offset = stop;
  }
  emit_text(start_offset, s.size());
}

// pre_tokenizers/metaspace.rs: spaces become the replacement character, which is prepended per
// the scheme; with split, a piece starts at every replacement character (MergedWithNext).
static void metaspace(const PreTokenizerStep& p, std::string& text, bool at_start,
                      std::vector<std::string_view>& parts) {
  replace_all(text, " ", p.replacement);
  const bool prepend = p.prepend_scheme == PrependScheme::kAlways ||
                       (p.prepend_scheme == PrependScheme::kFirst && at_start);
  if (prepend && !starts_with(text, p.replacement)) text.insert(0, p.replacement);
  const std::string_view t = text;
  size_t begin = 0;
  for (size_t hit = p.split ? t.find(p.replacement, 1) : std::string_view::npos;
       hit != std::string_view::npos; hit = t.find(p.replacement, hit + 1)) {
    if (hit > begin) parts.push_back(t.substr(begin, hit - begin));
    begin = hit;
  }
  parts.push_back(t.substr(begin));
}

// The pieces of one pre-tokenizer step other than Metaspace: byte_level.rs (the prefix space,
// then GPT-2's regex), split.rs, digits.rs, whitespace.rs (Whitespace, WhitespaceSplit),
// punctuation.rs.
static std::vector<std::pair<size_t, size_t>> pre_step_pieces(const PreTokenizerStep& p,
                                                              std::string& text) {
  using K = PreTokenizerStep::Kind;
  switch (p.kind) {
    case K::kByteLevel:
      if (p.add_prefix_space && !starts_with(text, " ")) text.insert(0, " ");
      if (!p.use_regex) return {{0, text.size()}};
      return split_spans(regex_spans(gpt2_regex(), text, false), SplitBehavior::kIsolated);
    case K::kSplit:
      return split_spans(regex_spans(*p.regex, text, p.invert), p.behavior);
    case K::kDigits:
      return split_spans(char_spans(text, is_numeric), p.individual_digits
                                                           ? SplitBehavior::kIsolated
                                                           : SplitBehavior::kContiguous);
    case K::kWhitespace:
      return split_spans(regex_spans(whitespace_regex(), text, true), SplitBehavior::kRemoved);
    case K::kWhitespaceSplit:
      return split_spans(char_spans(text, is_whitespace), SplitBehavior::kRemoved);
    case K::kPunctuation:
      return split_spans(char_spans(text, is_punctuation), p.behavior);
    case K::kMetaspace:
      break;
  }
  return {{0, text.size()}};
}

// One pre-tokenizer step on one piece; each part is emitted with whether it starts the text
// (its original offset is 0), and ByteLevel's as every byte's character.
void Pipeline::apply_pre_step(const PreTokenizerStep& p, std::string& text, bool at_start,
                              std::vector<std::pair<std::string, bool>>& out) const {
  std::vector<std::string_view> parts;
  if (p.kind == PreTokenizerStep::Kind::kMetaspace) {
    metaspace(p, text, at_start, parts);
  } else {
    for (const auto& [b, e] : pre_step_pieces(p, text))
      parts.push_back(std::string_view(text).substr(b, e - b));
  }
  const bool byte_level = p.kind == PreTokenizerStep::Kind::kByteLevel;
  for (std::string_view part : parts) {
    if (part.empty()) continue;
    const bool first = at_start && part.data() == text.data();
    out.emplace_back(byte_level ? byte_level_encode(part) : std::string(part), first);
  }
}

// PreTokenizedString through each pre-tokenizer in turn, then the model (do_tokenize).
void Pipeline::pre_tokenize(size_t step, std::string text, bool at_start,
                            std::vector<int32_t>& out) const {
  if (text.empty()) return;
  if (step == spec_.pre_tokenizers.size()) {
    model_.tokenize(text, out);
    return;
  }
  std::vector<std::pair<std::string, bool>> parts;
  apply_pre_step(spec_.pre_tokenizers[step], text, at_start, parts);
  for (auto& [part, first] : parts) pre_tokenize(step + 1, std::move(part), first, out);
}

// Tokenizer::encode: AddedVocabulary::extract_and_normalize, do_pre_tokenize, do_tokenize,
// post_process (TemplateProcessing's single template when add_special_tokens).
std::vector<int32_t> Pipeline::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<Piece> raw, pieces;
  split_added(Piece{std::string(text), -1, true}, false, raw);
  for (Piece& p : raw) {
    if (p.token >= 0) {
      pieces.push_back(std::move(p));
      continue;
    }
    p.text = normalize(std::move(p.text), &p.at_start);
    split_added(p, true, pieces);
  }
  std::vector<int32_t> ids;
  for (Piece& p : pieces) {
    if (p.token >= 0)
      ids.push_back(p.token);
    else
      pre_tokenize(0, std::move(p.text), p.at_start, ids);
  }
  if (!add_special_tokens) return ids;
  for (const auto& tmpl : spec_.templates) {
    std::vector<int32_t> wrapped;
    for (const TemplateItem& item : tmpl)
      wrapped.insert(wrapped.end(), item.sequence ? ids.begin() : item.ids.begin(),
                     item.sequence ? ids.end() : item.ids.end());
    ids.swap(wrapped);
  }
  return ids;
}

std::vector<std::string> Pipeline::tokens_of(const std::vector<int32_t>& ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (auto it = added_by_id_.find(id); it != added_by_id_.end()) {
      tokens.push_back(match_form_[it->second]);
    } else if (const std::string* t = model_.token(id)) {
      tokens.push_back(*t);
    } else {
      throw std::out_of_range("tokenizer decode: id " + std::to_string(id) +
                              " is outside the vocabulary");
    }
  }
  return tokens;
}

// Tokenizer::decode: the ids' token strings through the decoders (or joined with spaces when
// there are none).
std::string Pipeline::decode(const std::vector<int32_t>& ids) const {
  Tokens tokens = tokens_of(ids);
  if (!spec_.has_decoder) return join(tokens, " ");
  for (const DecoderStep& d : spec_.decoders)
    tokens = run_decoder(d, std::move(tokens), spec_.raw_bytes);
  return join(tokens, "");
}

size_t Pipeline::vocab_size() const {
  size_t added = 0;
  for (const AddedToken& t : spec_.added_tokens) added += model_.vocab().count(t.content) == 0;
  return model_.vocab().size() + added;
}

int32_t Pipeline::max_id() const {
  int32_t top = -1;
  for (const auto& [token, id] : model_.vocab()) top = std::max(top, id);
  for (const AddedToken& t : spec_.added_tokens) top = std::max(top, t.id);
  return top;
}

int32_t Pipeline::token_to_id(const std::string& token) const {
  for (const AddedToken& t : spec_.added_tokens)
    if (t.content == token) return t.id;
  auto it = model_.vocab().find(token);
  return it == model_.vocab().end() ? -1 : it->second;
}

}  // namespace fsdp::data::hf
