// PEFT adapter folders, in and out: what `PeftModel.from_pretrained(base, folder)` loads and
// `save_pretrained` writes for LoRA (adapter_config.json and adapter_model.safetensors), and a
// LoRA run's merged model (W + scaling B A). The adapters' tensors are named as our parameters
// are, PEFT's keys with "base_model.model." before them ("...q_proj.lora_A.weight"), and the
// modules trained in full (modules_to_save) under their own names likewise; the one place that
// knows PEFT's file layout and config fields (checked against peft 0.20's source: save_and_load.py,
// tuners/lora/config.py).
#pragma once

#include <string>
#include <vector>

#include "fsdp/checkpoint/full_state.h"
#include "fsdp/config/config.h"

namespace fsdp {
namespace hf {

// The prefix PEFT puts before a causal LM's parameter names in adapter_model.safetensors.
inline constexpr const char* kPeftPrefix = "base_model.model.";

// Whether DIR holds a PEFT adapter (adapter_config.json).
bool is_adapter_folder(const std::string& dir);

// DIR/adapter_config.json as our settings (lora.*), for load_config's model.adapter: a LoRA
// adapter PEFT saved, refused by name where it asks for what we do not do (another peft_type, DoRA,
// LoRA biases, rank or alpha patterns, layer selections, a regex target_modules, fan_in_fan_out
// unlike the model, a bias other than "none"). Throws ConfigError naming the file and the field.
FolderSettings read_adapter_settings(const std::string& dir);

// How DIR/adapter_model.safetensors loads onto a model with LoRA as `config` says: PEFT's prefix
// taken off, every adapter and module to save required, the base's parameters left as they are.
FullStateLoadOptions adapter_load_options(const TrainConfig& config);
std::string adapter_weights(const std::string& dir);  // DIR/adapter_model.safetensors

// Writes the adapter folder of the LoRA run whose checkpoint step folder is `step_dir` into
// `out_dir` (absent or empty; written beside it and renamed into place): adapter_config.json
// with PEFT's fields and adapter_model.safetensors with the adapters and the modules to save in
// fp32. Throws std::runtime_error naming the path at fault (a checkpoint of a run without LoRA
// among them). Returns the files written.
std::vector<std::string> export_adapter_folder(const std::string& step_dir,
                                               const std::string& out_dir);

// For a merged export of a LoRA run's checkpoint (hf::export_model_folder with merge): the
// consolidation's extras. The frozen base comes from `base` (the run's weights); every adapted
// weight gets scaling B A added ([out, in]; transposed for GPT-2's Conv1D, PEFT's
// fan_in_fan_out); the adapters themselves are not written.
ConsolidateExtras merge_extras(const std::string& step_dir, const TrainConfig& run,
                               const SafetensorsSet& base);

}  // namespace hf
}  // namespace fsdp
