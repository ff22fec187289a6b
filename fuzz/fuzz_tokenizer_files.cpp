// Fuzz target: the tokenizer's vocabulary files (GPT2Tokenizer::parse). The input is encoder.json,
// a NUL byte, then vocab.bpe (no NUL: all of it is encoder.json and vocab.bpe is empty). Malformed
// files are a std::runtime_error; a tokenizer built from them encodes any text to ids inside its
// vocabulary that decode back to the text.
#include <cstring>
#include <stdexcept>
#include <string>

#include "fsdp/data/tokenizer.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* chars = reinterpret_cast<const char*>(data);
  const void* nul = std::memchr(chars, '\0', size);
  const size_t split = nul ? static_cast<const char*>(nul) - chars : size;
  std::string encoder(chars, split);
  const std::string merges = nul ? std::string(chars + split + 1, size - split - 1) : std::string();
  try {
    auto tok = fsdp::data::GPT2Tokenizer::parse(std::move(encoder), merges);
    const std::string text = "Hello world, it's 1790!\n\xff\xfe " + merges.substr(0, 64);
    const auto ids = tok.encode(text);
    for (int32_t id : ids)
      fsdp::fuzz::require(id >= 0 && static_cast<size_t>(id) < tok.vocab_size(),
                          "id " + std::to_string(id) + " outside the vocabulary");
    fsdp::fuzz::require(tok.decode(ids) == text, "decode(encode(text)) != text");
  } catch (const std::runtime_error&) {
  }
  return 0;
}
