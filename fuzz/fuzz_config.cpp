// Fuzz target: the trainer's YAML config (fsdp::parse_config, which also validates). Any text is
// either a config or a ConfigError; a config it returns survives to_yaml and back unchanged, the
// contract --print-config relies on.
#include <stdexcept>
#include <string>

#include "fsdp/config/config.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  fsdp::TrainConfig config;
  try {
    config = fsdp::parse_config(text, "fuzz.yaml");
  } catch (const fsdp::ConfigError&) {
    return 0;
  }
  const std::string yaml = fsdp::to_yaml(config);
  fsdp::TrainConfig again;
  try {
    again = fsdp::parse_config(yaml, "to_yaml");
  } catch (const fsdp::ConfigError& e) {
    fsdp::fuzz::property_broken(std::string("to_yaml output refused: ") + e.what() + "\n" + yaml);
  }
  if (!(again == config)) {
    fsdp::fuzz::property_broken("to_yaml round trip changed the config:\n" + yaml +
                                "\nread back and written again:\n" + fsdp::to_yaml(again));
  }
  return 0;
}
