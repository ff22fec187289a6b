// Hugging Face model folders, in and out: the one place that knows transformers' names, so that
// the models, the runtime and the checkpoint format learn none of them.
//
// In: a folder's config.json becomes the model.* settings (model_type gpt2, llama, and the
// Llama-shaped mistral, qwen2, qwen3, smollm3, phi3 and gemma3_text), refusing by name a model
// type, architecture or field value we do not implement and a field we do not know; its weights
// load through a name map where the files' names differ from ours (Hub-style GPT-2 files). Out:
// config.json, generation_config.json and the tokenizer files beside the weights, so that
// transformers' from_pretrained loads the folder (hf/export.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fsdp/checkpoint/full_state.h"
#include "fsdp/checkpoint/safetensors_set.h"
#include "fsdp/config/config.h"

namespace fsdp {
namespace hf {

// Reads DIR/config.json as our settings (a FolderReader: load_config applies them);
// `context_length` is the run's (sliding windows shorter than it are refused). Throws ConfigError
// naming the file and the field. A context_length of -1: DIR is model.adapter's PEFT folder
// (hf/peft.h, read_adapter_settings).
FolderSettings read_folder_settings(const std::string& dir, int64_t context_length);

// Checks the weights in the folder config.model.pretrained against the model `config` describes,
// from the files' headers alone (nothing is allocated): every parameter the config implies is
// there with its shape, the blocks are as many as the config says, and no tensor is left over.
// Throws ConfigError naming config.json's field (and our key) and the tensor: a config.json
// edited to a vocab_size of 20 million, or 100,000 layers, over weights of another size is refused
// at once instead of building a model that does not fit. The load that follows checks the same
// again as it reads.
void check_folder_weights(const TrainConfig& config);

// The map from a folder's tensor names to ours, for FullStateLoadOptions::name_map: Hub-style
// GPT-2 files (openai-community/gpt2: no "transformer." prefix, and the causal-mask buffers
// "h.N.attn.bias" / "h.N.attn.masked_bias", which transformers ignores too); none otherwise.
TensorNameMap weight_name_map(ModelType type);

// How the weights a run starts from (model.init_from, else model.pretrained) load into its model:
// through weight_name_map when model.pretrained is set, and under LoRA with the adapters left as
// initialised (a base model's file holds none: FullStateLoadOptions::may_lack).
FullStateLoadOptions start_weights_options(const TrainConfig& config);

// A fingerprint of the weights at `path` (a file, an index or a folder, as SafetensorsSet opens
// them): each data file's size, and a CRC-32 over its first 2 MiB (its header: every name, dtype,
// shape and offset, and the first tensors' bytes) and its last MiB. What a checkpoint of a run
// with frozen parameters records of the base it read, so that a resume onto other weights is
// refused; a change inside a file that keeps its size and both ends is not seen.
std::string weights_fingerprint(const std::string& path);

}  // namespace hf
}  // namespace fsdp
