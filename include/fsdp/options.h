// Options of the sharding runtime: plain structs, each field with its documented default, and the
// one parser that turns user-facing names (PyTorch's and Accelerate's) into them.
//
// Fluent setters follow LibTorch's option style:
//   fsdp::ShardingOptions().strategy(fsdp::ShardingStrategy::kFullShard)
//       .wrap(fsdp::WrapPolicy::by_type({"GPT2Block"})).param_dtype(fsdp::DType::kBFloat16)
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "fsdp/comm.h"

namespace at {
class Tensor;
}

namespace fsdp {

// See fsdp/init.h: fills a deferred parameter's full fp32 values from its qualified name.
using ParamInit = std::function<void(const std::string& name, at::Tensor& full)>;

// PyTorch FSDP's strategies, in the order of its enum (Accelerate's 1-5 numbering).
enum class ShardingStrategy {
  kFullShard = 1,    // params, grads, optimizer state sharded; params freed after each forward
  kShardGradOp = 2,  // like FULL_SHARD, but params stay gathered from forward to end of backward
  kNoShard = 3,      // replicated params, all-reduced grads (DDP semantics)
  kHybridShard = 4,  // FULL_SHARD within a shard group (a node), replicated across groups
  kHybridShardZero2 = 5,  // SHARD_GRAD_OP within a shard group, replicated across groups
};

// Accepts "FULL_SHARD", "full_shard", "1", ...; throws std::invalid_argument listing the valid
// names otherwise.
ShardingStrategy parse_sharding_strategy(const std::string& name);
const char* to_string(ShardingStrategy strategy);
// HYBRID_SHARD and HYBRID_SHARD_ZERO2: sharded within shard groups, replicated across them.
bool is_hybrid(ShardingStrategy strategy);
// FULL_SHARD and HYBRID_SHARD free a (non-root) unit's gathered parameters after its forward.
bool reshards_after_forward(ShardingStrategy strategy);
// The pieces a split root reduction's early part goes in (ShardingOptions::root_reduction_chunks):
// `option` when positive, else the root's elements over the largest wrapped unit's, rounded up,
// at most `wrapped_units` and the root's shard elements, at least 1. Throws
// std::invalid_argument for a negative option, or one above the root's shard elements (a piece
// would be empty).
int root_reduction_chunks(int option, int64_t root_numel, int64_t largest_unit_numel,
                          int64_t wrapped_units, int64_t root_shard_numel);

// When backward gathers the next unit's parameters (PyTorch's BackwardPrefetch), by the unit order
// the first backward recorded.
enum class BackwardPrefetch {
  kBackwardPre,   // when a unit's backward begins, before its gradients are computed (default)
  kBackwardPost,  // once a unit's gradients are computed, before its reduction completes
  kNoPrefetch,    // each unit is gathered when backward reaches it
};
const char* to_string(BackwardPrefetch prefetch);  // "BACKWARD_PRE", ...

// What keeps the root module's buffers (BatchNorm's running statistics, counters, masks) alike
// across ranks once fully_shard has broadcast rank 0's (as DDP does at construction, and FSDP
// with sync_module_states). Applied when the root's forward begins, and before a checkpoint or a
// full state is saved, over the whole world.
enum class BufferSync {
  // Each rank's forward updates its own buffers, from its own batch: PyTorch FSDP's behaviour
  // (and DDP's with broadcast_buffers=False), BatchNorm without SyncBatchNorm. Checkpoints and
  // full states hold rank 0's. Default.
  kPerRank,
  // Every forward starts from rank 0's buffers: DDP's broadcast_buffers=True.
  kBroadcast,
  // Every forward starts from the mean over ranks of the floating-point buffers (computed in
  // fp32), the others rank 0's: running statistics then average the ranks' batches (with equal
  // batches, the running mean is one process's on the global batch; the running variance leaves
  // out the spread between the ranks' means).
  kAverage,
};
const char* to_string(BufferSync sync);  // "PER_RANK", "BROADCAST", "AVERAGE"

// Which submodules become FSDP units. Parameters not claimed by any unit form the root unit.
struct WrapPolicy {
  enum class Kind {
    kNone,        // one unit: the root (default)
    kModuleType,  // every module whose class is named in `module_types`
    kSize,        // bottom-up: a module whose not-yet-wrapped parameters number >= min_num_params
    kExplicit,    // the modules at the qualified names in `module_names` ("transformer.h.0")
  };
  Kind kind = Kind::kNone;
  // Class names as users write them: "GPT2Block" matches fsdp::GPT2BlockImpl (namespace and the
  // LibTorch "Impl" suffix are ignored). Default: empty.
  std::vector<std::string> module_types;
  // For kSize. Default: 1e8, PyTorch's size_based_auto_wrap_policy default.
  int64_t min_num_params = 100000000;
  // For kExplicit. Default: empty.
  std::vector<std::string> module_names;

