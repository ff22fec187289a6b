// GPT2Tokenizer (fsdp/data/tokenizer.h): the readers for GPT-2's own files, encoder.json (a JSON
// object of byte-level token strings to ids, read by a small parser that reports the line and
// offset of a fault) and vocab.bpe (ranked merges, one "a b" per line), checked so that every
// byte has its token. The files then become the same pipeline a tokenizer.json with GPT-2's
// settings would (hf_pipeline.h): <|endoftext|> as a special added token, the ByteLevel
// pre-tokenizer without a prefix space, BPE, and the ByteLevel decoder returning raw bytes.
#include "fsdp/data/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "data/fingerprint.h"
#include "data/hf_pipeline.h"
#include "data/utf8.h"

namespace fsdp::data {
namespace {

constexpr const char* kEndOfText = "<|endoftext|>";

// GPT-2's bytes_to_unicode(): printable bytes stand for themselves, the rest are moved to U+0100
// and up, so that every byte is a visible character in encoder.json.
std::vector<uint32_t> bytes_to_unicode() {
  std::vector<uint32_t> table(256);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    table[b] = printable ? b : next++;
  }
  return table;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("GPT2Tokenizer: cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A reader for the one JSON shape encoder.json has: an object of string keys and integer values.
class EncoderJsonReader {
 public:
  EncoderJsonReader(std::string path, std::string text)
      : path_(std::move(path)), text_(std::move(text)) {}

  std::unordered_map<std::string, int32_t> parse() {
    std::unordered_map<std::string, int32_t> out;
    expect('{');
    if (peek() == '}') return ++pos_, finish(std::move(out));
    while (true) {
      std::string key = string();
      expect(':');
      int32_t value = integer();
      if (!out.emplace(std::move(key), value).second) fail("duplicate key");
      char c = next();
      if (c == '}') break;
      if (c != ',') fail("expected ',' or '}'");
    }
    return finish(std::move(out));
  }

 private:
  std::unordered_map<std::string, int32_t> finish(std::unordered_map<std::string, int32_t> m) {
    skip_space();
    if (pos_ != text_.size()) fail("trailing characters");
    return m;
  }

  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1 + std::count(text_.begin(), text_.begin() + std::min(pos_, text_.size()), '\n');
    throw std::runtime_error("GPT2Tokenizer: malformed JSON in " + path_ + " at line " +
                             std::to_string(line) + ", offset " + std::to_string(pos_) + ": " +
                             what);
  }

  void skip_space() {
    while (pos_ < text_.size() &&
           std::string_view(" \t\r\n").find(text_[pos_]) != std::string_view::npos)
      ++pos_;
  }
  char peek() {
    skip_space();
    if (pos_ >= text_.size()) fail("unexpected end of file");
    return text_[pos_];
  }
  char next() {
    char c = peek();
    ++pos_;
    return c;
  }
  void expect(char c) {
    if (next() != c) --pos_, fail(std::string("expected '") + c + "'");
  }

  int32_t integer() {
    skip_space();
    size_t begin = pos_;
    if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
    int64_t v = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9' && v < (1LL << 31))
      v = v * 10 + (text_[pos_++] - '0');
    if (pos_ == begin || (text_[begin] == '-' && pos_ == begin + 1)) fail("expected an integer");
    if (v >= (1LL << 31)) fail("integer out of range");
    return static_cast<int32_t>(text_[begin] == '-' ? -v : v);
  }

  uint32_t hex4() {
    if (pos_ + 4 > text_.size()) fail("truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      char c = text_[pos_++];
      int d = c >= '0' && c <= '9'   ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                     : -1;
      if (d < 0) fail("bad hex digit in \\u escape");
      v = v * 16 + d;
    }
    return v;
  }

  // \uXXXX, joining a high and a low surrogate into one code point.
  uint32_t unicode_escape() {
    uint32_t cp = hex4();
    if (cp >= 0xDC00 && cp <= 0xDFFF) fail("lone low surrogate");
    if (cp < 0xD800 || cp > 0xDBFF) return cp;
    if (text_.compare(pos_, 2, "\\u") != 0) fail("high surrogate without a low one");
    pos_ += 2;
    uint32_t lo = hex4();
    if (lo < 0xDC00 || lo > 0xDFFF) fail("high surrogate without a low one");
    return 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
  }

  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) fail("unterminated string");
      char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) --pos_, fail("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) fail("unterminated string");
      char e = text_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u':
          append_utf8(out, unicode_escape());
          break;
        default:
          --pos_, fail("bad escape");
      }
    }
  }

  std::string path_;
  std::string text_;
  size_t pos_ = 0;
};

using Vocab = std::unordered_map<std::string, int32_t>;
using Merges = std::vector<std::pair<std::string, std::string>>;

