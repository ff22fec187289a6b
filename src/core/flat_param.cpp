// FlatParam: flattening, padding, sharding and the storage tricks that let the original
// parameters stay views of one gathered buffer. See flat_param.h for the layout.
#include "core/flat_param.h"

#include <algorithm>

#include "core/check.h"
#include "fsdp/init.h"

namespace fsdp {
namespace {
c10::StorageImpl* storage_of(const at::Tensor& t) { return t.storage().unsafeGetStorageImpl(); }
}  // namespace

FlatParam::FlatParam(std::vector<ParamSlot> slots, int shard_rank, int shard_count,
                     at::ScalarType param_dtype, const ParamInit& init, c10::Device device,
                     bool offload, bool trainable)
    : slots_(std::move(slots)),
      shard_rank_(shard_rank),
      shard_count_(shard_count),
      param_dtype_(param_dtype),
      device_(device),
      offload_(offload),
      trainable_(trainable) {
  for (auto& s : slots_) {
    s.offset = numel_;
    s.numel = s.param.numel();
    s.shape = s.param.sizes().vec();
    numel_ += s.numel;
  }
  shard_numel_ = (numel_ + shard_count_ - 1) / shard_count_;
  aliased_ = shard_count_ == 1 && shard_dtype() == param_dtype_ && !offload_;
  init_shard(init);
  point_params_at_full();
}

FlatParam::Overlap FlatParam::overlap(const ParamSlot& slot) const {
  const int64_t lo = std::max<int64_t>(slot.offset, shard_rank_ * shard_numel_);
  const int64_t hi = std::min<int64_t>(slot.offset + slot.numel, (shard_rank_ + 1) * shard_numel_);
  if (hi <= lo) return {};
  return {lo - shard_rank_ * shard_numel_, lo - slot.offset, hi - lo};
}

// The values of a deferred parameter, computed whole (generators draw a parameter's values in
// order, so a slice cannot be drawn alone), of which the caller copies its slice to the shard's
// device. In host memory, one parameter at a time: initialisers draw from CPU generators, so a
// model starts from the same values on every device.
at::Tensor FlatParam::materialise(const ParamSlot& s, const ParamInit& init) const {
  FSDP_CHECK(init, "parameter '", s.name,
             "' is deferred (it has no values yet) but "
             "ShardingOptions::param_init is not set: fully_shard cannot materialise it");
  at::Tensor full = at::empty(s.shape, at::kFloat);
  init(s.name, full);
  FSDP_CHECK(full.sizes() == at::IntArrayRef(s.shape) && full.scalar_type() == at::kFloat,
             "param_init for '", s.name, "' changed the tensor's shape or dtype");
  return full;
}

void FlatParam::init_shard(const ParamInit& init) {
  at::NoGradGuard no_grad;
  at::TensorOptions where = at::TensorOptions().dtype(shard_dtype()).device(device_);
  if (offload_) where = where.device(at::kCPU).pinned_memory(!device_.is_cpu());
  shard_ = at::zeros({shard_numel_}, where);
  for (const auto& s : slots_) {
    const Overlap o = overlap(s);
    if (o.count == 0) continue;
    const at::Tensor values = is_deferred(s.param) ? materialise(s, init) : s.param.detach();
    shard_.narrow(0, o.shard_begin, o.count)
        .copy_(values.reshape({-1}).narrow(0, o.param_begin, o.count));
  }
  if (trainable_) grad_shard_ = at::zeros({shard_numel_}, where);
}

void FlatParam::point_params_at_full() {
  at::NoGradGuard no_grad;
  full_ = aliased_ ? shard_
                   : at::empty({padded_numel()},
                               at::TensorOptions().dtype(param_dtype_).device(device_));
  for (auto& s : slots_) {
    // set_data swaps the parameter's storage, keeping its identity (and autograd metadata), so
    // the module keeps working on the same at::Tensor handle.
    s.param.set_data(full_.narrow(0, s.offset, s.numel).view(s.shape));
  }
}

bool FlatParam::full_allocated() const { return aliased_ || storage_of(full_)->nbytes() > 0; }

int64_t FlatParam::full_bytes() const {
  return padded_numel() * static_cast<int64_t>(c10::elementSize(param_dtype_));
}

void FlatParam::alloc_full(BufferPool& pool) {
  if (full_allocated()) return;
  const size_t nbytes = static_cast<size_t>(full_bytes());
  c10::StorageImpl* storage = storage_of(full_);
  storage->set_data_ptr_noswap(pool.take(nbytes));
  storage->set_nbytes(nbytes);
  for (ParamGuard& g : guards_) g.show();
}

void FlatParam::free_full() {
  if (aliased_ || !full_allocated()) return;
  storage_of(full_)->reset();
  for (ParamGuard& g : guards_) g.hide();
}

void FlatParam::guard_params(const std::string& unit) {
  if (aliased_ || !guards_.empty()) return;
  for (const auto& s : slots_) {
    guards_.emplace_back(s.param, full_.narrow(0, s.offset, s.numel).view(s.shape), s.name, unit);
  }
  if (!full_allocated()) {
    for (ParamGuard& g : guards_) g.hide();
  }
}

void FlatParam::alloc_full_grad(BufferPool& pool) {
  FSDP_CHECK(trainable_, "a frozen FlatParam has no gradient buffer");
  full_grad_ = pool.empty(padded_numel(), param_dtype_);
  grad_written_.assign(slots_.size(), false);
  grad_complete_ = false;
  for (auto& s : slots_) {
    if (!s.param.requires_grad()) continue;
    s.param.mutable_grad() = full_grad_.narrow(0, s.offset, s.numel).view(s.shape);
  }
}

bool FlatParam::accumulate_grad(size_t slot, const at::Tensor& grad) {
  if (!full_grad_.defined() || grad.sizes() != slots_.at(slot).param.sizes()) return false;
  at::Tensor into = slots_[slot].param.mutable_grad();
  if (grad_written_[slot]) {
    into.add_(grad);
  } else {
    into.copy_(grad);
    grad_written_[slot] = true;
  }
  return true;
}

void FlatParam::complete_full_grad() {
  if (!full_grad_.defined() || grad_complete_) return;
  int64_t end = 0;  // of the last slot zeroed or written (slots lie in order)
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!grad_written_[i]) full_grad_.narrow(0, slots_[i].offset, slots_[i].numel).zero_();
    grad_written_[i] = true;
    end = slots_[i].offset + slots_[i].numel;
  }
  full_grad_.narrow(0, end, full_grad_.numel() - end).zero_();
  grad_complete_ = true;
}

at::Tensor& FlatParam::full_grad() {
  complete_full_grad();
  return full_grad_;
}

void FlatParam::free_full_grad() {
  for (auto& s : slots_) s.param.mutable_grad().reset();
  full_grad_.reset();
  grad_written_.clear();
}

int64_t FlatParam::full_grad_bytes() const {
  return full_grad_.defined() ? full_grad_.nbytes() : 0;
}

at::Tensor FlatParam::shard_mask(
    const std::function<bool(const std::string&, const at::Tensor&)>& rule) const {
  at::Tensor mask = at::zeros({shard_numel_}, shard_.options());
  for (const auto& s : slots_) {
    const Overlap o = overlap(s);
    if (o.count > 0 && rule(s.name, s.param)) mask.narrow(0, o.shard_begin, o.count).fill_(1.0);
  }
  return mask;
}

}  // namespace fsdp