  static WrapPolicy none() { return {}; }
  static WrapPolicy by_type(std::vector<std::string> types);
  static WrapPolicy by_size(int64_t min_num_params);
  static WrapPolicy by_name(std::vector<std::string> names);
};

struct ShardingOptions {
  // Default: FULL_SHARD.
  ShardingStrategy strategy_ = ShardingStrategy::kFullShard;
  // Default: no wrapping (the whole model is one unit).
  WrapPolicy wrap_;
  // Where shards, gathered parameters, gradients and optimizer state live, as LibTorch spells a
  // device: "cpu", "cuda", "cuda:1". Parameters elsewhere are copied there unit by unit, and
  // the root module's buffers are moved there. PyTorch FSDP's device_id. Default "": on an NCCL
  // group its GPU (as FSDP2 takes its mesh's device), else the device the parameters are on (all
  // on one).
  std::string device_;
  // Dtype of gathered parameters, forward and backward compute, and unsharded gradients: fp32 or
  // bf16, and fp16 on CUDA (CPU LibTorch has no fp16 kernels). Default: fp32 (no mixed
  // precision). Master shards and optimizer state stay fp32 regardless.
  DType param_dtype_ = DType::kFloat32;
  // Dtype in which gradients are reduced across ranks: fp32, bf16 or fp16. Default: fp32.
  DType reduce_dtype_ = DType::kFloat32;
  // HYBRID strategies only: ranks per shard group, the inner dimension of the (replicate x shard)
  // mesh; must divide the world size. Ranks r and r' share a shard group when r / size ==
  // r' / size. Default 0: the ranks of one node (the launcher's LOCAL_WORLD_SIZE).
  int shard_group_size_ = 0;
  // Forward prefetch: when a unit's forward begins, start gathering the next units in the order
  // the first forward recorded, so that their all-gathers overlap this unit's compute; and once an
  // optimizer step has written the root's shard, start gathering the root for the next forward
  // while the other shards step (docs/design.md, [Note: root gathered after its step]). Default
  // false (PyTorch's default).
  bool forward_prefetch_ = false;
  // Default BACKWARD_PRE (PyTorch's default).
  BackwardPrefetch backward_prefetch_ = BackwardPrefetch::kBackwardPre;
  // How many units ahead a prefetch gathers, forward and backward. Default 1 (PyTorch FSDP1).
  int prefetch_depth_ = 1;
  // Rate limit: at most this many units gathered ahead by prefetch and not yet used, so that
  // prefetch cannot hold more than this many extra units' parameters. 0: no limit. Default 2
  // (PyTorch's limit_all_gathers=True allows two all-gathers in flight).
  int limit_all_gathers_ = 2;
  // Whether a unit frees its gathered parameters after its forward (and gathers them again in
  // backward), by unit name ("" or "(root)" for the root). A unit not named follows the strategy:
  // FULL_SHARD and HYBRID_SHARD reshard, SHARD_GRAD_OP and HYBRID_SHARD_ZERO2 do not, and the
  // root never does (backward needs it first). A name that is not a unit is an error.
  std::map<std::string, bool> reshard_after_forward_;
  // Activation checkpointing: these units (by name; "*" for every unit but the root) keep only
  // their inputs in forward and run their forward again in backward. Their modules must be
  // called through fsdp::forward with tensor (or non-tensor, copied) arguments. Default: none.
  std::vector<std::string> checkpoint_units_;
  // Selective activation checkpointing by layer (torchtitan's selective_ac_option "N"): "*" takes
  // every N-th unit in forward order (the 1st, the (N+1)-th, ...; the root not counted), so
  // that the rest keep their activations and skip the recomputation. Units named in
  // checkpoint_units are checkpointed whatever N. Must be at least 1. Default 1: every unit.
  int checkpoint_every_ = 1;
  // CPU offload (PyTorch's CPUOffload(offload_params=True), FSDP2's CPUOffloadPolicy): master
  // shards, gradient shards and the optimizer state, which follows the shards, live in host
  // memory, pinned when the device is a GPU; the device holds only gathered parameters, unsharded
  // gradients and reduction scratch. Each unit's shard is copied to the device just before its
  // all-gather (prefetched with it), its reduced gradient shard copied back, and the optimizer
  // steps on the CPU (AdamW's fused CPU kernel). On a CPU device the shards are in host memory
  // anyway: the option then only keeps each shard apart from its gathered copy. Default false.
  bool offload_params_ = false;
  // Reduce the root unit's gradients in two parts (docs/design.md, [Note: split root
  // reduction]): what is final when backward reaches the first wrapped unit (the output head's
  // gradients; with tied embeddings, the head's share of the table's) at that moment, behind the
  // units' backward, and the rest (the embeddings' lookups) at the end as the rows the batch
  // touched. Without it the root's whole reduction waits for the end of backward, where nothing
  // hides it. Where the rest is too dense to send as rows (more than half a reduce-scatter's
  // bytes: many tokens per step against the vocabulary) it is reduced whole, and the root's
  // reduction costs twice its bytes, the first half hidden. Not made under offload_params, nor
  // where the root is the only unit or a reduction involves one rank. Same gradients either way,
  // summed in another order. Default true.
  bool split_root_reduction_ = true;
  // Under split_root_reduction, the pieces the root's early part is reduced in: one issued as
  // each of the first wrapped units' backward begins, so that a collective queue that runs in
  // issue order (Gloo's, a NCCL stream) never holds a unit's reduce-scatter behind the whole
  // root's, and the root's traffic spreads over the backward (docs/design.md, [Note: split root
  // reduction]). Each piece is a slice of every rank's shard, copied into a staging buffer of 1/K
  // of the root's gradient. 0 (the default): pieces about a wrapped unit's size, the root's
  // elements over the largest unit's, rounded up, at most one per unit (GPT-2 124M: 6; Llama 2
  // 7B: 2); on a slow link one per unit may hide more, at a collective's latency and (with many
  // ranks) the early buffer's memory through more units (fsdp-plan prices both). 1: one piece (no
  // staging copy, the schedule before 2026-11-27). A count above the wrapped units' issues the
  // rest at the end of backward, unhidden; one above the root's shard elements is an error.
  int root_reduction_chunks_ = 0;
  // How the root module's buffers stay alike across ranks (BufferSync above). Default kPerRank.
  BufferSync buffer_sync_ = BufferSync::kPerRank;
  // Materialises deferred parameters (fsdp/init.h): fully_shard calls it once per deferred
  // parameter, on a temporary full-size fp32 tensor, and keeps only this rank's slice, so no rank
  // ever holds more than one full parameter at a time. PyTorch FSDP's param_init_fn. Default:
  // none; a deferred parameter is then an error.
  ParamInit param_init_;

