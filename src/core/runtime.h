// The sharding runtime's internals: units (one FlatParam each, with their state machine and
// hooks) and the Runtime that owns them, the comm groups, gradient reduction and memory counts.
//
// A step, per unit (FULL_SHARD):
//   pre_forward: unshard (all-gather), prefetch the next units    post_forward: reshard, wrap
//     outputs for backward
//   pre_backward (from the outputs' backward): unshard, prefetch (BACKWARD_PRE), attach .grad
//     views into a flat buffer
//   grad ready (accumulator post hooks count down): reduce-scatter, add to the grad shard, reshard
//   final callback (queued by the first pre_backward): finish units autograd never reached, wait
//   for outstanding reductions, reshard everything.
// Prefetch follows the unit orders the first forward and backward recorded. Gathered parameters,
// unsharded gradients and reduction scratch come from one BufferPool. Under CPU offload shards
// live in host memory, copied in before each gather and out after each reduction (docs/design.md,
// [Note: offload]).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "compat.h"
#include "core/buffer_pool.h"
#include "core/flat_param.h"
#include "core/split_reduce.h"
#include "core/streams.h"
#include "fsdp/fully_shard.h"
#include "fsdp/hooks.h"

namespace torch {
namespace autograd {
struct Node;
struct FunctionPreHook;
}  // namespace autograd
}  // namespace torch

namespace fsdp {

class Runtime;
struct PendingReduce;

// A unit to be: a wrapped module that owns parameters, or the root (last), with its parameters.
struct UnitSpec {
  std::string name;  // "" for the root
  const torch::nn::Module* module = nullptr;
  std::vector<ParamSlot> slots;
  bool is_root = false;
};

enum class UnitState { kSharded, kGathering, kUnsharded };

// Per-unit choices the options make.
struct UnitPolicy {
  bool reshard_after_forward = false;
  bool checkpoint = false;  // activation checkpointing
};

class Unit : public ModuleHooks {
 public:
  Unit(Runtime& runtime, std::string name, const torch::nn::Module* module,
       std::vector<ParamSlot> slots, bool is_root, UnitPolicy policy);
  // Removes the gradient-accumulator hooks, which point back at this unit.
  ~Unit() override;
  Unit(const Unit&) = delete;
  Unit& operator=(const Unit&) = delete;

  // ModuleHooks: called by fsdp::forward around the module's forward.
  void pre_forward() override;
  std::vector<at::Tensor> post_forward(std::vector<at::Tensor> outputs) override;
  bool checkpointed() const override { return policy_.checkpoint; }
  // A unit with frozen parameters (the root aside) passes its tensor arguments through an
  // autograd node whose backward says its inputs' gradients are known ([Note: frozen
  // parameters]).
  bool wraps_inputs() const override { return !is_root_ && !frozen_.empty(); }
  std::vector<at::Tensor> pre_forward_inputs(std::vector<at::Tensor> inputs) override;

  // Called by autograd: before the unit's backward, and after each parameter's gradient lands.
  void pre_backward();
  void on_grad_accumulated();
  // The gradients of the tensor arguments of one of this unit's calls are known.
  void inputs_done();
  // The root only: reduce what its gradients hold so far, once per backward, when the first
  // wrapped unit's backward begins (docs/design.md, [Note: split root reduction]).
  void reduce_early();
  // Reduce this unit's gradients (unless sync is off) and reshard. Idempotent per backward.
  void post_backward();
  // End-of-backward bookkeeping (the runtime's final callback).
  void finish_backward();

  // Start gathering the parameters (all-gather, asynchronous) / wait until they are gathered.
  // `phase` labels the collective in timeout messages.
  void issue_unshard(const char* phase);
  void wait_unshard();
  void reshard();
  // Starts gathering ahead of use; false when the unit is already gathered or gathering.
  bool prefetch(const char* phase);

