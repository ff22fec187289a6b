// Tokenizers: text (UTF-8 bytes) to token ids and back, with ids identical to Hugging Face's
// `tokenizers` library. One interface, Tokenizer, and its families, a file each:
//  - GPT2Tokenizer (this header): GPT-2's byte-level BPE from encoder.json + vocab.bpe, as
//    GPT2TokenizerFast reads them. It owns the vocabulary, the merge ranks and a cache of encoded
//    pre-tokens.
//  - HFTokenizer (hf_tokenizer.h): a tokenizer.json with a BPE model (byte-level, Llama 3 / Qwen2
//    regex splits, SentencePiece-style), with tokenizer_config.json's BOS and EOS.
// load_tokenizer(dir) picks the family from the files a folder holds. Needs no LibTorch.
//
// Special tokens written literally in the text are matched first and give their ids, as
// Hugging Face's default (split_special_tokens=False) does: "a<|endoftext|>b" encodes the middle
// as one id. Thread-safety: every method is const and safe to call from several threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fsdp::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Hugging Face's encode(text, add_special_tokens=False). Any byte string is accepted: bytes
  // that are not valid UTF-8 are kept (byte-level families) or fall back to bytes / the unknown
  // token as a character the vocabulary lacks would.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // encode(text, add_special_tokens=True): with the post-processor's special tokens (a BOS,
  // where the tokenizer.json has a template that adds one); the same as encode() otherwise.
  virtual std::vector<int32_t> encode_with_special_tokens(std::string_view text) const = 0;
  // decode(ids, skip_special_tokens=False). Throws std::out_of_range for an id outside the
  // vocabulary (Hugging Face drops those silently). Where the ids' bytes are not valid UTF-8,
  // GPT2Tokenizer returns the raw bytes (so that decode(encode(b)) == b for any bytes b), a
  // tokenizer.json family replaces them with U+FFFD, as Hugging Face does.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;

  // get_vocab_size(with_added_tokens=True): the model's vocabulary plus added tokens not in it.
  virtual size_t vocab_size() const = 0;
  // The largest id encode() can give: what a model's embedding must hold (ids need not be dense:
  // vocab_size() counts entries, and a renumbered vocabulary runs past it).
  virtual int32_t max_id() const = 0;
  // tokenizer_config.json's bos_token / eos_token (GPT-2's files: <|endoftext|> for both).
  virtual std::optional<int32_t> bos_id() const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;
  // The added tokens marked special, in id order: {content, id}.
  virtual std::vector<std::pair<std::string, int32_t>> special_tokens() const = 0;
  // What the tokenizer is, for logs: "gpt2-files", "bpe-bytelevel", "bpe-llama3", "bpe-qwen2",
  // "bpe-sentencepiece" or "bpe".
  virtual std::string family() const = 0;
  // A 64-bit hash of the family and the files' contents: equal fingerprints, equal ids (the
  // corpus cache is keyed by it).
  virtual uint64_t fingerprint() const = 0;
};

// The tokenizer in `dir`: tokenizer.json (with tokenizer_config.json when present) if it is
// there, else GPT-2's encoder.json + vocab.bpe. Throws std::runtime_error naming the folder and
// the files it looked for when it has neither, or the file at fault when one is malformed or
// asks for something unsupported.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir);

// Whether `dir` holds the files load_tokenizer reads (tokenizer.json, or GPT-2's two files under
// either pair of names); nothing is parsed.
bool has_tokenizer(const std::string& dir);

// load_tokenizer(dir)->fingerprint() from the files' bytes alone, without parsing them (a cache
// lookup needs no tokenizer). Throws like load_tokenizer for a folder with neither kind of files.
uint64_t tokenizer_fingerprint(const std::string& dir);

class GPT2Tokenizer final : public Tokenizer {
 public:
  // Reads the vocabulary and merges; throws std::runtime_error naming the file and the line or
  // byte offset when a file is missing or malformed.
  static GPT2Tokenizer load(const std::string& encoder_json, const std::string& vocab_bpe);
  // The same from the files' contents; the names stand for the files in error messages.
  static GPT2Tokenizer parse(std::string encoder_json_text, const std::string& vocab_bpe_text,
                             const std::string& encoder_name = "encoder.json",
                             const std::string& vocab_name = "vocab.bpe");

  GPT2Tokenizer(GPT2Tokenizer&&) noexcept;
  GPT2Tokenizer& operator=(GPT2Tokenizer&&) noexcept;
  ~GPT2Tokenizer() override;

  // decode(encode(text)) == text for every input.
  std::vector<int32_t> encode(std::string_view text) const override;
  // GPT-2 has no post-processor: the same as encode().
  std::vector<int32_t> encode_with_special_tokens(std::string_view text) const override;
  // The raw bytes the ids stand for (not checked to be valid UTF-8).
  std::string decode(const std::vector<int32_t>& ids) const override;

  int32_t eot() const;  // <|endoftext|>, 50256 for GPT-2
  size_t vocab_size() const override;
  int32_t max_id() const override;
  std::optional<int32_t> bos_id() const override { return eot(); }
  std::optional<int32_t> eos_id() const override { return eot(); }
  std::vector<std::pair<std::string, int32_t>> special_tokens() const override;
  std::string family() const override { return "gpt2-files"; }
  uint64_t fingerprint() const override;

 private:
  struct Impl;
  explicit GPT2Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fsdp::data
