// FlatParam: one unit's parameters as a single flat buffer, sharded across the shard group.
//
// Layout: the unit's parameters concatenated in registration order, padded with zeros to a
// multiple of the shard count; rank r of the shard group owns elements [r*S, (r+1)*S) as an fp32
// master shard. While gathered, `full` (param_dtype) holds all padded elements and every original
// parameter's data is a view into it, set once at construction. Freeing releases the bytes of
// full's storage but keeps the storage object, so views (and tensors autograd saved) see the data
// again after the next gather: see docs/design.md, [Note: storage resize].
// With one shard in fp32, `full` *is* the master shard and nothing is ever freed or copied.
// A frozen FlatParam (parameters that do not train: requires_grad false) keeps its shard in
// param_dtype itself, with no fp32 master, no gradient shard and no gradient buffer: it is gathered
// for forward and backward and never reduced or stepped; with one shard (and no offload) `full` is
// that shard. A unit holds one FlatParam of each kind (docs/design.md, [Note: frozen parameters]).
// `full` lives on the device (ShardingOptions::device); the shard and gradient shard there too,
// or in host memory under CPU offload (pinned when the device is a GPU, so that copies to and from
// it can be asynchronous). The parameters' values are copied from wherever they were.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

#include "core/buffer_pool.h"
#include "core/param_guard.h"
#include "fsdp/options.h"

namespace fsdp {

struct ParamSlot {
  std::string name;
  at::Tensor param;  // the module's parameter (same TensorImpl the model uses)
  std::vector<int64_t> shape;
  int64_t offset = 0;  // into the unpadded flat buffer
  int64_t numel = 0;
  std::vector<std::string> aliases;  // other names of the same tensor (tied parameters)
};

class FlatParam {
 public:
  // Takes this rank's slice of the parameters' current values into the fp32 shard, then points
  // every parameter at the (allocated) full buffer.
  // A deferred parameter (fsdp/init.h) has no current values: `init` computes them, one full
  // parameter at a time.
  // `trainable` false: a frozen FlatParam (above).
  FlatParam(std::vector<ParamSlot> slots, int shard_rank, int shard_count,
            at::ScalarType param_dtype, const ParamInit& init = {},
            c10::Device device = c10::Device(c10::kCPU), bool offload = false,
            bool trainable = true);

  const std::vector<ParamSlot>& slots() const { return slots_; }
  bool empty() const { return slots_.empty(); }
  // Whether the parameters train: an fp32 master shard and a gradient shard (else undefined).
  bool trainable() const { return trainable_; }
  // The shard's dtype: fp32 when trainable, param_dtype when frozen.
  at::ScalarType shard_dtype() const { return trainable_ ? at::kFloat : param_dtype_; }
  int64_t numel() const { return numel_; }
  int64_t padded_numel() const { return shard_numel_ * shard_count_; }
  int64_t shard_numel() const { return shard_numel_; }
  int shard_rank() const { return shard_rank_; }
  int shard_count() const { return shard_count_; }
  at::ScalarType param_dtype() const { return param_dtype_; }
  // Where `full` (gathered parameters, unsharded gradients) lives.
  c10::Device device() const { return device_; }
  // True when the shard and the gradient shard live in host memory (CPU offload).
  bool offloaded() const { return offload_; }

  at::Tensor& shard() { return shard_; }
  at::Tensor& grad_shard() { return grad_shard_; }
  const at::Tensor& shard() const { return shard_; }
  const at::Tensor& grad_shard() const { return grad_shard_; }
  // The gathered buffer; its bytes exist only while full_allocated().
  at::Tensor& full() { return full_; }

  // True when `full` is the master shard itself (one shard, fp32): gathering is a no-op.
  bool aliased() const { return aliased_; }
  bool full_allocated() const;
  int64_t full_bytes() const;
  // Give `full` its bytes back from `pool` (contents undefined) / return them to the pool.
  void alloc_full(BufferPool& pool);
  void free_full();
  // From here on, while `full` has no bytes, every op on a parameter fails naming it and `unit`
  // (core/param_guard.h) instead of reading the released storage. Nothing for an aliased
  // FlatParam, whose `full` is never released.
  void guard_params(const std::string& unit);

  // The unsharded gradient buffer (param_dtype, padded). Allocating (from `pool`) makes each
  // trainable parameter's .grad a view into it, its bytes not yet written: each gradient goes in
  // through accumulate_grad, which copies a parameter's first one and adds the later ones, and
  // full_grad() zeroes what none wrote (padding, frozen and unused parameters) before anyone
  // reads it. Autograd's own accumulation into a zeroed buffer wrote it once more and read it
  // once more (a GPT-2 124M block's 7.1 M fp32 gradients on one Zen 5 core: 4.6 ms for the fill
  // and the add, 2.7 for the copy).
  bool has_full_grad() const { return full_grad_.defined(); }
  at::Tensor& full_grad();
  void alloc_full_grad(BufferPool& pool);
  // Adds `grad` into slot i's part of the buffer; false, doing nothing, when there is no buffer
  // or `grad` has another shape than the parameter.
  bool accumulate_grad(size_t slot, const at::Tensor& grad);
  // Zeroes what no accumulate_grad wrote; once per buffer (full_grad() calls it).
  void complete_full_grad();
  // Drops the parameters' .grad views and the buffer.
  void free_full_grad();
  int64_t full_grad_bytes() const;

  // 0/1 fp32 mask over this rank's shard: 1 on elements of parameters the rule selects.
  at::Tensor shard_mask(
      const std::function<bool(const std::string&, const at::Tensor&)>& rule) const;

  // [begin, end) of a slot's elements that fall in this rank's shard, in shard coordinates and
  // in the slot's own coordinates; empty when they do not overlap.
  struct Overlap {
    int64_t shard_begin = 0, param_begin = 0, count = 0;
  };
  Overlap overlap(const ParamSlot& slot) const;

 private:
  void init_shard(const ParamInit& init);
  at::Tensor materialise(const ParamSlot& s, const ParamInit& init) const;
  void point_params_at_full();

  std::vector<ParamSlot> slots_;
  int shard_rank_;
  int shard_count_;
  at::ScalarType param_dtype_;
  c10::Device device_;
  bool offload_;
  bool trainable_;
  int64_t numel_ = 0;
  int64_t shard_numel_ = 0;
  bool aliased_ = false;
  at::Tensor shard_;
  at::Tensor grad_shard_;
  at::Tensor full_;
  at::Tensor full_grad_;
  // Per slot: written since the buffer was allocated (full_grad() marks every slot).
  std::vector<bool> grad_written_;
  bool grad_complete_ = false;      // the parts nothing wrote are zero
  std::vector<ParamGuard> guards_;  // per slot, once guard_params ran
};

}  // namespace fsdp
