// The sharding runtime's public face: wrap a model, train it through fsdp::forward, hand its
// shards to an optimizer.
//
//   auto model = fsdp::GPT2(config);
//   auto sharded = fsdp::fully_shard(model.ptr(), comm, fsdp::ShardingOptions()
//                      .wrap(fsdp::WrapPolicy::by_type({"GPT2Block"})));
//   auto logits = fsdp::forward(model, idx);           // root and units run their hooks
//   fsdp::gpt2_loss(logits, targets).backward();       // grads reduce-scattered unit by unit
//   optimizer.step();                                  // over sharded_params() only
//
// Contract: the root module and every wrapped module are called through fsdp::forward (see
// fsdp/hooks.h); wrapping replaces each parameter's data with a view into its unit's flat buffer
// (see docs/design.md, [Note: storage resize]), so the model's own code runs unchanged. Between
// steps parameters are sharded: read them through gather_full_params(). Any op on a sharded
// parameter (a read between steps, a wrapped module called directly) throws std::runtime_error
// naming it, its unit and what to call instead ([Note: released parameters]); its sizes, dtype
// and .grad stay readable. Buffers are rank 0's after fully_shard, then as
// ShardingOptions::buffer_sync says; checkpoints and full states hold them ([Note: buffers]).
// Collectives are issued in the same order on every rank, so every rank must run the same forward
// and backward. Gradients are averaged over ranks: with each rank's loss its own batch's mean,
// ranks of unequal batches give the mean of the ranks' means (as DDP), not the mean over every
// example. Frozen parameters (requires_grad false at fully_shard) are never stepped or decayed.
// Only the shards train: step them with fsdp's optimizers over sharded_params(*model)
// (fsdp/optim.h); torch::optim over model->parameters() finds no gradient there (they live in
// the shards) and changes nothing. A step while gradient synchronisation is off, after a backward
// that accumulated unsharded gradients, is refused (UnitShard::before_step). Not thread-safe: one training thread per process. The model is usable only while
// its FullyShardedModel lives: afterwards its parameters are views of released buffers.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fsdp/comm.h"
#include "fsdp/options.h"

namespace torch {
namespace nn {
class Module;
}
}  // namespace torch

namespace fsdp {

class Runtime;

// Bytes this rank holds for the sharding runtime, current and peak since the last reset.
struct MemoryStats {
  int64_t sharded_param_bytes = 0;  // fp32 master shards
  int64_t sharded_grad_bytes = 0;   // fp32 gradient shards
  // Shards of frozen parameters (requires_grad false), in param_dtype: no master, no gradient.
  int64_t sharded_frozen_bytes = 0;
  int64_t gathered_param_bytes = 0;  // unsharded (gathered) parameter buffers alive now
  int64_t peak_gathered_param_bytes = 0;
  int64_t grad_buffer_bytes = 0;  // unsharded gradient buffers and reduction scratch alive now
  int64_t peak_grad_buffer_bytes = 0;
  // The buffer pool behind gathered parameters, gradient buffers and reduction scratch: bytes it
  // holds (in use and cached for reuse), its peak, and how many blocks it ever took from the
  // system (constant after the first step when buffers are reused).
  int64_t pool_bytes = 0;
  int64_t peak_pool_bytes = 0;
  int64_t pool_fresh_blocks = 0;
  // Under offload_params: the bytes of the three kinds of shard above, which are in
  // host memory (pinned on a GPU) rather than on the device; 0 otherwise. The optimizer state
  // follows the shards.
  int64_t host_shard_bytes = 0;
  // Not bytes, but where prefetch's bytes went, since construction: units a prefetch gathered
  // that the step then used, and those it resharded unused (the model's unit order changed since
  // the first step).
  int64_t used_prefetches = 0;
  int64_t unused_prefetches = 0;
};

// One unit's view for optimizers and checkpoints: this rank's fp32 shard of the unit's flat
// parameter, its gradient, and a 0/1 mask over it selecting elements that get weight decay.
// For frozen parameters (FullyShardedModel::frozen_shards) the shard is in param_dtype and
// `grad` and `decay_mask` are undefined.
struct UnitShard {
  std::string unit_name;
  at::Tensor param;
  at::Tensor grad;
  at::Tensor decay_mask;
  // Blocks until no copy the model queued still reads `param` (CPU offload on a GPU: a no_sync
  // backward ends without waiting for its copies of the shards to the device); call it before
  // writing `param`, as the optimizers do. Empty where nothing can be pending. It stays valid
  // after the model is gone.
  std::function<void()> wait_writable = nullptr;
  // Called once a step has written `param` (the optimizers do, shards last to first, so the
  // root's first): with forward prefetch, the root's starts gathering for the next forward while
  // the other shards step (docs/design.md, [Note: root gathered after its step]). Empty where
  // nothing is to be done; it does nothing once the model is gone.
  std::function<void()> stepped = nullptr;
  // Called once before each optimizer step writes any shard (the optimizers call the first
  // shard's): throws when the step's gradients never reached the shards, because gradient
  // synchronisation is off and a backward left its gradients in the units' unsharded buffers.
  // Empty where nothing is to be checked; it does nothing once the model is gone.
  std::function<void()> before_step = nullptr;
};

// A buffer of the root module or a descendant, by qualified name ("bn.running_mean").
struct NamedBuffer {
  std::string name;
  at::Tensor tensor;
};

// Which parameters get weight decay: by default those with two or more dimensions (matrices and
// embeddings), not biases and norm weights.
using DecayRule = std::function<bool(const std::string& name, const at::Tensor& param)>;
bool default_decay_rule(const std::string& name, const at::Tensor& param);

// Where one original parameter lives in its unit's flat parameter: elements
// [offset, offset + numel) of the unpadded flat buffer, row-major in `shape`.
struct ParamLayout {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;
  int64_t numel = 0;
  std::vector<std::string> aliases;  // other names of the same tensor (tied parameters)
};

// One unit's layout. Shard r of `shard_count` holds elements [r * shard_numel, (r+1) * shard_numel)
// of the flat parameter padded (with zeros) to padded_numel = shard_count * shard_numel.
struct UnitInfo {
  std::string name;          // qualified module name; "" for the root
  int64_t numel = 0;         // parameters in the unit
  int64_t padded_numel = 0;  // numel padded to a multiple of the shard count
  int64_t shard_numel = 0;   // elements this rank holds
  std::vector<std::string> param_names;
  std::vector<ParamLayout> params;  // same order as param_names
  int shard_rank = 0;               // this rank's shard index (its rank in shard_group())
  int shard_count = 1;
};

// Frozen parameters: a parameter whose requires_grad is false when fully_shard is called does not
// train. Each unit keeps such parameters in a flat parameter of their own, in param_dtype: no fp32
// master, no gradient buffer or shard, no reduction, no optimizer state; it is gathered for
// forward and backward (gradients flow through it to what trains) and never changes. units() and
// shards() describe the parameters that train (a unit with none is absent from them: what an
// optimizer and a sharded checkpoint hold); frozen_units() and frozen_shards() the others. A
// unit with frozen parameters learns that its backward is done from its tensor arguments'
// gradients (as FSDP2 from its inputs'): a tensor needing a gradient that reaches such a unit
// other than as a tensor argument (inside a struct) keeps it gathered to the end of backward.
// Changing requires_grad after fully_shard changes nothing of this.
class FullyShardedModel {
 public:
  FullyShardedModel(std::shared_ptr<torch::nn::Module> root, CommPtr comm,
                    ShardingOptions options = {});
  ~FullyShardedModel();
  FullyShardedModel(const FullyShardedModel&) = delete;
  FullyShardedModel& operator=(const FullyShardedModel&) = delete;

