// Fuzz target: a chat template (the Jinja engine, data/jinja.h), parsed and rendered on a short
// conversation with and without the generation prompt. Any text is either refused or rendered,
// and only ever with jinja::Error; a rendering stays within the output cap. The caps are lowered
// (work, loops, output) so that each input runs in milliseconds: what is checked is that a cap
// ends the rendering, whatever its size.
#include <string>

#include "data/jinja.h"
#include "fuzz_target.h"

namespace jinja = fsdp::data::jinja;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  jinja::Limits limits;
  limits.max_steps = 200'000;
  limits.max_loop_iterations = 20'000;
  limits.max_output_bytes = 1 << 20;
  limits.max_items = 20'000;
  try {
    const jinja::Template t = jinja::Template::parse(text, "fuzz", limits);
    const auto message = [](const char* role, const char* content) {
      return jinja::Value::dict(
          {{"role", jinja::Value::string(role)}, {"content", jinja::Value::string(content)}});
    };
    const jinja::Value messages =
        jinja::Value::list({message("system", "Be brief."), message("user", "Hi <|im_end|> é"),
                            message("assistant", " <think>x</think>ok\n")});
    for (bool prompt : {false, true}) {
      try {
        const std::string out = t.render({{"messages", messages},
                                          {"add_generation_prompt", jinja::Value::boolean(prompt)},
                                          {"bos_token", jinja::Value::string("<s>")},
                                          {"tools", jinja::Value::none()}});
        fsdp::fuzz::require(out.size() <= limits.max_output_bytes,
                            "a rendering past the output cap: " + std::to_string(out.size()));
      } catch (const jinja::Error&) {
      }
    }
  } catch (const jinja::Error&) {
  }
  return 0;
}
