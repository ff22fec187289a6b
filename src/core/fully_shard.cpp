// FullyShardedModel: the public API over the Runtime.
#include "fsdp/fully_shard.h"

#include "core/runtime.h"

namespace fsdp {

bool default_decay_rule(const std::string& /*name*/, const at::Tensor& param) {
  return param.dim() >= 2;
}

FullyShardedModel::FullyShardedModel(std::shared_ptr<torch::nn::Module> root, CommPtr comm,
                                     ShardingOptions options)
    : runtime_(std::make_unique<Runtime>(std::move(root), std::move(comm), std::move(options))) {}

FullyShardedModel::~FullyShardedModel() = default;

const ShardingOptions& FullyShardedModel::options() const { return runtime_->options(); }

c10::Device FullyShardedModel::device() const { return runtime_->device(); }

namespace {

UnitInfo unit_info(const Unit& u, const FlatParam& f) {
  UnitInfo info;
  info.name = u.name();
  info.numel = f.numel();
  info.padded_numel = f.padded_numel();
  info.shard_numel = f.shard_numel();
  info.shard_rank = f.shard_rank();
  info.shard_count = f.shard_count();
  for (const auto& s : f.slots()) {
    info.param_names.push_back(s.name);
    info.params.push_back({s.name, s.shape, s.offset, s.numel, s.aliases});
  }
  return info;
}

}  // namespace

std::vector<UnitInfo> FullyShardedModel::units() const {
  std::vector<UnitInfo> out;
  for (const auto& u : runtime_->units()) {
    if (!u->flat().empty()) out.push_back(unit_info(*u, u->flat()));
  }
  return out;
}

std::vector<UnitInfo> FullyShardedModel::frozen_units() const {
  std::vector<UnitInfo> out;
  for (const auto& u : runtime_->units()) {
    if (!u->frozen().empty()) out.push_back(unit_info(*u, u->frozen()));
  }
  return out;
}

std::vector<UnitShard> FullyShardedModel::shards(const DecayRule& rule) const {
  runtime_->sync_offload();  // the caller may write them: no queued copy may still read them
  runtime_->drop_root_gathered_ahead();  // nor may a gather made before
  std::vector<UnitShard> out;
  std::function<void()> wait_writable;
  if (options().offload_params_ && !device().is_cpu()) {
    wait_writable = [copies = runtime_->host_copies()] {
      copies->wait("offloaded copies of the shards, before an optimizer step writes them");
    };
  }
  for (const auto& u : runtime_->units()) {
    const FlatParam& f = u->flat();
    if (f.empty()) continue;
    out.push_back({u->name(), f.shard(), f.grad_shard(), f.shard_mask(rule), wait_writable});
  }
  if (!runtime_->root_unit().flat().empty()) {
    out.back().stepped = runtime_->root_stepped_callback();
  }
  if (!out.empty()) out.front().before_step = runtime_->step_check();
  return out;
}

std::vector<UnitShard> FullyShardedModel::frozen_shards() const {
  runtime_->sync_offload();
  runtime_->drop_root_gathered_ahead();
  std::vector<UnitShard> out;
  for (const auto& u : runtime_->units()) {
    if (!u->frozen().empty()) out.push_back({u->name(), u->frozen().shard(), {}, {}});
  }
  return out;
}

Comm& FullyShardedModel::shard_group() const { return runtime_->shard_group(); }
Comm& FullyShardedModel::replicate_group() const { return runtime_->replicate_group(); }
Comm& FullyShardedModel::world() const { return runtime_->world(); }

void FullyShardedModel::set_requires_gradient_sync(bool sync) {
  runtime_->set_sync_gradients(sync);
}

std::map<std::string, at::Tensor> FullyShardedModel::gather_full_params() {
  runtime_->sync_offload();
  return runtime_->gather_full_params();
}

std::vector<NamedBuffer> FullyShardedModel::buffers() const { return runtime_->buffers(); }
void FullyShardedModel::sync_buffers() { runtime_->sync_buffers(); }

MemoryStats FullyShardedModel::memory() const { return runtime_->memory(); }
void FullyShardedModel::reset_peak_memory() { runtime_->reset_peak_memory(); }

std::shared_ptr<FullyShardedModel> fully_shard(std::shared_ptr<torch::nn::Module> root,
                                               CommPtr comm, ShardingOptions options) {
  return std::make_shared<FullyShardedModel>(std::move(root), std::move(comm), std::move(options));
}

}  // namespace fsdp
