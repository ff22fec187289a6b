// The planner behind fsdp-plan: from a training config and the job's shape, per-rank memory split
// into model state (fp32 parameter, gradient and AdamW shards of what trains, compute-dtype shards
// of what is frozen), gathered units, gradient buffers
// and activations, and the bytes each step's collectives move. Model state, gathered units,
// gradient buffers and communication follow the runtime's rules exactly (the tests compare them
// with its accounting); activations are an estimate from the model's shapes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/config/config.h"
#include "fsdp/units.h"

namespace fsdp {

struct MemoryPlan {
  int64_t params = 0;     // fp32 master shards of the parameters that train
  int64_t frozen = 0;     // shards of frozen parameters, in the compute dtype (mixed_precision)
  int64_t grads = 0;      // fp32 gradient shards
  int64_t optimizer = 0;  // AdamW's m and v, fp32, shard-sized
  // Peaks of the runtime's accounting (MemoryStats): gathered parameters, and unsharded gradient
  // buffers with their reduction scratch.
  int64_t gathered = 0;
  int64_t grad_buffers = 0;
  int64_t activations = 0;  // estimate: what autograd keeps for backward at its peak
  // Of the activations, the head's and the loss's share (logits_estimate): the logits whole and
  // their gradient, or with train.fused_loss a chunk of them and the head weight's gradient.
  int64_t logits = 0;
  bool fused_loss = false;
  // Estimate: the embedding's V x h gradients autograd holds at the end of backward, when the
  // activations are gone. Larger than the activations for small models with a large vocabulary.
  int64_t embedding_grads = 0;
  // CPU offload (fsdp_offload_params): the model state is in host memory, the rest on the device
  // (plus a unit's fp32 shard staged there during its all-gather, not counted).
  bool offloaded = false;
  int64_t model_state() const { return params + frozen + grads + optimizer; }
  int64_t total() const {
    return model_state() + gathered + grad_buffers + std::max(activations, embedding_grads);
  }
  int64_t host() const { return offloaded ? model_state() : 0; }
  int64_t on_device() const { return total() - host(); }
};

// Bytes per optimizer step on each rank, counted as the collectives' full buffers (an all-gather's
// output, a reduce-scatter's input, an all-reduce's buffer), as MPI and Gloo are called.
struct CommPlan {
  int64_t all_gather = 0;
  int64_t reduce_scatter = 0;
  int64_t all_reduce = 0;  // across replicas (NO_SHARD, HYBRID): the gradient shards
  int64_t total() const { return all_gather + reduce_scatter + all_reduce; }
};

struct Plan {
  ShardingStrategy strategy = ShardingStrategy::kFullShard;
  int world_size = 1;
  int shard_count = 1;          // ranks a unit is sharded over
  int64_t parameters = 0;       // all of them, frozen ones included
  int64_t trainable = 0;        // those that train
  int64_t micro_batches = 1;    // forward/backward passes per optimizer step
  std::vector<UnitSize> units;  // root last
  MemoryPlan memory;
  CommPlan comm;
};

// `config` as fsdp-train would run it on `world_size` ranks, `local_size` of them per node (the
// HYBRID strategies' default shard group; 0: all on one node). Builds the model deferred (no
// parameter values), so planning a model too large for this machine is cheap. Throws
// std::invalid_argument for a world size the strategy cannot use.
Plan plan_training(const TrainConfig& config, int world_size, int local_size = 0);
// The same from the units plan_units(config) found: planning several strategies of one model
// builds it once.
std::vector<UnitSize> plan_units(const TrainConfig& config);
Plan plan_training(const TrainConfig& config, int world_size, int local_size,
                   std::vector<UnitSize> units);

// The transformer blocks that recompute their forward in backward: none without activation
// checkpointing, else every activation_checkpointing_every-th of model.n_layer (the 1st, the
// (N+1)-th, ...), as the runtime picks its units.
int64_t checkpointed_blocks(const TrainConfig& config);

// Units a prefetch gathers ahead of the one in use: `prefetch_depth`, capped by
// `limit_all_gathers` and by the blocks (non-root units) there are.
int64_t prefetch_ahead(const FsdpConfig& fsdp, int64_t blocks);

// Whether the runtime splits the root's reduction in this plan: the option, with wrapped units,
// more than one rank and no offload (docs/design.md, [Note: split root reduction]).
bool splits_root_reduction(const Plan& plan, const TrainConfig& config);
// The pieces the split's early part goes in (ShardingOptions::root_reduction_chunks, resolved as
// the runtime does); 1 without the split.
int root_reduction_pieces(const Plan& plan, const TrainConfig& config);
// The split's late part as the plan bounds it: at most `rows` rows of the model's width from each
// rank (a token table's row per token of a micro-batch, and GPT-2's position rows), sent with an
// int64 index each when all ranks' rows are at most half the root's bytes, else the root reduced
// a second time (core/unit.cpp, Unit::reduce_late, decides on the rows it finds).
struct LateRootPart {
  int64_t rows = 0;
  bool as_rows = false;
  int64_t row_bytes = 0;  // a row's values and its index
};
LateRootPart late_root_part(const Plan& plan, const TrainConfig& config);

// A human-readable breakdown (MiB) of one plan.
std::string format_plan(const Plan& plan);

}  // namespace fsdp
