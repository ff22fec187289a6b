// The planner (fsdp/plan/plan.h). Model state, gathered units, gradient buffers and
// communication restate the runtime's rules (src/core/unit.cpp, runtime.cpp) as arithmetic over
// the units' sizes; docs/plan.md derives each formula. Activations are counted from the tensors
// the models' forward code keeps for backward.
#include "fsdp/plan/plan.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "factory/model_factory.h"
#include "fsdp/models/fused_loss.h"

namespace fsdp {
namespace {

int shard_count_of(const TrainConfig& c, int world_size, int local_size) {
  const ShardingStrategy s = c.fsdp.sharding_strategy;
  if (s == ShardingStrategy::kNoShard) return 1;
  if (!is_hybrid(s)) return world_size;
  const int group = c.fsdp.shard_group_size > 0 ? c.fsdp.shard_group_size
                                                : (local_size > 0 ? local_size : world_size);
  if (world_size % group != 0) {
    throw std::invalid_argument("shard group size " + std::to_string(group) +
                                " does not divide the world size " + std::to_string(world_size));
  }
  return group;
}

int64_t padded(int64_t numel, int shards) { return (numel + shards - 1) / shards * shards; }

// Padded element counts: the root's, the largest block's, all blocks' together, and how many
// blocks (non-root units) there are.
struct UnitElems {
  int64_t root = 0, block = 0, all_blocks = 0, blocks = 0;
};

UnitElems unit_elems(const Plan& p) {
  UnitElems e;
  e.root = padded(p.units.back().numel, p.shard_count);
  e.blocks = static_cast<int64_t>(p.units.size()) - 1;
  for (int64_t u = 0; u < e.blocks; ++u) {
    const int64_t n = padded(p.units[static_cast<size_t>(u)].numel, p.shard_count);
    e.all_blocks += n;
    e.block = std::max(e.block, n);
  }
  return e;
}

// Bytes a unit's gathered parameters take: its trainable flat parameter in the compute dtype
// unless that is the fp32 shard itself (one shard, fp32, no offload), its frozen one unless it is
// its own shard (one shard, no offload; frozen shards are in the compute dtype already).
int64_t gathered_bytes(const Plan& p, const TrainConfig& c, const UnitSize& u, int64_t elem) {
  const bool own_shard = p.shard_count == 1 && !c.fsdp.offload_params;
  return (own_shard && elem == 4 ? 0 : padded(u.numel, p.shard_count) * elem) +
         (own_shard ? 0 : padded(u.frozen_numel, p.shard_count) * elem);
}

// [Note: plan gathered] in docs/plan.md.
int64_t gathered_peak(const Plan& p, const TrainConfig& c, const UnitElems& e, int64_t elem) {
  const int64_t root = gathered_bytes(p, c, p.units.back(), elem);
  int64_t block = 0, all_blocks = 0;
  for (int64_t u = 0; u < e.blocks; ++u) {
    const int64_t n = gathered_bytes(p, c, p.units[static_cast<size_t>(u)], elem);
    all_blocks += n;
    block = std::max(block, n);
  }
  if (!reshards_after_forward(c.fsdp.sharding_strategy) || e.blocks == 0) {
    return root + all_blocks;
  }
  const int64_t forward = 1 + (c.fsdp.forward_prefetch ? prefetch_ahead(c.fsdp, e.blocks) : 0);
  const int64_t backward = 1 + (c.fsdp.backward_prefetch == BackwardPrefetch::kBackwardPre
                                    ? prefetch_ahead(c.fsdp, e.blocks)
                                    : 0);
  return root + std::max(forward, backward) * block;
}

// A reduction as the runtime holds it: the bytes it tracks once issued (`owned` of them counted
// before, the buffer it took over), those it keeps while its chunk is all-reduced across
// replicas, and whether it has a reduce-scatter to wait for.
struct HeldReduction {
  int64_t issued = 0, owned = 0, kept = 0;
  bool scatters = false;
  bool all_reducing = false;
};

// The unsharded gradient bytes of a step as src/core/unit.cpp and runtime.cpp track them, walked
// event by event: buffers allocated, reductions issued (Runtime::enqueue_reduce and
// enqueue_early_piece, with their stages) and completed. Keeps the largest total.
class GradLedger {
 public:
  GradLedger(bool replicated, int64_t start)
      : replicated_(replicated), live_(start), peak_(start) {}
  int64_t peak() const { return peak_; }
  void add(int64_t bytes) {
    live_ += bytes;
    peak_ = std::max(peak_, live_);
  }
  // A reduction made (Unit::make_reduction) and queued.
  void reduce(HeldReduction r, bool early_piece) {
    add(r.issued - r.owned);
    if (early_piece) {
      if (replicated_ && !r.scatters) start(r);
    } else if (!replicated_) {
      drain();
    } else {
      while (!pending_.empty() && pending_.front().all_reducing) complete_front();
      for (auto& q : pending_) start(q);
      if (!r.scatters) start(r);
    }
    pending_.push_back(r);
  }
  void drain() {
    if (replicated_) {
      for (auto& q : pending_) start(q);
    }
    while (!pending_.empty()) complete_front();
  }