  const std::string& name() const { return name_; }
  const std::string& display_name() const { return display_name_; }
  const torch::nn::Module* module() const { return module_; }
  bool is_root() const { return is_root_; }
  UnitState state() const { return state_; }
  // The unit's trainable parameters (possibly none) and its frozen ones (possibly none).
  FlatParam& flat() { return flat_; }
  const FlatParam& flat() const { return flat_; }
  FlatParam& frozen() { return frozen_; }
  const FlatParam& frozen() const { return frozen_; }
  bool forwarded() const { return forwarded_; }
  bool in_backward() const { return in_backward_; }
  void clear_forwarded() {
    forwarded_ = false;
    inputs_pending_ = 0;
    inputs_hooked_ = false;
  }

 private:
  // A gather in the making: the FlatParam, what it reads (its shard, or that shard's device or
  // param_dtype copy), the all-gather.
  struct Gather {
    FlatParam* flat = nullptr;
    at::Tensor staged, src;
    WorkPtr work;
  };
  Gather stage_gather(FlatParam& flat);
  void issue_gather(Gather& g);
  void reshard_if_backward_done();
  void reduce_gradients();
  bool reduces_in_place(const at::Tensor& grad) const;
  PendingReduce make_reduction(const at::Tensor& grad, int64_t offset, int64_t owned);
  void reduce_early_piece();
  void release_early();
  void reduce_late();
  void register_grad_hooks();
  void set_context(const char* phase) const;
  // Clears a prefetch's mark, telling the runtime whether the unit used what it gathered.
  void settle_prefetch(bool used);

  Runtime& runtime_;
  std::string name_;
  std::string display_name_;
  const torch::nn::Module* module_;
  bool is_root_;
  FlatParam flat_;
  FlatParam frozen_;
  std::vector<FlatParam*> held_;  // those of flat_ and frozen_ that hold parameters
  UnitState state_ = UnitState::kUnsharded;
  UnitPolicy policy_;
  // The gathers in flight (kGathering), and on a device with streams the event after the gather
  // stream's work; what they read is kept until the compute stream has waited for it.
  std::vector<Gather> gathers_;
  std::unique_ptr<c10::Event> gathered_;
  bool prefetched_ = false;  // gathered by a prefetch and not used since
  // Grad accumulators are held so that hooks registered on them survive between steps (a
  // parameter only keeps a weak reference to its accumulator).
  std::vector<compat::GradAccumulatorPtr> accumulators_;
  std::vector<uintptr_t> hook_keys_;
  std::vector<const torch::autograd::FunctionPreHook*> pre_hooks_;  // per accumulator
  std::unordered_map<const torch::autograd::Node*, GradSink> grad_sinks_;
  int trainable_params_ = 0;
  int64_t late_row_;  // row length of the root's late gradient (reduce_late)
  // Per-backward state.
  bool forwarded_ = false;
  bool in_backward_ = false;
  bool post_backward_done_ = false;
  bool early_reduced_ = false;  // the root's reduction split this backward
  // The split's early part while its pieces are sent: the buffer, its tracked bytes not yet
  // handed to a piece's reduction, and the pieces sent.
  at::Tensor early_grad_;
  int64_t early_held_ = 0;
  int early_sent_ = 0;
  int grads_pending_ = 0;
  // Calls of this forward whose inputs' gradients are still to come, and whether any call's
  // inputs needed a gradient at all.
  int inputs_pending_ = 0;
  bool inputs_hooked_ = false;
};

// A gradient reduction in flight: its handle and the buffers it reads and writes.
// A unit's gradient reduction in flight (Runtime::enqueue_reduce): its reduce-scatter over the
// shard group, then, with replicas, the all-reduce of the reduced chunk across them.
struct PendingReduce {
  Unit* unit = nullptr;
  WorkPtr work;               // the reduce-scatter; none with a shard group of one
  WorkPtr replica_work;       // the all-reduce across replicas, once issued
  at::Tensor source;          // keeps the sent gradient alive until the reduce-scatter completes
  at::Tensor output;          // this rank's reduced chunk, reduce_dtype
  int64_t offset = 0;         // where `output` goes in the unit's gradient shard
  int64_t tracked_bytes = 0;  // gradient-buffer bytes released when it completes
};

class Runtime {
 public:
  Runtime(std::shared_ptr<torch::nn::Module> root, CommPtr comm, ShardingOptions options);
  ~Runtime();

