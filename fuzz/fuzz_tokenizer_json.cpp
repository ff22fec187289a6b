// Fuzz target: a Hugging Face tokenizer.json (HFTokenizer::parse, no tokenizer_config.json).
// Malformed or unsupported files are a std::runtime_error; a tokenizer built from one encodes any
// text, with and without special tokens, and decodes the ids it gave (every one names a token of
// its vocabulary or an added token, so decode never finds an id outside them).
#include <stdexcept>
#include <string>

#include "fsdp/data/hf_tokenizer.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string json(reinterpret_cast<const char*>(data), size);
  try {
    const auto tok = fsdp::data::HFTokenizer::parse(json, "", "fuzz");
    const std::string text =
        "Hello  world, it's 1790!\r\n\xff\xfe <s> caf\xc3\xa9 " + json.substr(0, 64);
    const auto ids = tok.encode(text);
    tok.encode_with_special_tokens(text);
    tok.decode(ids);
  } catch (const std::runtime_error&) {
  }
  return 0;
}