  ShardingOptions& strategy(ShardingStrategy s) {
    strategy_ = s;
    return *this;
  }
  ShardingOptions& wrap(WrapPolicy w) {
    wrap_ = std::move(w);
    return *this;
  }
  ShardingOptions& device(std::string d) {
    device_ = std::move(d);
    return *this;
  }
  ShardingOptions& param_dtype(DType d) {
    param_dtype_ = d;
    return *this;
  }
  ShardingOptions& reduce_dtype(DType d) {
    reduce_dtype_ = d;
    return *this;
  }
  ShardingOptions& shard_group_size(int n) {
    shard_group_size_ = n;
    return *this;
  }
  ShardingOptions& forward_prefetch(bool on) {
    forward_prefetch_ = on;
    return *this;
  }
  ShardingOptions& backward_prefetch(BackwardPrefetch p) {
    backward_prefetch_ = p;
    return *this;
  }
  ShardingOptions& prefetch_depth(int units) {
    prefetch_depth_ = units;
    return *this;
  }
  ShardingOptions& limit_all_gathers(int units) {
    limit_all_gathers_ = units;
    return *this;
  }
  ShardingOptions& reshard_after_forward(const std::string& unit, bool reshard) {
    reshard_after_forward_[unit] = reshard;
    return *this;
  }
  ShardingOptions& checkpoint_units(std::vector<std::string> units) {
    checkpoint_units_ = std::move(units);
    return *this;
  }
  ShardingOptions& checkpoint_every(int n) {
    checkpoint_every_ = n;
    return *this;
  }
  ShardingOptions& offload_params(bool on) {
    offload_params_ = on;
    return *this;
  }
  ShardingOptions& split_root_reduction(bool on) {
    split_root_reduction_ = on;
    return *this;
  }
  ShardingOptions& root_reduction_chunks(int chunks) {
    root_reduction_chunks_ = chunks;
    return *this;
  }
  ShardingOptions& buffer_sync(BufferSync sync) {
    buffer_sync_ = sync;
    return *this;
  }
  ShardingOptions& param_init(ParamInit init) {
    param_init_ = std::move(init);
    return *this;
  }
};

}  // namespace fsdp