  const ShardingOptions& options() const { return options_; }
  // Where shards, gathered parameters and gradients live.
  c10::Device device() const { return device_; }
  Comm& world() { return *world_; }
  // What a unit divides its gradient by before the reduction (the rest, world size / this, after
  // it): PyTorch's gradient predivide factor for fp16 reductions, the largest power of two f with
  // f * f <= world size (when it divides), so that the sum over ranks stays in fp16's range; 1 for
  // fp32 and bf16, whose range needs no split and whose numerics stay one division after the sum.
  double gradient_predivide_factor() const;
  Comm& shard_group() { return *shard_group_; }
  Comm& replicate_group() { return *replicate_group_; }
  std::vector<std::shared_ptr<Unit>>& units() { return units_; }
  Unit& root_unit() { return *units_.back(); }
  int64_t step() const { return step_; }

  bool sync_gradients() const { return sync_gradients_; }
  // Whether the root's reduction is split ([Note: split root reduction]): the option, where a
  // reduction is a collective, the shards are on the device and there are wrapped units.
  bool splits_root_reduction() const { return split_root_; }
  // The pieces a split root reduction's early part goes in (ShardingOptions::
  // root_reduction_chunks, resolved); 1 without the split.
  int root_reduction_chunks() const { return root_chunks_; }
  void set_sync_gradients(bool sync) { sync_gradients_ = sync; }

  // Root forward starts an iteration; the first backward hook of an iteration queues the final
  // callback.
  void begin_forward();
  void end_forward(bool backward_expected);
  void ensure_final_callback();
  void finish_backward();

  // At most one reduction stays in flight (with a piece of the root's early part beside it):
  // issuing another completes the older first, which bounds unsharded-gradient memory to about
  // two units.
  void enqueue_reduce(PendingReduce pending);
  // A piece of the root's early reduction, issued as a unit's backward begins: it joins those in
  // flight and completes nothing (the unit before's reduce-scatter has had no compute to hide
  // behind yet); the unit's own reduction, issued next, completes both.
  void enqueue_early_piece(PendingReduce pending);
  void drain_reduces();

  BufferPool& pool() { return pool_; }
  const SideStreams& streams() const { return streams_; }

  // CPU offload: copies between host shards and the device are asynchronous. A unit notes each
  // one; sync_offload waits for them (every stream of the device) before the host reads or writes
  // shards again: at the end of a backward that reduced gradients (their copies to the host), at
  // the end of a forward that has no backward, and before anything writes the shards
  // (FullyShardedModel::shards, an optimizer's step through `host_copies()`). A no_sync backward
  // copies nothing to the host: it ends without meeting the GPU, and the next micro-batch's copies
  // queue behind its work.
  void note_offload_copy() { host_copies_->note(world_->timeout()); }
  void sync_offload();
  const std::shared_ptr<HostCopies>& host_copies() const { return host_copies_; }

  // Prefetch: units report where the step is; the first step records the orders, later steps
  // gather ahead along them.
  void forward_reached(Unit& unit);
  void backward_reached(Unit& unit);
  void backward_done(Unit& unit);
  // A prefetched unit was used, or resharded unused: one fewer gathered ahead.
  void prefetch_settled(bool used);

  // Memory accounting.
  void track_gathered(int64_t delta);
  void track_grad_buffers(int64_t delta);
  MemoryStats memory() const;
  void reset_peak_memory();