 private:
  void start(HeldReduction& r) {
    if (r.all_reducing) return;
    r.all_reducing = true;
    if (r.scatters) add(r.kept - r.issued);
  }
  void complete_front() {
    const HeldReduction& r = pending_.front();
    add(-(r.all_reducing && r.scatters ? r.kept : r.issued));
    pending_.erase(pending_.begin());
  }

  bool replicated_;
  int64_t live_, peak_;
  std::vector<HeldReduction> pending_;
};

// [Note: plan gradient buffers], split ([Note: split root reduction]): the last micro-batch's
// backward, in the ledger. The root's buffer first; as the first block's backward begins it is
// set aside for its pieces, a fresh one taking the late gradients; a piece goes as each of the
// first blocks' backward begins, each block's reduction as it ends; at the end the root's late
// part as rows (a few rows of untracked scratch) or whole.
int64_t split_grad_buffer_peak(const Plan& p, const TrainConfig& c, int64_t elem, int64_t reduce) {
  const int shards = p.shard_count;
  // Unit::make_reduction of n elements: the `owned` bytes it takes over, a reduce_dtype copy
  // unless it reads them in place, and its output chunk; without a scatter the all-reduce works
  // in what was sent, which it keeps.
  const auto reduction = [&](int64_t n, int64_t owned, bool in_place) {
    HeldReduction r;
    r.scatters = shards > 1;
    const int64_t chunk = r.scatters ? n / shards * reduce : 0;
    r.owned = owned;
    r.issued = owned + (in_place ? 0 : n * reduce) + chunk;
    r.kept = r.scatters ? chunk : r.issued;
    return r;
  };
  const int64_t blocks = static_cast<int64_t>(p.units.size()) - 1;
  const int64_t root = padded(p.units.back().numel, shards);
  std::vector<int64_t> block(static_cast<size_t>(blocks));
  for (size_t u = 0; u < block.size(); ++u) block[u] = padded(p.units[u].numel, shards);
  const bool accumulating = c.train.gradient_accumulation_steps > 1;
  int64_t start = 0;
  if (accumulating) {  // every buffer lives from the first micro-batch on
    start = root * elem;
    for (const int64_t n : block) start += n * elem;
  }
  GradLedger ledger(p.world_size > shards, start);
  if (!accumulating) ledger.add(root * elem);
  const int64_t pieces = root_reduction_pieces(p, c);
  const int64_t shard = root / shards;
  int64_t sent = 0, early_held = root * elem;
  const auto send_piece = [&] {
    const int64_t n = (shard * (sent + 1) / pieces - shard * sent / pieces) * shards;
    const bool in_place = (shards == 1 || pieces == 1) && reduce == elem;
    const int64_t owned = in_place ? n * elem : 0;
    early_held -= owned;
    ledger.reduce(reduction(n, owned, in_place), /*early_piece=*/true);
    if (++sent == pieces) ledger.add(-early_held);
  };
  for (int64_t k = 0; k < blocks; ++k) {
    const int64_t n = block[static_cast<size_t>(blocks - 1 - k)];
    if (k == 0) ledger.add(root * elem);  // the late part's fresh buffer
    if (k < pieces) send_piece();
    if (n == 0) continue;  // a unit that trains nothing has no buffer and reduces nothing
    if (!accumulating) ledger.add(n * elem);
    ledger.reduce(reduction(n, n * elem, reduce == elem), /*early_piece=*/false);
  }
  while (sent < pieces) send_piece();
  if (late_root_part(p, c).as_rows) {
    ledger.add(-root * elem);
  } else {
    ledger.reduce(reduction(root, root * elem, reduce == elem), /*early_piece=*/false);
  }
  ledger.drain();
  return ledger.peak();
}

// [Note: plan gradient buffers] in docs/plan.md.
int64_t grad_buffer_peak(const Plan& p, const TrainConfig& c, const UnitElems& e, int64_t elem,
                         int64_t reduce) {
  if (splits_root_reduction(p, c)) return split_grad_buffer_peak(p, c, elem, reduce);
  // The root's buffer lives through the whole backward (it begins first and finishes last); each
  // block's from its backward's start to its reduction's end, which the next block's reduction
  // (or, across replicas, the one after: [Note: reduction stages] in runtime.cpp) completes. A
  // block that trains nothing has no buffer and issues no reduction. Under gradient accumulation
  // every unit's buffer lives from the first micro-batch on. Walked block by block in backward
  // order, as the runtime issues and completes the reductions (GradLedger).
  const int shards = p.shard_count;
  const auto reduction = [&](int64_t n) {
    HeldReduction r;
    r.scatters = shards > 1;
    const int64_t chunk = r.scatters ? n / shards * reduce : 0;
    r.owned = n * elem;
    r.issued = r.owned + (reduce != elem ? n * reduce : 0) + chunk;
    r.kept = r.scatters ? chunk : r.issued;
    return r;
  };
  const bool accumulating = c.train.gradient_accumulation_steps > 1;
  GradLedger ledger(p.world_size > shards,
                    accumulating ? (e.root + e.all_blocks) * elem : e.root * elem);
  for (size_t k = p.units.size() - 1; k-- > 0;) {
    const int64_t n = padded(p.units[k].numel, shards);
    if (n == 0) continue;
    if (!accumulating) ledger.add(n * elem);
    ledger.reduce(reduction(n), /*early_piece=*/false);
  }
  if (e.root > 0) ledger.reduce(reduction(e.root), /*early_piece=*/false);
  ledger.drain();
  return ledger.peak();
}

// Elements one transformer block keeps for backward outside the attention kernel.
int64_t block_activation_elems(const ModelConfig& m, int64_t b, int64_t s) {
  const int64_t h = m.width(), a = m.n_head;
  if (m.type == ModelType::kGPT2) {
    // x, ln_1, qkv (3), attention output, residual, ln_2, fc (4), gelu (4).
    return b * s * 16 * h;
  }
  // x, norm, q, k and v, rotated q and k, attention output, residual, norm, gate, up, silu(gate)
  // and their product; the fused activation (model.fused_ops) keeps no silu(gate).
  const int64_t head = m.head_dim > 0 ? m.head_dim : h / a;
  const int64_t q = a * head, kv = m.kv_heads() * head;
  const int64_t feed_forward = (m.fused_ops ? 3 : 4) * m.intermediate_size;
  return b * s * (4 * h + 3 * q + 3 * kv + feed_forward);
}

// Bytes the attention kernel of one block keeps for backward: the explicit path its softmax
// [b, a, s, s]; the fused one (at::scaled_dot_product_attention, `auto` on LibTorch 2.x) only its
// fp32 log-sum-exp [b, a, s]. `auto` is what this LibTorch would run.
int64_t attention_saved_bytes(const ModelConfig& m, int64_t b, int64_t s, int64_t elem) {
  const int64_t a = m.n_head;
  if (runs_fused(m.attention)) return b * a * s * 4;
  // Llama's explicit path takes the softmax in fp32 and casts it back (HF's eager path): below
  // fp32 both copies are kept, the softmax's output for its backward and the cast for the matmul.
  const int64_t per_score = m.type == ModelType::kLlama && elem != 4 ? 4 + elem : elem;
  return b * a * s * s * per_score;
}

// [Note: plan logits] in docs/plan.md: what the head and the loss hold at the step's peak beyond
// the final norm's input and output.
int64_t logits_estimate(const TrainConfig& c, int64_t elem) {
  const ModelConfig& m = c.model;
  const int64_t n = c.train.micro_batch_size * c.data.seq_len, h = m.width();
  const int64_t V = m.vocab_size;
  if (!c.train.fused_loss) {
    // The logits and their gradient; then the gradient and the head weight's, made from it.
    return std::max(2 * n * V * elem, n * V * elem + V * h * elem);
  }
  // A chunk's fp32 logits (below fp32 also the matmul's output, or later the rounded gradient),
  // the weight's gradient and the hidden states'.
  const int64_t rows = linear_cross_entropy_chunk_rows(V, n, c.train.device == TrainDevice::kCuda);
  return rows * V * (4 + (elem != 4 ? elem : 0)) + V * h * elem + n * h * elem;
}

// Every how many blocks one recomputes (validation refuses below 1; the plan of an unvalidated
// config reads it as 1).
int64_t checkpoint_interval(const TrainConfig& c) {
  return std::max(1, c.fsdp.activation_checkpointing_every);
}

}  // namespace

int64_t checkpointed_blocks(const TrainConfig& c) {
  if (!c.fsdp.activation_checkpointing) return 0;
  return (c.model.n_layer + checkpoint_interval(c) - 1) / checkpoint_interval(c);
}

namespace {

// [Note: plan activations] in docs/plan.md.
int64_t activation_estimate(const TrainConfig& c, int64_t elem) {
  const ModelConfig& m = c.model;
  const int64_t b = c.train.micro_batch_size, s = c.data.seq_len, h = m.width();
  const int64_t block =
      block_activation_elems(m, b, s) * elem + attention_saved_bytes(m, b, s, elem);
  // Final norm's input and output, and the logits' share.
  const int64_t head = 2 * b * s * h * elem + logits_estimate(c, elem);
  const int64_t recomputed = checkpointed_blocks(c);
  if (recomputed > 0) {
    // A checkpointed block keeps its input, the others all they keep. One block's activations
    // exist again while it recomputes, on top of all the others' only when the last block is one
    // that recomputes: backward has freed the later blocks' by the time an earlier one does.
    const bool last_recomputes = (m.n_layer - 1) % checkpoint_interval(c) == 0;
    return recomputed * b * s * h * elem + (m.n_layer - recomputed) * block +
           (last_recomputes ? block : 0) + head;
  }
  return m.n_layer * block + head;
}

// [Note: plan embedding gradients] in docs/plan.md.
int64_t embedding_grad_estimate(const TrainConfig& c, int64_t elem) {
  const ModelConfig& m = c.model;
  const bool tied = m.type == ModelType::kGPT2 || m.tie_embeddings;
  return (tied ? 3 : 2) * m.vocab_size * m.width() * elem;
}

CommPlan comm_plan(const Plan& p, const TrainConfig& c, int64_t elem, int64_t reduce) {
  CommPlan comm;
  const int64_t micro = c.train.gradient_accumulation_steps;
  const bool reshard = reshards_after_forward(c.fsdp.sharding_strategy);
  const int replicas = p.world_size / p.shard_count;
  for (size_t u = 0; u < p.units.size(); ++u) {
    const int64_t n = padded(p.units[u].numel, p.shard_count);
    const int64_t gathered = n + padded(p.units[u].frozen_numel, p.shard_count);
    const bool is_root = u + 1 == p.units.size();
    if (p.shard_count > 1) {
      // Forward gathers every unit; backward again those resharded after forward (not the root;
      // a frozen unit too, which backward reaches when its inputs need a gradient). Only what
      // trains is reduced.
      comm.all_gather += micro * gathered * elem * (reshard && !is_root ? 2 : 1);
      comm.reduce_scatter += n * reduce;
    }
    if (replicas > 1) comm.all_reduce += n / p.shard_count * reduce;
  }
  if (splits_root_reduction(p, c)) {
    // Every rank's row count; then at most the rows with their indices, or the root again.
    const LateRootPart late = late_root_part(p, c);
    comm.all_gather +=
        p.world_size * 8 + (late.as_rows ? p.world_size * late.rows * late.row_bytes : 0);
    if (!late.as_rows) {
      const int64_t root = padded(p.units.back().numel, p.shard_count);
      if (p.shard_count > 1) comm.reduce_scatter += root * reduce;
      if (replicas > 1) comm.all_reduce += root / p.shard_count * reduce;
    }
  }
  return comm;
}

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%10.1f", bytes / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

bool splits_root_reduction(const Plan& p, const TrainConfig& c) {
  return c.fsdp.split_root_reduction && !c.fsdp.offload_params && p.units.size() > 1 &&
         p.world_size > 1 && p.units.back().numel > 0;
}

int root_reduction_pieces(const Plan& p, const TrainConfig& c) {
  if (!splits_root_reduction(p, c)) return 1;
  int64_t largest = 0;
  for (size_t u = 0; u + 1 < p.units.size(); ++u) largest = std::max(largest, p.units[u].numel);
  return root_reduction_chunks(c.fsdp.root_reduction_chunks, p.units.back().numel, largest,
                               static_cast<int64_t>(p.units.size()) - 1,
                               padded(p.units.back().numel, p.shard_count) / p.shard_count);
}

LateRootPart late_root_part(const Plan& p, const TrainConfig& c) {
  LateRootPart late;
  const int64_t elem = dtype_size(c.mixed_precision);
  const int64_t tokens = c.train.micro_batch_size * c.data.seq_len;
  late.rows = std::min<int64_t>(c.model.vocab_size, tokens) +
              (c.model.type == ModelType::kGPT2 ? c.data.seq_len : 0);
  late.row_bytes = c.model.width() * elem + 8;
  const int64_t root_bytes = padded(p.units.back().numel, p.shard_count) * elem;
  late.as_rows = 2 * p.world_size * late.rows * late.row_bytes <= root_bytes;
  return late;
}

int64_t prefetch_ahead(const FsdpConfig& f, int64_t blocks) {
  int64_t n = f.prefetch_depth;
  if (f.limit_all_gathers > 0) n = std::min<int64_t>(n, f.limit_all_gathers);
  return std::max<int64_t>(0, std::min(n, blocks - 1));
}

std::vector<UnitSize> plan_units(const TrainConfig& config) {
  CausalLM lm = build_model(config);  // deferred: shapes only
  return unit_sizes(*lm.module, config.sharding_options().wrap_);
}

Plan plan_training(const TrainConfig& config, int world_size, int local_size) {
  return plan_training(config, world_size, local_size, plan_units(config));
}

Plan plan_training(const TrainConfig& config, int world_size, int local_size,
                   std::vector<UnitSize> units) {
  if (world_size < 1) throw std::invalid_argument("world size must be at least 1");
  Plan p;
  p.strategy = config.fsdp.sharding_strategy;
  p.world_size = world_size;
  p.shard_count = shard_count_of(config, world_size, local_size);
  p.units = std::move(units);
  p.micro_batches = config.train.gradient_accumulation_steps;
  const int64_t elem = dtype_size(config.mixed_precision);
  const int64_t reduce = elem;  // the trainer reduces in mixed_precision too
  int64_t shard_elems = 0, frozen_elems = 0;
  for (const auto& u : p.units) {
    p.parameters += u.total();
    p.trainable += u.numel;
    shard_elems += padded(u.numel, p.shard_count) / p.shard_count;
    frozen_elems += padded(u.frozen_numel, p.shard_count) / p.shard_count;
  }
  p.memory.params = 4 * shard_elems;
  p.memory.frozen = elem * frozen_elems;
  p.memory.grads = 4 * shard_elems;
  p.memory.optimizer = 8 * shard_elems;
  p.memory.offloaded = config.fsdp.offload_params;
  const UnitElems sizes = unit_elems(p);
  p.memory.gathered = gathered_peak(p, config, sizes, elem);
  p.memory.grad_buffers = grad_buffer_peak(p, config, sizes, elem, reduce);
  p.memory.activations = activation_estimate(config, elem);
  p.memory.logits = logits_estimate(config, elem);
  p.memory.fused_loss = config.train.fused_loss;
  p.memory.embedding_grads = embedding_grad_estimate(config, elem);
  p.comm = comm_plan(p, config, elem, reduce);
  return p;
}

std::string format_plan(const Plan& p) {
  std::string out;
  auto line = [&](const std::string& what, int64_t bytes) {
    out += "  " + what + std::string(26 - std::min<size_t>(26, what.size()), ' ') + mib(bytes) +
           " MiB\n";
  };
  out += std::string(to_string(p.strategy)) + ", world size " + std::to_string(p.world_size) +
         ", sharded over " + std::to_string(p.shard_count) + ", " + std::to_string(p.parameters) +
         " parameters" +
         (p.trainable != p.parameters ? " (" + std::to_string(p.trainable) + " train)" : "") +
         " in " + std::to_string(p.units.size()) + " units\n";
  out += "memory per rank:\n";
  line("parameters (fp32 shard)", p.memory.params);
  if (p.memory.frozen > 0) line("frozen (compute dtype)", p.memory.frozen);
  line("gradients (fp32 shard)", p.memory.grads);
  line("optimizer (AdamW m, v)", p.memory.optimizer);
  line("model state", p.memory.model_state());
  line("gathered units (peak)", p.memory.gathered);
  line("gradient buffers (peak)", p.memory.grad_buffers);
  line("activations (estimate)", p.memory.activations);
  line(p.memory.fused_loss ? "  of which logits (fused)" : "  of which logits (whole)",
       p.memory.logits);
  line("embedding grads (estimate)", p.memory.embedding_grads);
  line("total", p.memory.total());
  if (p.memory.offloaded) {
    line("  in host memory (offload)", p.memory.host());
    line("  on the device", p.memory.on_device());
  }
  out += "communication per rank per optimizer step (" + std::to_string(p.micro_batches) +
         " micro-batch" + (p.micro_batches == 1 ? "" : "es") + "):\n";
  line("all-gather", p.comm.all_gather);
  line("reduce-scatter", p.comm.reduce_scatter);
  line("all-reduce", p.comm.all_reduce);
  line("total", p.comm.total());
  return out;
}

}  // namespace fsdp
