// Hugging Face model folders, in and out: the one place that knows transformers' names, so that
// the models, the runtime and the checkpoint format learn none of them.
//
// In: a folder's config.json becomes the model.* settings (model_type gpt2, llama, and the
// Llama-shaped mistral and qwen2), refusing by name a model type, architecture or field value we
// do not implement and a field we do not know; its weights load through a name map where the
// files' names differ from ours (Hub-style GPT-2 files). Out: config.json, generation_config.json
// and the tokenizer files beside the weights, so that transformers' from_pretrained loads the
// folder (hf_export.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fsdp/checkpoint/safetensors_set.h"
#include "fsdp/train/config.h"
#include "train/config_schema.h"

namespace fsdp {
namespace hf {

// What a folder's config.json says, as our settings.
struct FolderSettings {
  struct Value {
    std::string text;   // as a --KEY VALUE override would give it
    std::string field;  // the config.json field it came from
  };
  std::map<std::string, Value> settings;  // "model.n_layer" -> {"12", "num_hidden_layers"}
  std::string dtype;                      // "float32", "bfloat16", "float16"; "" when not given
  // Things the run does differently from transformers' training, logged when the run starts
  // (dropout: fsdp.cpp's models have none).
  std::vector<std::string> notes;
};

// Reads DIR/config.json; `context_length` is the run's (sliding windows shorter than it are
// refused). Throws ConfigError naming the file and the field.
FolderSettings read_folder_settings(const std::string& dir, int64_t context_length);

// When config.model.pretrained is set: sets the model.* keys config.json determines, data.seq_len
// to a GPT-2's n_positions when the default is longer, and, when the folder has a tokenizer and
// data.tokenizer_dir was not set, data.tokenizer_dir (each only when not set); the folder is
// made absolute (a checkpoint's saved config then finds it from anywhere). `origins` says which
// keys were set by the user: a value that contradicts config.json is a ConfigError naming both.
// The values set are recorded in `origins` as coming from config.json. Returns the notes.
std::vector<std::string> apply_pretrained(TrainConfig& config, config::Origins& origins);

// The map from a folder's tensor names to ours, for FullStateLoadOptions::name_map: Hub-style
// GPT-2 files (openai-community/gpt2: no "transformer." prefix, and the causal-mask buffers
// "h.N.attn.bias" / "h.N.attn.masked_bias", which transformers ignores too); none otherwise.
TensorNameMap weight_name_map(ModelType type);

}  // namespace hf
}  // namespace fsdp
