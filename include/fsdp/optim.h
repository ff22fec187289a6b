// Optimizers that step over parameter shards: AdamW and SGD with a weight-decay mask, global-norm
// gradient clipping across a group of ranks, and the warmup-cosine learning-rate schedule.
//
// The sharding runtime hands an optimizer, per FSDP unit, this rank's flat fp32 parameter shard,
// its fp32 gradient shard (same size) and a 0/1 mask selecting the elements that get weight decay
// (see FullyShardedModel::shards). The optimizer updates the shards in place and keeps its state
// (Adam's m and v, SGD's momentum) at the shard's size, so optimizer memory is 1/N of the model's.
//
// Numerics: each optimizer applies torch::optim's (LibTorch 1.13) operations in the same order
// with the same scalar arguments, so that a shard made of flattened parameters steps like those
// parameters in torch's optimizer, with decay-mask 1 elements in a group with the weight decay and
// mask 0 elements in a group without it (tests/test_optim.cpp states the tolerance). AdamW's
// fused kernel (the default for CPU shards, AdamWImpl) does the same arithmetic per element in one
// pass over the shard: with Debian's LibTorch 1.13 bit for bit torch's result, elsewhere at most a
// few roundings apart.
//
// Thread-safety: none; one training thread steps an optimizer.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "fsdp/comm.h"
#include "fsdp/fully_shard.h"

namespace fsdp {

// One unit's shard as an optimizer sees it. `param` and `grad` are contiguous fp32 tensors of the
// same number of elements; `decay_mask` is fp32 with values 0 or 1 and that many elements, or
// undefined: weight decay everywhere. The optimizer keeps the tensors (handles, not copies).
struct ShardedParam {
  at::Tensor param;
  at::Tensor grad;
  at::Tensor decay_mask;
  // Called before each step writes `param` (UnitShard::wait_writable); may be empty.
  std::function<void()> wait_writable = nullptr;
  // Called after a step has written `param` (UnitShard::stepped); may be empty.
  std::function<void()> stepped = nullptr;
  // Called before a step writes any shard, the first shard's only (UnitShard::before_step); may
  // be empty.
  std::function<void()> before_step = nullptr;
};

// A sharded model's shards, ready for an optimizer: one ShardedParam per unit, with the decay
// mask `rule` gives (default: matrices and embeddings decay, biases and norm weights do not).
inline std::vector<ShardedParam> sharded_params(const FullyShardedModel& model,
                                                const DecayRule& rule = default_decay_rule) {
  std::vector<ShardedParam> out;
  for (const auto& s : model.shards(rule)) {
    out.push_back({s.param, s.grad, s.decay_mask, s.wait_writable, s.stepped, s.before_step});
  }
  return out;
}

namespace detail {
// Where a shard's decay mask is 1, computed once: contiguous [begin, end) runs when there are few
// (the usual case: each original parameter is contiguous in the flat shard), else a bool mask.
struct DecayRegions {
  std::vector<std::pair<int64_t, int64_t>> runs;
  at::Tensor dense;  // defined (bool) only when the mask is too fragmented for runs
};
}  // namespace detail

// Base of the shard optimizers: the shards, the learning rate, the step count.
class ShardedOptimizer {
 public:
  virtual ~ShardedOptimizer() = default;
  ShardedOptimizer(const ShardedOptimizer&) = delete;
  ShardedOptimizer& operator=(const ShardedOptimizer&) = delete;

  // One update of every shard from its gradient shard; increments step_count().
  virtual void step() = 0;
  // Bytes of optimizer state (excluding the parameter and gradient shards).
  virtual int64_t state_bytes() const = 0;
  // The optimizer's name as checkpoints record it ("adamw", "sgd").
  virtual const char* kind() const = 0;
  // Shard i's state tensors by name, each with the shard's element count, fp32 (e.g. AdamW's
  // "exp_avg" and "exp_avg_sq"). The tensors alias the optimizer's state: a checkpoint loader
  // copies into them. The names are the same for every shard.
  virtual std::vector<std::pair<std::string, at::Tensor>> state(size_t i) const = 0;

