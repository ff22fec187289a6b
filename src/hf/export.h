// Hugging Face model folders out: a checkpoint becomes what transformers' from_pretrained and
// AutoTokenizer.from_pretrained load (config.json, generation_config.json, the weights as
// model.safetensors or shards with their index, the tokenizer files). The names the weights already
// have are transformers' (docs/safetensors.md); this file owns the rest of the folder.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fsdp/comm.h"

namespace fsdp {
namespace hf {

struct ExportOptions {
  // Element type of the weight files. Default: the dtype of model.pretrained's config.json when
  // the run started from a folder (a bf16 model comes back bf16), else fp32 (the master weights).
  std::optional<DType> dtype;
  // Bytes per weight file before it is split (transformers 5's default, 50 GB).
  int64_t max_shard_bytes = 50000000000LL;
  // Where the tokenizer files come from. Default: the checkpoint's data.tokenizer_dir.
  std::string tokenizer_dir;
  // A LoRA run's checkpoint: false (default) writes PEFT's adapter folder (hf/peft.h,
  // export_adapter_folder); true the merged model, each adapted weight W + scaling B A, as PEFT's
  // merge_and_unload gives it, in a model folder like any other's. Without LoRA: no effect.
  bool merge = false;
};

// Writes `out_dir` from the checkpoint step folder `step_dir` (any strategy or state-dict type;
// offline: no model, no processes). config.json starts from model.pretrained's when the run came
// from a folder that still exists (its model_type, architectures and fields we do not use come
// back as they were) and takes every value of the run's model; otherwise it is written whole.
// The folder appears complete or not at all: it is written beside `out_dir` and renamed into
// place. Throws std::runtime_error naming the path at fault: `out_dir` is refused by
// check_checkpoint_output (it exists and is not empty, or lies inside a checkpoint); no tokenizer
// files in the tokenizer folder; a write fails. Returns the files written, under `out_dir`.
std::vector<std::string> export_model_folder(const std::string& step_dir,
                                             const std::string& out_dir,
                                             const ExportOptions& options = {});

}  // namespace hf
}  // namespace fsdp
