// Hugging Face tokenizer.json files with a BPE model, read without Python and encoded with ids
// identical to the `tokenizers` library (0.23). What is read:
//  - model: BPE (merges as "a b" strings or [a, b] pairs; unk_token, fuse_unk, byte_fallback,
//    ignore_merges, continuing_subword_prefix, end_of_word_suffix). WordPiece, Unigram and
//    WordLevel models, and BPE dropout, are refused.
//  - added_tokens (special or not; single_word, lstrip, rstrip, normalized).
//  - normalizer: NFC, Prepend, Replace (of a literal string), Sequence of these.
//  - pre_tokenizer: ByteLevel (add_prefix_space, use_regex), Split with the Llama 3 or the Qwen2
//    regex (behavior Isolated, not inverted), Metaspace (prepend_scheme first/always/never, split),
//    Sequence of these.
//  - post_processor: TemplateProcessing (its single template), ByteLevel, Sequence of these.
//  - decoder: ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence of these.
// Any other type, and any other Split pattern, is a std::runtime_error naming the file and the
// type (or quoting the pattern). truncation and padding are ignored, as transformers' tokenizers
// turn them off. tokenizer_config.json, when given, supplies bos_token and eos_token (a string or
// an {"content": ...} object), which must name tokens of the vocabulary.
#pragma once

#include <memory>
#include <string>

#include "fsdp/data/tokenizer.h"

namespace fsdp::data {

class HFTokenizer final : public Tokenizer {
 public:
  // <dir>/tokenizer.json, and <dir>/tokenizer_config.json when it exists.
  static HFTokenizer load(const std::string& dir);
  // From the files' contents (config_json empty: no tokenizer_config.json); `folder` stands for
  // their folder in error messages ("<folder>/tokenizer.json: unsupported ...").
  static HFTokenizer parse(const std::string& tokenizer_json, const std::string& config_json,
                           const std::string& folder = ".");

  HFTokenizer(HFTokenizer&&) noexcept;
  HFTokenizer& operator=(HFTokenizer&&) noexcept;
  ~HFTokenizer() override;

  std::vector<int32_t> encode(std::string_view text) const override;
  std::vector<int32_t> encode_with_special_tokens(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  size_t vocab_size() const override;
  int32_t max_id() const override;
  std::optional<int32_t> bos_id() const override;
  std::optional<int32_t> eos_id() const override;
  std::vector<std::pair<std::string, int32_t>> special_tokens() const override;
  std::string family() const override;
  uint64_t fingerprint() const override;
  // The id of a token string (added tokens, then the model's vocabulary), or -1.
  int32_t token_to_id(const std::string& token) const;

 private:
  struct Impl;
  explicit HFTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fsdp::data