  // Zeroes every gradient shard in place (the runtime's gradient storage is never reallocated).
  void zero_grad();

  double lr() const { return lr_; }
  void set_lr(double lr);
  // Steps taken so far; settable for checkpoint restore.
  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t steps);
  // The shards it steps; their decay masks are dropped once turned into decay regions.
  const std::vector<ShardedParam>& params() const { return params_; }

 protected:
  // Throws std::invalid_argument naming the shard index and sizes for mismatched or non-fp32
  // shards, and for masks with values other than 0 and 1.
  ShardedOptimizer(std::vector<ShardedParam> params, double lr, const char* name);

  // Runs `fn(region, begin, length)`, which updates `region` in place, on the elements of `t` (a
  // tensor with shard i's element count) whose decay mask is 1: once per run of the mask with the
  // 1-D view t[begin, begin + length); for a fragmented mask once on a copy of all of `t`, whose
  // masked elements are then copied back. Either way each element sees the same arithmetic.
  using RegionFn = std::function<void(at::Tensor& region, int64_t begin, int64_t length)>;
  void on_decayed(size_t i, const at::Tensor& t, const RegionFn& fn) const;
  // Each shard's wait_writable: a step calls it before it writes the shards.
  void wait_writable() const;
  // Runs `step_shard(i)` on every shard, last to first (the root's first: a sharded model's root
  // comes last), calling the shard's `stepped` after each (UnitShard::stepped).
  void step_each(const std::function<void(size_t)>& step_shard);

  std::vector<ShardedParam> params_;
  std::vector<detail::DecayRegions> decay_;
  double lr_;
  int64_t step_count_ = 0;
};

// How AdamW steps a shard. Both paths compute torch's operations in torch's order per element;
// they differ in how often the shard crosses memory.
enum class AdamWImpl {
  // kFused for every CPU shard (contiguous fp32), kReference for the others. On a GPU the default
  // stays torch::optim::AdamW's arithmetic, as torch.optim.AdamW's does (fused=True is asked for
  // there too): ATen's fused kernel computes 1 - beta in fp32, a relative 1.3e-5 on v's new term at
  // beta2 0.999, so it trains another trajectory than torch::optim::AdamW's by that much, and the
  // parity tests hold the default to the latter.
  kAuto,
  // One pass per shard: decay, m and v, bias correction and the update together. On the CPU
  // fsdp's vectorised, multi-threaded kernel (at::parallel_for over chunks); on a CUDA GPU
  // ATen's multi-tensor kernel (torch.optim.AdamW(fused=True)'s, LibTorch 2.0 and later), over
  // the shard's decayed runs and then the rest: one pass over p, g, m and v instead of about ten
  // (a 1B Llama's optimizer phase on an H200: 10.6 ms against 27.8). Equal to kReference within
  // a few fp32 roundings per step on the CPU; on the GPU within those and the kernel's fp32
  // 1 - beta (tests/test_optim.cpp derives both bounds). The constructor throws
  // std::invalid_argument, naming the shard, for a shard it cannot take: never a silent fallback.
  kFused,
  // torch::optim::AdamW's tensor operations one by one, in chunks (cache-sized on the CPU): bit
  // for bit torch's result; the oracle the fused kernel is tested against.
  kReference,
};

struct AdamWOptions {
  double lr = 1e-3;            // learning rate
  double beta1 = 0.9;          // decay of the first moment (mean of gradients)
  double beta2 = 0.999;        // decay of the second moment (mean of squared gradients)
  double eps = 1e-8;           // added to the denominator, after bias correction
  double weight_decay = 1e-2;  // decoupled decay: p *= 1 - lr * weight_decay, where mask is 1
  AdamWImpl impl = AdamWImpl::kAuto;  // fused on the CPU, else op by op (above)
};

