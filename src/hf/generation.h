// How a Hugging Face model folder says to generate: generation_config.json (or, where that is
// absent, config.json's ids) read as transformers' generate() starts from it, so that
// `fsdp-train sample` on a folder continues a prompt as `model.generate(**tokenizer(prompt))`
// does. The sampler (src/train/inference.cpp) puts its flags on top.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fsdp {
namespace hf {

struct GenerationDefaults {
  std::string file;  // the generation_config.json read; empty when the folder has none
  // Its fields; unset where it does not give them (transformers' defaults then: no sampling,
  // temperature 1, top_k 50, top_p 1).
  std::optional<bool> do_sample;
  std::optional<double> temperature, top_p;
  std::optional<int64_t> top_k, max_new_tokens, max_length;
  // Generation stops at any of these: generation_config.json's eos_token_id (a number or a list),
  // else config.json's. Empty when neither gives one.
  std::vector<int64_t> eos_ids;
  // Fields that would change what generate() does and that the sampler does not do
  // (repetition_penalty 1.1, num_beams 4, ...), each "FIELD = VALUE", for the log.
  std::vector<std::string> not_applied;
};

// Reads DIR/generation_config.json and DIR/config.json's eos_token_id, each bounded as config.json
// is (a regular file of at most 1 MiB, 64 levels). A missing file is no error; a malformed one, or
// a field of the wrong type or outside what sample's flags accept (max_new_tokens and max_length
// up to 2^20, top_p in (0, 1], ...), throws std::runtime_error naming the file and the field.
GenerationDefaults read_generation_defaults(const std::string& dir);

}  // namespace hf
}  // namespace fsdp
