// The tokenizers' content fingerprint (Tokenizer::fingerprint): FNV-1a 64 over a label naming the
// kind of files, then each file's length and bytes. One definition, so that the fingerprint a
// loaded tokenizer reports and the one tokenizer_fingerprint() computes from the files alone agree.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace fsdp::data {

inline uint64_t fnv1a64(std::string_view bytes, uint64_t h = 0xCBF29CE484222325ull) {
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

inline uint64_t files_fingerprint(std::string_view label,
                                  std::initializer_list<std::string_view> contents) {
  uint64_t h = fnv1a64(label);
  for (std::string_view c : contents) h = fnv1a64(c, fnv1a64(std::to_string(c.size()) + "\n", h));
  return h;
}

}  // namespace fsdp::data