// torch.optim.AdamW (no amsgrad). State m and v is allocated at construction, at shard size.
// The path for each shard (AdamWOptions::impl) is chosen at construction.
class AdamW : public ShardedOptimizer {
 public:
  // Throws std::invalid_argument for bad shards (see ShardedOptimizer) or options out of range.
  AdamW(std::vector<ShardedParam> params, AdamWOptions options = {});

  void step() override;
  int64_t state_bytes() const override;
  const char* kind() const override { return "adamw"; }
  std::vector<std::pair<std::string, at::Tensor>> state(size_t i) const override;

  const AdamWOptions& options() const { return options_; }
  // Shard i's first and second moments; a checkpoint loader may copy_ into them.
  const at::Tensor& exp_avg(size_t i) const { return exp_avg_.at(i); }
  const at::Tensor& exp_avg_sq(size_t i) const { return exp_avg_sq_.at(i); }
  // Whether shard i steps through the fused kernel (see AdamWImpl).
  bool fused(size_t i) const { return fused_.at(i); }

 private:
  void step_reference(size_t i, double bias_correction1, double bias_correction2);
  void step_fused(size_t i, double bias_correction1, double bias_correction2);
  void step_fused_device(size_t i);

  AdamWOptions options_;
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_;
  std::vector<bool> fused_;
  // For shards stepped by ATen's kernel: the step count as the kernel reads it, an fp32 scalar on
  // the shard's device (undefined for the others).
  std::vector<at::Tensor> device_step_;
};

struct SGDOptions {
  double lr = 1e-2;         // learning rate (torch::optim::SGDOptions has no default)
  double momentum = 0;      // 0: plain SGD, no state
  double dampening = 0;     // momentum buffer takes (1 - dampening) of each new gradient
  double weight_decay = 0;  // coupled L2: g += weight_decay * p, where mask is 1
  bool nesterov = false;    // needs momentum > 0 and dampening 0
};

// torch.optim.SGD. With momentum, the buffer (allocated at construction) starts as the first
// step's gradient, as torch's does.
class SGD : public ShardedOptimizer {
 public:
  SGD(std::vector<ShardedParam> params, SGDOptions options = {});

  void step() override;
  int64_t state_bytes() const override;
  const char* kind() const override { return "sgd"; }
  // "momentum_buffer" when momentum is nonzero, else nothing.
  std::vector<std::pair<std::string, at::Tensor>> state(size_t i) const override;

  const SGDOptions& options() const { return options_; }
  // Shard i's momentum buffer; undefined when momentum is 0.
  const at::Tensor& momentum_buffer(size_t i) const { return momentum_buffer_.at(i); }

 private:
  void step_shard(size_t i);

  SGDOptions options_;
  std::vector<at::Tensor> momentum_buffer_;
};

// Global-norm clipping, torch::nn::utils::clip_grad_norm_ over shards. The norm is
// sqrt(sum over the ranks of `shard_group` of each rank's sum of squared gradient elements);
// `shard_group` is the group across which the shards are disjoint (FullyShardedModel::shard_group;
// a size-1 group when they are replicated). It is a collective: every rank of the group calls it.
// When max_norm / (norm + 1e-6) < 1, every gradient shard is scaled in place by that factor.
// Returns the norm. A non-finite norm leaves the gradients unchanged (torch would scale them by 0
// or NaN) and is returned, so the caller can skip the step.
double clip_grad_norm(const std::vector<ShardedParam>& params, double max_norm, Comm& shard_group);

// Learning rate at `step` (0-based) of linear warmup then cosine decay:
//   step < warmup:           max_lr * (step + 1) / warmup      (max_lr / warmup at step 0)
//   warmup <= step < total:  min_lr + (max_lr - min_lr) * (1 + cos(pi * r)) / 2,
//                            r = (step - warmup) / (total - warmup)   (max_lr at step == warmup)
//   step >= total:           min_lr
// Throws std::invalid_argument unless 0 <= warmup <= total and step >= 0.
double warmup_cosine_lr(int64_t step, int64_t warmup, int64_t total, double max_lr, double min_lr);

}  // namespace fsdp