  std::map<std::string, at::Tensor> gather_full_params();
  std::vector<NamedBuffer> buffers() const;
  // UnitShard::before_step: refuses a step while gradients sit unsynchronised in the units.
  std::function<void()> step_check();
  void check_gradients_reached_shards() const;
  void sync_buffers();

  // [Note: root gathered after its step] The root's UnitShard::stepped: with forward prefetch
  // (and a root that gathers), starts gathering the root for the next forward; empty otherwise.
  // It holds the runtime weakly.
  std::function<void()> root_stepped_callback();
  void gather_root_for_next_forward();
  // Before the shards are handed out to be written (a checkpoint load): that gather is stale.
  void drop_root_gathered_ahead();

 private:
  void make_groups();
  void move_buffers();
  void resolve_root_chunks(const std::vector<UnitSpec>& specs);
  void build_units(std::vector<UnitSpec> specs);
  void start_replica_reduce(PendingReduce& pending);
  void complete_reduce(PendingReduce& pending);
  void land_offloaded_grads();
  void release_copied_grads();
  // `block`: the unit's index among the units other than the root, in forward order (-1: the root).
  UnitPolicy policy_of(const std::string& name, bool is_root, int64_t block) const;
  void check_prefetch_options() const;
  void check_unit_names(const std::vector<UnitSpec>& specs) const;

  // Units in the order a pass first reached them.
  struct Order {
    std::vector<Unit*> units;
    std::unordered_map<const Unit*, size_t> position;
    void record(Unit& unit);
  };
  void prefetch_after(const Order& order, const Unit& unit, bool backward);

  std::shared_ptr<torch::nn::Module> root_;
  CommPtr world_;
  CommPtr shard_group_;
  CommPtr replicate_group_;
  ShardingOptions options_;
  c10::Device device_ = c10::Device(c10::kCPU);
  std::vector<std::shared_ptr<Unit>> units_;  // wrapped units in model order, root last
  std::deque<PendingReduce> pending_;
  // Offload: reduced gradient shards copied to host buffers, added into the units' gradient
  // shards once the copies are done (land_offloaded_grads).
  struct OffloadedGrad {
    Unit* unit;
    int64_t offset;     // in the unit's gradient shard
    at::Tensor host;    // pinned on a GPU; the copy's destination
    at::Tensor device;  // the reduced chunk, kept until the compute stream waited for `copied`
    std::unique_ptr<c10::Event> copied;
  };
  std::vector<OffloadedGrad> offloaded_grads_;
  bool sync_gradients_ = true;
  bool split_root_ = false;
  int root_chunks_ = 1;
  bool callback_queued_ = false;
  int64_t step_ = 0;
  MemoryStats memory_;
  BufferPool pool_;
  SideStreams streams_;
  std::shared_ptr<HostCopies> host_copies_;
  Order forward_order_, backward_order_;
  bool orders_recorded_ = false;
  bool finishing_ = false;  // inside finish_backward
  // The root's gather for the next forward, issued after its shard stepped, and that shard's
  // version then (begin_forward keeps the gather only if nothing has written the shard since).
  bool root_gathered_ahead_ = false;
  int64_t root_gathered_version_ = 0;
  std::shared_ptr<Runtime*> self_;  // what root_stepped_callback holds; null once destroyed
  int ahead_ = 0;                   // units gathered by prefetch and not yet used
  int64_t used_prefetches_ = 0, unused_prefetches_ = 0;
};

// Which modules become units under `policy`: (qualified name, module) pairs, outermost first.
// Throws when a policy that should match something matches nothing.
std::vector<std::pair<std::string, const torch::nn::Module*>> select_units(
    torch::nn::Module& root, const WrapPolicy& policy);

// The units `policy` makes of `root`, root last: each parameter goes to the innermost wrapped
// module holding it (tied across units: the root), and a wrapped module left with no parameters
// is no unit. fully_shard builds these; fsdp::unit_sizes reports them.
std::vector<UnitSpec> unit_specs(torch::nn::Module& root, const WrapPolicy& policy);

}  // namespace fsdp
