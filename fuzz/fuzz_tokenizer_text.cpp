// Fuzz target: text given to GPT-2's tokenizer (the real vocabulary from assets/gpt2). Any bytes,
// valid UTF-8 or not, encode to ids inside the vocabulary that decode back to the same bytes.
#include <string>
#include <string_view>

#include "fsdp/data/tokenizer.h"
#include "fuzz_target.h"

#ifndef FSDP_ASSETS_DIR
#error "FSDP_ASSETS_DIR (the folder of encoder.json and vocab.bpe) must be defined"
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto tok = fsdp::data::GPT2Tokenizer::load(FSDP_ASSETS_DIR "/encoder.json",
                                                          FSDP_ASSETS_DIR "/vocab.bpe");
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto ids = tok.encode(text);
  for (int32_t id : ids)
    fsdp::fuzz::require(id >= 0 && static_cast<size_t>(id) < tok.vocab_size(),
                        "id " + std::to_string(id) + " outside the vocabulary");
  fsdp::fuzz::require(tok.decode(ids) == text, "decode(encode(text)) != text");
  return 0;
}
