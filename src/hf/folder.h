// Hugging Face model folders, in and out: the one place that knows transformers' names, so that
// the models, the runtime and the checkpoint format learn none of them.
//
// In: a folder's config.json becomes the model.* settings (model_type gpt2, llama, and the
// Llama-shaped mistral and qwen2), refusing by name a model type, architecture or field value we
// do not implement and a field we do not know; its weights load through a name map where the
// files' names differ from ours (Hub-style GPT-2 files). Out: config.json, generation_config.json
// and the tokenizer files beside the weights, so that transformers' from_pretrained loads the
// folder (hf/export.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fsdp/checkpoint/safetensors_set.h"
#include "fsdp/config/config.h"

namespace fsdp {
namespace hf {

// Reads DIR/config.json as our settings (a FolderReader: load_config applies them);
// `context_length` is the run's (sliding windows shorter than it are refused). Throws ConfigError
// naming the file and the field.
FolderSettings read_folder_settings(const std::string& dir, int64_t context_length);

// The map from a folder's tensor names to ours, for FullStateLoadOptions::name_map: Hub-style
// GPT-2 files (openai-community/gpt2: no "transformer." prefix, and the causal-mask buffers
// "h.N.attn.bias" / "h.N.attn.masked_bias", which transformers ignores too); none otherwise.
TensorNameMap weight_name_map(ModelType type);

}  // namespace hf
}  // namespace fsdp