  const ShardingOptions& options() const;
  // Where the model computes: its gathered parameters and gradients, and where its inputs go.
  // The shards are there too, or in host memory under offload_params.
  c10::Device device() const;
  // The layouts of the units' trainable flat parameters, root last (a unit that trains nothing is
  // left out), and of their frozen ones (a unit with none left out), in the same order.
  std::vector<UnitInfo> units() const;
  std::vector<UnitInfo> frozen_units() const;
  // This rank's shards of parameters that train, one per entry of units(), root last. The tensors
  // alias the runtime's storage: an optimizer updates them in place. Under offload_params on a GPU,
  // copies of the shards queued so far are waited for first, so that the caller may write the
  // shards (a checkpoint load); later writes (an optimizer's steps) call each UnitShard's
  // wait_writable first.
  std::vector<UnitShard> shards(const DecayRule& rule = default_decay_rule) const;
  // This rank's shards of frozen parameters, one per entry of frozen_units(): param_dtype,
  // without gradient or mask. Written only by a load (a checkpoint's or a pretrained model's).
  std::vector<UnitShard> frozen_shards() const;
  // The group across which shards are disjoint (size 1 under NO_SHARD): global gradient norms sum
  // over it.
  Comm& shard_group() const;
  // The group of ranks holding the same shard (size 1 unless NO_SHARD or hybrid): replica
  // replicate_group().rank() of the model. Checkpoints are written by replica 0.
  Comm& replicate_group() const;
  Comm& world() const;

  // Gradient synchronisation: while false, backward accumulates unsharded gradients locally and
  // communicates nothing; the next backward with it true reduces everything accumulated.
  void set_requires_gradient_sync(bool sync);
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(FullyShardedModel& m) : m_(m) { m_.set_requires_gradient_sync(false); }
    ~NoSyncGuard() { m_.set_requires_gradient_sync(true); }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    FullyShardedModel& m_;
  };
  NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // Every original parameter, frozen ones included, full and fp32, on every rank (an all-gather
  // per unit), where the shards live: on device(), or in host memory under offload_params.
  std::map<std::string, at::Tensor> gather_full_params();

  // The root module's buffers (BatchNorm's running statistics, counters, masks), each tensor
  // once under its first name: the module's own tensors, on device(). fully_shard made them rank
  // 0's on every rank; ShardingOptions::buffer_sync says what keeps them alike after that.
  std::vector<NamedBuffer> buffers() const;
  // Applies buffer_sync now, over the world (a collective; nothing under kPerRank or on one
  // rank): what a checkpoint or full-state save does first.
  void sync_buffers();

  MemoryStats memory() const;
  void reset_peak_memory();

 private:
  std::unique_ptr<Runtime> runtime_;
};

std::shared_ptr<FullyShardedModel> fully_shard(std::shared_ptr<torch::nn::Module> root,
                                               CommPtr comm, ShardingOptions options = {});

}  // namespace fsdp
