// Full (unsharded) model state as one safetensors file, exported from and imported into a sharded
// model of any world size, strategy and wrap policy. The file holds every original parameter once,
// full and row-major under its module path, the way transformers' save_pretrained writes it: for
// GPT-2, "transformer.h.0.attn.c_attn.weight" (in, out) and no "lm_head.weight" (tied to
// "transformer.wte.weight"), the names and layout transformers' GPT2LMHeadModel loads
// (docs/safetensors.md).
//
//   fsdp::save_full_safetensors(*sharded, "out/model.safetensors");   // every rank calls it
//   fsdp::load_full_safetensors(*sharded, "out/model.safetensors");   // every rank calls it
//
// Memory: saving gathers one unit at a time on the ranks of replica 0 (the others only wait), and
// rank 0 streams that unit's parameters to the file before the next is gathered, so no rank holds
// more than one unit's full parameters (plus, for a bf16 file, a bounded conversion buffer).
// Loading reads, on each rank, only the bytes of its own shard, straight into the shard.
//
// Both are collectives over the model's world: every rank calls them with the same arguments,
// between training steps (not between a forward and its backward). A failure on one rank (a file
// rank 0 cannot write, a tensor missing from the file) makes the call throw on every rank, so no
// rank is left waiting in a collective.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "fsdp/checkpoint/safetensors.h"
#include "fsdp/checkpoint/safetensors_set.h"
#include "fsdp/comm.h"
#include "fsdp/fully_shard.h"

namespace fsdp {

struct FullStateSaveOptions {
  // Element type of the file: kFloat32 (default: the master weights exactly), kBFloat16 or
  // kFloat16 (rounded to nearest even, half the bytes).
  DType dtype_ = DType::kFloat32;
  // Entries added to the header's "__metadata__" next to "format": "pt". Default: none.
  std::map<std::string, std::string> metadata_;

  FullStateSaveOptions& dtype(DType d) {
    dtype_ = d;
    return *this;
  }
  FullStateSaveOptions& metadata(std::map<std::string, std::string> m) {
    metadata_ = std::move(m);
    return *this;
  }
};

struct FullStateLoadOptions {
  // Default true: a tensor in the file that names no parameter of the model is an error. False:
  // such tensors are ignored (a file with buffers, or with more heads than the model).
  bool strict_ = true;
  // Default false: every rank opens the file and reads its own shard's bytes. True (Accelerate's
  // cpu_ram_efficient_loading): only rank 0 reads it, the file need exist on rank 0 only, and each
  // unit is broadcast whole to every rank, which keeps its shard: memory on any rank is bounded by
  // the largest unit, traffic is the model's size times the world size.
  bool from_rank0_ = false;
  // The files' tensor names to the model's parameter names (an empty result ignores the tensor);
  // default none: the names are the model's. What a model folder of another naming needs
  // (hf/folder.h maps Hub-style GPT-2 files this way).
  TensorNameMap name_map_;
  // Parameters the file may lack, which then keep their values (a base model's file holds no
  // LoRA adapters: they keep their initialisation). Default none: every parameter must be there.
  std::function<bool(const std::string& name)> may_lack_;

  FullStateLoadOptions& strict(bool s) {
    strict_ = s;
    return *this;
  }
  FullStateLoadOptions& from_rank0(bool r) {
    from_rank0_ = r;
    return *this;
  }
  FullStateLoadOptions& name_map(TensorNameMap m) {
    name_map_ = std::move(m);
    return *this;
  }
  FullStateLoadOptions& may_lack(std::function<bool(const std::string& name)> f) {
    may_lack_ = std::move(f);
    return *this;
  }
};

// Writes every parameter of `model`, full, to `path` (atomically: a temporary file renamed into
// place by rank 0). Tied parameters are written once, under the name the runtime lists first
// (ParamLayout::name); their aliases are not written. On return the file exists for every rank.
// Throws SafetensorsError on every rank when rank 0 cannot write; std::invalid_argument for a
// dtype other than fp32, bf16 or fp16.
void save_full_safetensors(FullyShardedModel& model, const std::string& path,
                           const FullStateSaveOptions& options = {});

// Sets every parameter of `model` from `path`: a .safetensors file, an index
// (model.safetensors.index.json) with its shard files, or a folder holding either
// (SafetensorsSet). Each rank overwrites its own fp32 shards in place
// (padding stays zero), and the next forward gathers the new values. A tied parameter is read
// from its primary name, or from an alias when only that is in the file. Every rank checks the
// whole file against the model before any rank changes anything; a file that does not fit makes
// every rank throw SafetensorsError, naming the file and the tensor: a parameter missing from the
// file, a tensor the model lacks (when strict), a shape that differs, a dtype that does not
// convert to fp32 (integers, bool). An I/O error while reading can leave the shards partly
// loaded. Optimizer state is not touched.
void load_full_safetensors(FullyShardedModel& model, const std::string& path,
                           const FullStateLoadOptions& options = {});

// Offline (no model, no processes): writes the parameters of the sharded checkpoint `dir` as one
// safetensors file, with the names and layout save_full_safetensors writes (tied parameters once,
// under their first name). Streams `chunk_elements` elements at a time from the shard files
// (checksums verified) to the file, so memory stays bounded by one chunk whatever the model's
// size. `dtype`: kFloat32 (the master weights exactly) or kBFloat16 / kFloat16 (rounded). Throws
// CheckpointError naming the file at fault, and, before anything is written, for an output inside
// a checkpoint (check_checkpoint_output in ownership.h).
// What a consolidation takes besides the checkpoint.
struct ConsolidateExtras {
  // A checkpoint of a run with frozen parameters (CheckpointMetadata::frozen) does not hold them:
  // the weights the run started from supply them (read by their names or their aliases', checked
  // against their shapes first). Null (default): such a checkpoint is refused, naming what it
  // lacks.
  const SafetensorsSet* frozen_from = nullptr;
  // Parameters left out of the output (a LoRA run's adapters in a merged export). Default: none.
  std::function<bool(const std::string& name)> omit;
  // Added to a parameter's values before they are written: a contiguous fp32 tensor of its
  // element count, or undefined for nothing (a merged LoRA weight's scaling B A). Default: none.
  std::function<at::Tensor(const std::string& name)> addend;
};

void consolidate_checkpoint(const std::string& dir, const std::string& out_path,
                            DType dtype = DType::kFloat32, int64_t chunk_elements = 1 << 22,
                            const ConsolidateExtras& extras = {});

// consolidate_checkpoint into the folder `out_dir` (which must exist), split as transformers'
// save_pretrained splits a model: model.safetensors when the parameters' bytes fit in
// `max_shard_bytes` (default 50 GB, transformers 5's default), else
// model-00001-of-0000N.safetensors
// ... (parameters in checkpoint order, a new file when the next one would overflow the current;
// one larger than the limit gets a file of its own) with model.safetensors.index.json
// ({"metadata": {"total_size": bytes}, "weight_map": {name: file}}). Returns the files written.
std::vector<std::string> consolidate_checkpoint_files(const std::string& dir,
                                                      const std::string& out_dir,
                                                      DType dtype = DType::kFloat32,
                                                      int64_t max_shard_bytes = 50000000000LL,
                                                      int64_t chunk_elements = 1 << 22,
                                                      const ConsolidateExtras& extras = {});

}  // namespace fsdp