// Ids must be 0..n-1, each once; every key but <|endoftext|> must be made of byte characters; and
// every byte must have its own token, so that any text encodes and decodes back to itself.
void check_encoder(const std::string& path, const Vocab& encoder) {
  const std::vector<uint32_t> b2u = bytes_to_unicode();
  std::vector<bool> is_byte_char(512, false);
  for (uint32_t cp : b2u) is_byte_char[cp] = true;
  std::vector<bool> seen(encoder.size(), false);
  for (const auto& [key, id] : encoder) {
    if (id < 0 || static_cast<size_t>(id) >= encoder.size() || seen[id])
      throw std::runtime_error("GPT2Tokenizer: " + path + ": ids are not 0.." +
                               std::to_string(encoder.size() - 1) + " each once (key '" + key +
                               "')");
    seen[id] = true;
    if (key == kEndOfText) continue;
    for (size_t i = 0; i < key.size();) {
      const Utf8Char c = decode_utf8(key, i);
      if (c.cp < 0 || c.cp >= 512 || !is_byte_char[c.cp])
        throw std::runtime_error("GPT2Tokenizer: " + path + ": key '" + key +
                                 "' is not a byte-level BPE token");
      i = c.end;
    }
  }
  for (int b = 0; b < 256; ++b) {
    std::string key;
    append_utf8(key, b2u[b]);
    if (!encoder.count(key))
      throw std::runtime_error("GPT2Tokenizer: " + path + " lacks the token for byte " +
                               std::to_string(b));
  }
  if (!encoder.count(kEndOfText))
    throw std::runtime_error("GPT2Tokenizer: " + path + " lacks <|endoftext|>");
}

Merges read_merges(const std::string& path, const std::string& text, const Vocab& encoder) {
  Merges merges;
  std::istringstream in(text);
  std::string line;
  for (size_t line_no = 1; std::getline(in, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    auto fail = [&](const std::string& what) {
      throw std::runtime_error("GPT2Tokenizer: malformed merge in " + path + " at line " +
                               std::to_string(line_no) + ": " + what);
    };
    std::istringstream fields(line);
    std::string a, b, extra;
    if (!(fields >> a >> b) || (fields >> extra)) fail("expected two tokens");
    if (!encoder.count(a) || !encoder.count(b) || !encoder.count(a + b))
      fail("'" + a + " " + b + "' uses a token missing from the vocabulary");
    merges.emplace_back(std::move(a), std::move(b));
  }
  return merges;
}

// What GPT2TokenizerFast's tokenizer.json says, around the files' vocabulary and merges.
hf::PipelineSpec gpt2_spec() {
  hf::PipelineSpec spec;
  hf::AddedToken eot;
  eot.content = kEndOfText;
  eot.special = true;
  eot.normalized = false;
  spec.added_tokens.push_back(eot);
  hf::PreTokenizerStep byte_level(hf::PreTokenizerStep::Kind::kByteLevel);
  byte_level.add_prefix_space = false;
  spec.pre_tokenizers.push_back(byte_level);
  spec.decoders.emplace_back(hf::DecoderStep::Kind::kByteLevel);
  spec.has_decoder = true;
  spec.raw_bytes = true;
  return spec;
}

}  // namespace

struct GPT2Tokenizer::Impl {
  hf::Pipeline pipeline;
  int32_t eot;
  uint64_t fingerprint;
};

// `encoder_name` and `vocab_name` stand for the files in error messages.
GPT2Tokenizer GPT2Tokenizer::parse(std::string encoder_json_text, const std::string& vocab_bpe_text,
                                   const std::string& encoder_name, const std::string& vocab_name) {
  const uint64_t fingerprint = files_fingerprint("gpt2-files", {encoder_json_text, vocab_bpe_text});
  Vocab encoder = EncoderJsonReader(encoder_name, std::move(encoder_json_text)).parse();
  check_encoder(encoder_name, encoder);
  Merges merges = read_merges(vocab_name, vocab_bpe_text, encoder);
  const int32_t eot = encoder.at(kEndOfText);
  hf::PipelineSpec spec = gpt2_spec();
  BpeModel model(std::move(encoder), merges, BpeOptions{}, vocab_name);
  hf::assign_added_ids(spec.added_tokens, model);
  auto impl = std::make_unique<Impl>(
      Impl{hf::Pipeline(std::move(spec), std::move(model)), eot, fingerprint});
  return GPT2Tokenizer(std::move(impl));
}

GPT2Tokenizer GPT2Tokenizer::load(const std::string& encoder_json, const std::string& vocab_bpe) {
  std::string encoder_text = read_file(encoder_json);
  std::string merges_text;
  try {
    merges_text = read_file(vocab_bpe);
  } catch (const std::runtime_error&) {
    EncoderJsonReader(encoder_json, encoder_text).parse();  // a bad encoder.json is named first
    throw;
  }
  return parse(std::move(encoder_text), merges_text, encoder_json, vocab_bpe);
}

GPT2Tokenizer::GPT2Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GPT2Tokenizer::GPT2Tokenizer(GPT2Tokenizer&&) noexcept = default;
GPT2Tokenizer& GPT2Tokenizer::operator=(GPT2Tokenizer&&) noexcept = default;
GPT2Tokenizer::~GPT2Tokenizer() = default;

std::vector<int32_t> GPT2Tokenizer::encode(std::string_view text) const {
  return impl_->pipeline.encode(text, false);
}

std::vector<int32_t> GPT2Tokenizer::encode_with_special_tokens(std::string_view text) const {
  return impl_->pipeline.encode(text, true);
}

std::string GPT2Tokenizer::decode(const std::vector<int32_t>& ids) const {
  return impl_->pipeline.decode(ids);
}

int32_t GPT2Tokenizer::eot() const { return impl_->eot; }
size_t GPT2Tokenizer::vocab_size() const { return impl_->pipeline.vocab_size(); }
int32_t GPT2Tokenizer::max_id() const { return impl_->pipeline.max_id(); }
uint64_t GPT2Tokenizer::fingerprint() const { return impl_->fingerprint; }

std::vector<std::pair<std::string, int32_t>> GPT2Tokenizer::special_tokens() const {
  return {{kEndOfText, impl_->eot}};
}

}  // namespace fsdp::data
