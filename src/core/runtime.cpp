// The Runtime: builds units from the wrap policy, owns the comm groups a strategy implies, runs
// the end-of-backward callback and the queue of in-flight gradient reductions, and counts bytes.
#include "core/runtime.h"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <unordered_map>

#include "comm/scalar_type.h"
#include "compat.h"
#include "core/buffers.h"
#include "core/check.h"
#include "core/collectives.h"
#include "fsdp/init.h"
#include "fsdp/units.h"

namespace fsdp {
namespace {

void check_dtypes(const ShardingOptions& o, c10::Device device) {
  FSDP_CHECK(o.param_dtype_ != DType::kInt64, "param_dtype must be a floating type, got int64");
  FSDP_CHECK(o.param_dtype_ != DType::kFloat16 || !device.is_cpu() || compat::kHasCpuHalfKernels,
             "param_dtype fp16 is not supported on CPU with LibTorch ", TORCH_VERSION,
             ": its CPU kernels (matmul, layer norm) have no fp16 (LibTorch 2.x has them); use "
             "bf16 or fp32");
  FSDP_CHECK(o.reduce_dtype_ != DType::kInt64, "reduce_dtype must be a floating type, got int64");
}

// The device parameters that hold values are on: one for all of them (deferred ones have none).
std::optional<c10::Device> params_device(const std::vector<UnitSpec>& specs) {
  std::optional<c10::Device> device;
  std::string first;
  for (const auto& spec : specs) {
    for (const auto& s : spec.slots) {
      if (!s.param.defined() || is_deferred(s.param)) continue;
      if (!device) {
        device = s.param.device();
        first = s.name;
      }
      FSDP_CHECK(s.param.device() == *device, "parameter '", first, "' is on ", *device, " and '",
                 s.name, "' on ", s.param.device(),
                 ": set ShardingOptions::device to say where the shards go");
    }
  }
  return device;
}

c10::Device parse_device(const std::string& name) {
  std::optional<c10::Device> device;
  try {
    device = c10::Device(name);
  } catch (const std::exception&) {
  }
  FSDP_CHECK(device && (device->is_cpu() || device->is_cuda()), "ShardingOptions::device '", name,
             "' is not a device fsdp.cpp shards on (\"cpu\", \"cuda\", \"cuda:1\")");
  if (device->is_cpu()) return c10::Device(c10::kCPU);
  FSDP_CHECK(at::globalContext().hasCUDA(), "ShardingOptions::device is '", name,
             "', but CUDA is not available here (a LibTorch without CUDA, or no GPU visible)");
  if (!device->has_index()) {  // the current device, as LibTorch's "cuda" means
    device = c10::impl::VirtualGuardImpl(c10::kCUDA).getDevice();
  }
  return *device;
}

// Where the shards live: ShardingOptions::device; else on an NCCL group the group's GPU (as FSDP2
// takes its mesh's device), else the parameters' device.
c10::Device resolve_device(const ShardingOptions& o, const std::vector<UnitSpec>& specs,
                           const Comm& world) {
  const bool on_gpu_group = world.device() == CommDevice::kCuda;
  const c10::Device group_gpu(c10::kCUDA, static_cast<c10::DeviceIndex>(world.device_index()));
  const c10::Device device = !o.device_.empty() ? parse_device(o.device_)
                             : on_gpu_group     ? group_gpu
                                                : params_device(specs).value_or(c10::kCPU);
  if (on_gpu_group) {
    FSDP_CHECK(device.is_cuda() && device.index() == world.device_index(), "the ", world.backend(),
               " group works on cuda:", world.device_index(), ", but the shards would live on ",
               device, ": set ShardingOptions::device to the group's GPU");
  }
  return device;
}

// Owner of each parameter: the innermost unit whose module contains it; a parameter shared by
// modules of different units (tied weights) belongs to the root, which is gathered throughout.
std::vector<std::vector<ParamSlot>> assign_params(
    torch::nn::Module& root,
    const std::vector<std::pair<std::string, const torch::nn::Module*>>& units) {
  const size_t root_index = units.size();
  std::vector<std::vector<ParamSlot>> slots(units.size() + 1);
  std::unordered_map<const c10::TensorImpl*, std::pair<size_t, size_t>> seen;  // -> (unit, index)
  for (const auto& item : root.named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    size_t owner = root_index;
    size_t best = 0;
    for (size_t u = 0; u < units.size(); ++u) {
      const std::string prefix = units[u].first + ".";
      if (name.rfind(prefix, 0) == 0 && prefix.size() > best) {
        owner = u;
        best = prefix.size();
      }
    }
    auto it = seen.find(item.value().unsafeGetTensorImpl());
    if (it != seen.end()) {
      auto& [unit, index] = it->second;
      slots[unit][index].aliases.push_back(name);
      if (unit != owner && unit != root_index) {
        slots[root_index].push_back(std::move(slots[unit][index]));
        slots[unit].erase(slots[unit].begin() + static_cast<std::ptrdiff_t>(index));
        for (auto& entry : seen) {  // later slots of that unit moved down by one
          if (entry.second.first == unit && entry.second.second > index) --entry.second.second;
        }
        it->second = {root_index, slots[root_index].size() - 1};
      }
      continue;
    }
    seen[item.value().unsafeGetTensorImpl()] = {owner, slots[owner].size()};
    slots[owner].push_back(ParamSlot{name, item.value(), {}, 0, 0, {}});
  }
  return slots;
}

// A parameter that trains has an fp32 master; a frozen one is kept in param_dtype whatever it
// was, so it may be any floating type (a bf16 base).
void check_param(const ParamSlot& s) {
  FSDP_CHECK(s.param.defined(), "parameter '", s.name, "' is undefined");
  if (!s.param.requires_grad()) {
    FSDP_CHECK(at::isFloatingType(s.param.scalar_type()), "frozen parameter '", s.name, "' is ",
               c10::toString(s.param.scalar_type()), ": fsdp shards floating-point parameters");
    return;
  }
  FSDP_CHECK(s.param.scalar_type() == at::kFloat, "parameter '", s.name, "' is ",
             c10::toString(s.param.scalar_type()),
             ": fsdp shards fp32 parameters that train (use param_dtype for mixed precision; a "
             "parameter with requires_grad false may be of any floating type)");
}

// Elements of the parameters of `spec` that train: what a unit reduces.
int64_t trainable_numel(const UnitSpec& spec) {
  int64_t n = 0;
  for (const auto& s : spec.slots) n += s.param.requires_grad() ? s.param.numel() : 0;
  return n;
}

// 2^k for an integer k (1 included).
bool is_power_of_two(double x) {
  int exponent = 0;
  return x > 0 && std::frexp(x, &exponent) == 0.5;
}

}  // namespace

Runtime::Runtime(std::shared_ptr<torch::nn::Module> root, CommPtr comm, ShardingOptions options)
    : root_(std::move(root)), world_(std::move(comm)), options_(std::move(options)) {
  FSDP_CHECK(root_ != nullptr, "fully_shard: the root module is null");
  FSDP_CHECK(world_ != nullptr, "fully_shard: the comm group is null");
  FSDP_CHECK(find_module_hooks(root_.get()) == nullptr,
             "fully_shard: this module is already sharded");
  check_prefetch_options();
  std::vector<UnitSpec> specs = unit_specs(*root_, options_.wrap_);
  device_ = resolve_device(options_, specs, *world_);
  check_dtypes(options_, device_);
  pool_ = BufferPool(device_);
  streams_ = SideStreams(device_);
  host_copies_ = std::make_shared<HostCopies>(streams_);
  move_buffers();
  check_buffers_agree(*world_, buffers());
  broadcast_buffers(*world_, buffers());  // as DDP, and FSDP's sync_module_states
  make_groups();
  split_root_ = options_.split_root_reduction_ && !options_.offload_params_ && specs.size() > 1 &&
                (shard_group_->size() > 1 || replicate_group_->size() > 1) &&
                trainable_numel(specs.back()) > 0;
  resolve_root_chunks(specs);
  build_units(std::move(specs));
}

// Before any unit exists, as check_unit_names: a failed fully_shard must leave no hooks behind.
// The units' trainable sizes from their specs, as FlatParam counts them (the root is last).
void Runtime::resolve_root_chunks(const std::vector<UnitSpec>& specs) {
  const auto numel = trainable_numel;
  int64_t largest = 0;
  for (size_t u = 0; u + 1 < specs.size(); ++u) largest = std::max(largest, numel(specs[u]));
  const int64_t root = numel(specs.back());
  const int64_t shards = shard_group_->size();
  const int chunks = fsdp::root_reduction_chunks(options_.root_reduction_chunks_, root, largest,
                                                 static_cast<int64_t>(specs.size()) - 1,
                                                 (root + shards - 1) / shards);
  if (split_root_) root_chunks_ = chunks;
}

// Buffers (masks, running statistics) are the module's own business: they only follow it to the
// device its parameters go to.
void Runtime::move_buffers() {
  at::NoGradGuard no_grad;
  for (auto& buffer : root_->buffers(/*recurse=*/true)) {
    if (buffer.defined() && buffer.device() != device_) buffer.set_data(buffer.to(device_));
  }
}

// Listed again each time: a module may have replaced a buffer's tensor since.
std::vector<NamedBuffer> Runtime::buffers() const { return named_buffers(*root_); }

void Runtime::sync_buffers() {
  switch (options_.buffer_sync_) {
    case BufferSync::kPerRank:
      return;
    case BufferSync::kBroadcast:
      world_->set_context("buffers broadcast, step " + std::to_string(step()));
      return broadcast_buffers(*world_, buffers());
    case BufferSync::kAverage:
      world_->set_context("buffers averaged, step " + std::to_string(step()));
      return average_buffers(*world_, buffers());
  }
}

// A strategy is a (replicate x shard) mesh: see docs/design.md, "Strategies as two groups".
void Runtime::make_groups() {
  const ShardingStrategy strategy = options_.strategy_;
  const bool hybrid = is_hybrid(strategy);
  FSDP_CHECK(options_.shard_group_size_ >= 0,
             "shard_group_size must be positive (or 0 for one "
             "node), got ",
             options_.shard_group_size_);
  FSDP_CHECK(hybrid || options_.shard_group_size_ == 0, "shard_group_size (",
             options_.shard_group_size_,
             ") applies to HYBRID_SHARD and HYBRID_SHARD_ZERO2 only, not ", to_string(strategy));
  if (strategy == ShardingStrategy::kNoShard) {
    shard_group_ = make_local_comm();
    replicate_group_ = world_;
  } else if (!hybrid) {
    shard_group_ = world_;
    replicate_group_ = make_local_comm();
  } else {
    const int per_group =
        options_.shard_group_size_ > 0 ? options_.shard_group_size_ : world_->local_size();
    FSDP_CHECK(per_group > 0, to_string(strategy),
               ": the launcher did not say how many ranks run on this node; set shard_group_size");
    FSDP_CHECK(world_->size() % per_group == 0, to_string(strategy), ": shard group size ",
               per_group, " does not divide the world size ", world_->size());
    const int rank = world_->rank();
    shard_group_ = world_->split(rank / per_group, rank);
    replicate_group_ = world_->split(rank % per_group, rank);
  }
}

std::vector<UnitSpec> unit_specs(torch::nn::Module& root, const WrapPolicy& policy) {
  const auto wrapped = select_units(root, policy);
  auto slots = assign_params(root, wrapped);
  std::vector<UnitSpec> out;
  for (size_t u = 0; u <= wrapped.size(); ++u) {
    const bool is_root = u == wrapped.size();
    if (!is_root && slots[u].empty()) continue;  // nothing to shard in this module
    out.push_back({is_root ? std::string() : wrapped[u].first, is_root ? &root : wrapped[u].second,
                   std::move(slots[u]), is_root});
  }
  return out;
}

std::vector<UnitSize> unit_sizes(torch::nn::Module& root, const WrapPolicy& policy) {
  std::vector<UnitSize> out;
  for (const UnitSpec& spec : unit_specs(root, policy)) {
    UnitSize size{spec.name, 0, 0};
    for (const auto& s : spec.slots) {
      (s.param.requires_grad() ? size.numel : size.frozen_numel) += s.param.numel();
    }
    out.push_back(std::move(size));
  }
  return out;
}

Runtime::~Runtime() {
  self_.reset();  // root_stepped_callback's callbacks do nothing from here on
  for (auto& u : units_) set_module_hooks(u->module(), nullptr);
  // Gathers still in flight (the root's after an optimizer step; on a GPU any) write into buffers
  // freed below: wait for them. On a GPU the compute stream also waits for the side streams' last
  // work, so that the caching allocator does not hand buffers out while a copy still runs (stream
  // waits: the host does not block).
  try {
    for (auto& u : units_) u->wait_unshard();
    if (streams_.gather()) {
      for (auto& g : offloaded_grads_) wait_for(g.copied, device_);
    }
  } catch (const std::exception&) {
    // A collective that failed: nothing more can be done for it while tearing down.
  }
}

void Runtime::build_units(std::vector<UnitSpec> specs) {
  int64_t total = 0;
  for (const auto& spec : specs) {
    for (const auto& s : spec.slots) {
      check_param(s);
      total += s.param.numel();
    }
  }
  FSDP_CHECK(world_->size() <= total, "world size ", world_->size(),
             " is larger than the model's parameter count ", total,
             ": some ranks would hold no parameters");
  check_unit_names(specs);
  try {
    int64_t blocks = 0;  // units other than the root so far, in forward order
    for (auto& spec : specs) {
      const UnitPolicy policy = policy_of(spec.name, spec.is_root, spec.is_root ? -1 : blocks++);
      units_.push_back(std::make_shared<Unit>(*this, spec.name, spec.module, std::move(spec.slots),
                                              spec.is_root, policy));
      set_module_hooks(spec.module, units_.back());
    }
  } catch (...) {
    // A unit failed (a deferred parameter's init, say), and ~Runtime will not run for a
    // constructor that throws: the units built so far must not stay registered, or their modules
    // (and any module later at the same address) would count as sharded.
    for (auto& u : units_) set_module_hooks(u->module(), nullptr);
    units_.clear();
    throw;
  }
}

// Before any unit exists: a failed fully_shard must leave no hooks behind.
void Runtime::check_unit_names(const std::vector<UnitSpec>& specs) const {
  std::set<std::string> names = {"(root)"};
  for (const auto& spec : specs) names.insert(spec.name);  // the root's is ""
  const char* kUnits =
      "units are the wrapped modules' qualified names, and \"\" or \"(root)\" for the root";
  for (const auto& [name, reshard] : options_.reshard_after_forward_) {
    FSDP_CHECK(names.count(name), "reshard_after_forward names '", name, "', which is not a unit (",
               kUnits, ")");
  }
  FSDP_CHECK(options_.checkpoint_every_ >= 1, "checkpoint_every must be at least 1, got ",
             options_.checkpoint_every_);
  FSDP_CHECK(options_.checkpoint_units_.empty() || names.size() > 2,
             "activation checkpointing: there are no wrapped units to checkpoint (the wrap "
             "policy made the whole model one unit)");
  for (const std::string& name : options_.checkpoint_units_) {
    FSDP_CHECK(name != "" && name != "(root)",
               "checkpoint_units names the root: recomputing the whole model's forward in its "
               "own backward saves nothing; checkpoint the wrapped blocks (\"*\")");
    FSDP_CHECK(name == "*" || names.count(name), "checkpoint_units names '", name,
               "', which is not a unit (", kUnits, ")");
  }
}

UnitPolicy Runtime::policy_of(const std::string& name, bool is_root, int64_t block) const {
  UnitPolicy policy;
  const auto& chosen = options_.reshard_after_forward_;
  auto it = chosen.find(name);
  if (it == chosen.end() && is_root) it = chosen.find("(root)");
  // The root keeps its parameters from forward to the end of backward, as in PyTorch FSDP.
  policy.reshard_after_forward =
      it != chosen.end() ? it->second : !is_root && reshards_after_forward(options_.strategy_);
  const auto& ac = options_.checkpoint_units_;
  const bool every_nth = block % options_.checkpoint_every_ == 0;
  policy.checkpoint = !is_root && std::any_of(ac.begin(), ac.end(), [&](const std::string& n) {
    return (n == "*" && every_nth) || n == name;
  });
  return policy;
}

void Runtime::check_prefetch_options() const {
  FSDP_CHECK(options_.prefetch_depth_ >= 1, "prefetch_depth must be at least 1, got ",
             options_.prefetch_depth_);
  FSDP_CHECK(options_.limit_all_gathers_ >= 0, "limit_all_gathers must be >= 0 (0: no limit), got ",
             options_.limit_all_gathers_);
}

void Runtime::Order::record(Unit& unit) {
  if (position.emplace(&unit, units.size()).second) units.push_back(&unit);
}

void Runtime::forward_reached(Unit& unit) {
  if (!orders_recorded_) {
    forward_order_.record(unit);
  } else if (options_.forward_prefetch_) {
    prefetch_after(forward_order_, unit, /*backward=*/false);
  }
}

void Runtime::backward_reached(Unit& unit) {
  if (!orders_recorded_) {
    backward_order_.record(unit);
  } else if (options_.backward_prefetch_ == BackwardPrefetch::kBackwardPre) {
    prefetch_after(backward_order_, unit, /*backward=*/true);
  }
}

void Runtime::backward_done(Unit& unit) {
  if (orders_recorded_ && !finishing_ &&
      options_.backward_prefetch_ == BackwardPrefetch::kBackwardPost) {
    prefetch_after(backward_order_, unit, /*backward=*/true);
  }
}

// Gathers the units after `unit` in `order` that this pass has not reached yet (the root, first
// in backward order, finishes its backward last).
void Runtime::prefetch_after(const Order& order, const Unit& unit, bool backward) {
  auto it = order.position.find(&unit);
  if (it == order.position.end()) return;  // a unit the first step did not reach
  const size_t end = std::min(order.units.size(), it->second + 1 + options_.prefetch_depth_);
  for (size_t i = it->second + 1; i < end; ++i) {
    if (options_.limit_all_gathers_ > 0 && ahead_ >= options_.limit_all_gathers_) return;
    Unit& next = *order.units[i];
    if (backward ? next.in_backward() : next.forwarded()) continue;
    if (next.prefetch(backward ? "backward prefetch all-gather" : "forward prefetch all-gather")) {
      ++ahead_;
    }
  }
}

void Runtime::prefetch_settled(bool used) {
  --ahead_;
  ++(used ? used_prefetches_ : unused_prefetches_);
}

void Runtime::begin_forward() {
  // A forward whose backward never ran (or that ran without grad) may have left units gathered
  // with parameters an optimizer has changed since: start from sharded. The root's gather issued
  // after its step stays, unless something wrote the shard after it.
  const bool keep_root = root_gathered_ahead_ && !callback_queued_ &&
                         root_unit().flat().shard()._version() == root_gathered_version_;
  root_gathered_ahead_ = false;
  if (!callback_queued_) {
    for (auto& u : units_) {
      if (!(keep_root && u->is_root())) u->reshard();
    }
  }
  for (auto& u : units_) u->clear_forwarded();
  sync_buffers();
}

std::function<void()> Runtime::step_check() {
  if (!self_) self_ = std::make_shared<Runtime*>(this);
  return [self = std::weak_ptr<Runtime*>(self_)] {
    if (auto runtime = self.lock()) (*runtime)->check_gradients_reached_shards();
  };
}

void Runtime::check_gradients_reached_shards() const {
  if (sync_gradients_) return;
  for (const auto& u : units_) {
    FSDP_CHECK(!u->flat().has_full_grad(), "optimizer step with gradient synchronisation off: ",
               "the backward since the last synchronised one left its gradients in the "
               "unsharded buffer of unit '",
               u->display_name(),
               "', not in the shards the optimizer steps, so this step would not see them. Turn "
               "synchronisation back on (set_requires_gradient_sync(true), or "
               "let the no_sync() guard end) before the last micro-batch's backward");
  }
}

std::function<void()> Runtime::root_stepped_callback() {
  const Unit& root = root_unit();
  if (!options_.forward_prefetch_ || root.flat().empty() || root.flat().aliased() ||
      root.flat().shard_count() == 1) {
    return nullptr;
  }
  if (!self_) self_ = std::make_shared<Runtime*>(this);
  return [self = std::weak_ptr<Runtime*>(self_)] {
    if (auto runtime = self.lock()) (*runtime)->gather_root_for_next_forward();
  };
}

void Runtime::drop_root_gathered_ahead() {
  if (!root_gathered_ahead_) return;
  root_gathered_ahead_ = false;
  root_unit().reshard();
}

// After the optimizer wrote the root's shard: whatever was gathered before is stale; gather
// again, for the next forward's root to find under way (or done).
void Runtime::gather_root_for_next_forward() {
  if (callback_queued_) return;  // a step inside backward: not ours to anticipate
  Unit& root = root_unit();
  root.reshard();
  root.issue_unshard("all-gather for the next forward, after the optimizer step");
  root_gathered_ahead_ = true;
  root_gathered_version_ = root.flat().shard()._version();
}

void Runtime::end_forward(bool backward_expected) {
  if (step_ == 0) {
    for (auto& u : units_) {
      FSDP_CHECK(u->forwarded(), "unit '", u->name(),
                 "' was not called through fsdp::forward during the forward pass: call it as "
                 "fsdp::forward(module, ...) in its parent's forward");
    }
  }
  if (!backward_expected) {
    for (auto& u : units_) u->reshard();
    sync_offload();
  }
}

void Runtime::ensure_final_callback() {
  if (callback_queued_) return;
  callback_queued_ = true;
  offloaded_grads_.clear();  // left by a backward that threw: never to be added
  torch::autograd::Engine::get_default_engine().queue_callback([this] { finish_backward(); });
}

void Runtime::finish_backward() {
  finishing_ = true;  // units autograd never reached finish here: nothing left to prefetch for
  for (auto& u : units_) u->finish_backward();
  finishing_ = false;
  drain_reduces();
  if (!offloaded_grads_.empty()) {
    sync_offload();
    land_offloaded_grads();
  }
  callback_queued_ = false;
  orders_recorded_ = orders_recorded_ || !forward_order_.units.empty();
  ++step_;
}

double Runtime::gradient_predivide_factor() const {
  if (options_.reduce_dtype_ != DType::kFloat16) return 1;
  const int n = world_->size();
  int factor = 1;  // torch's _get_gradient_predivide_factor
  while (n % factor == 0 && n / factor > factor) factor *= 2;
  return factor;
}

// [Note: reduction stages] A unit's reduction overlaps the backward of the units after it. With
// one replica, its reduce-scatter (issued by Unit::reduce_gradients) completes when the next
// unit's is issued. Across replicas (NO_SHARD, HYBRID) a stage is added: when the next unit's
// reduce-scatter is issued, this one's has had a unit of backward, and its chunk's all-reduce is
// issued; it completes one unit later still. NO_SHARD has nothing to scatter, so its all-reduce
// is issued at once. At most two units' reductions are in flight, plus, for HYBRID, one reduced
// chunk (docs/plan.md, [Note: plan gradient buffers]).
void Runtime::enqueue_reduce(PendingReduce pending) {
  if (replicate_group_->size() == 1) {
    drain_reduces();
    pending_.push_back(std::move(pending));
    return;
  }
  while (!pending_.empty() && pending_.front().replica_work) {
    complete_reduce(pending_.front());
    pending_.pop_front();
  }
  for (auto& p : pending_) start_replica_reduce(p);
  if (!pending.work) start_replica_reduce(pending);
  pending_.push_back(std::move(pending));
}

void Runtime::enqueue_early_piece(PendingReduce pending) {
  if (replicate_group_->size() > 1 && !pending.work) start_replica_reduce(pending);
  pending_.push_back(std::move(pending));
}

void Runtime::drain_reduces() {
  if (replicate_group_->size() > 1) {
    for (auto& p : pending_) {
      if (!p.replica_work) start_replica_reduce(p);
    }
  }
  while (!pending_.empty()) {
    complete_reduce(pending_.front());
    pending_.pop_front();
  }
}

// Waits for the reduce-scatter, releases what it read and issues the all-reduce of the chunk.
void Runtime::start_replica_reduce(PendingReduce& p) {
  std::unique_ptr<c10::Event> scattered;
  {
    OnSideStream side(p.unit->flat().offloaded() ? streams_.reduce() : std::nullopt);
    if (p.work) p.work->wait();
    p.work.reset();
    p.replica_work = all_reduce(*replicate_group_, p.output, ReduceOp::kSum);
    scattered = side.record();
  }
  if (p.source.is_same(p.output)) return;  // NO_SHARD: the all-reduce works in the buffer itself
  wait_for(scattered, device_);            // compute waits before the pool hands `source` out again
  p.source = at::Tensor();
  const int64_t kept = static_cast<int64_t>(p.output.nbytes());
  track_grad_buffers(kept - p.tracked_bytes);
  p.tracked_bytes = kept;
}

void Runtime::complete_reduce(PendingReduce& p) {
  at::NoGradGuard no_grad;
  FlatParam& flat = p.unit->flat();
  std::unique_ptr<c10::Event> reduced;
  {
    // An offloaded gradient ends on the reduce stream: its scaling and copy to the host need not
    // queue behind compute. The compute stream still waits for the collectives (`reduced`) before
    // the buffers they read are released below.
    OnSideStream side(flat.offloaded() ? streams_.reduce() : std::nullopt);
    if (p.work) p.work->wait();
    if (p.replica_work) p.replica_work->wait();
    reduced = side.record();
    const double postdivide = world_->size() / gradient_predivide_factor();
    if (flat.offloaded()) {
      if (postdivide != 1) p.output.div_(postdivide);
      at::Tensor host =
          at::empty({p.output.numel()},
                    p.output.options().device(at::kCPU).pinned_memory(!p.output.device().is_cpu()));
      host.copy_(p.output, /*non_blocking=*/true);
      note_offload_copy();
      offloaded_grads_.push_back({p.unit, p.offset, std::move(host), p.output, side.record()});
    } else if (is_power_of_two(postdivide)) {
      // The division and the sum in one pass: times 1 / 2^k is exact, so the result is the
      // division's (fp32 GPT-2 124M on 2 CPU ranks: 50 ms a step less).
      flat.grad_shard().narrow(0, p.offset, p.output.numel()).add_(p.output, 1.0 / postdivide);
    } else {
      p.output.div_(postdivide);
      flat.grad_shard().narrow(0, p.offset, p.output.numel()).add_(p.output);
    }
  }
  wait_for(reduced, device_);
  release_copied_grads();
  track_grad_buffers(-p.tracked_bytes);
}

// The device chunks of offloaded gradients whose copy was issued before the newest: their copies
// have had a unit's backward to run, so the compute stream's wait for them costs little, and at
// most two chunks stay on the device.
void Runtime::release_copied_grads() {
  for (size_t i = 0; i + 1 < offloaded_grads_.size(); ++i) {
    OffloadedGrad& g = offloaded_grads_[i];
    if (!g.device.defined()) continue;
    wait_for(g.copied, device_);
    g.device.reset();
  }
}

// After sync_offload: the host buffers hold the reduced gradients, and every stream is done with
// the device chunks.
void Runtime::land_offloaded_grads() {
  at::NoGradGuard no_grad;
  for (auto& g : offloaded_grads_) {
    g.unit->flat().grad_shard().narrow(0, g.offset, g.host.numel()).add_(g.host);
  }
  offloaded_grads_.clear();
}

void Runtime::sync_offload() {
  host_copies_->wait("offloaded copies, step " + std::to_string(step_));
}

void Runtime::track_gathered(int64_t delta) {
  memory_.gathered_param_bytes += delta;
  memory_.peak_gathered_param_bytes =
      std::max(memory_.peak_gathered_param_bytes, memory_.gathered_param_bytes);
}

void Runtime::track_grad_buffers(int64_t delta) {
  memory_.grad_buffer_bytes += delta;
  memory_.peak_grad_buffer_bytes =
      std::max(memory_.peak_grad_buffer_bytes, memory_.grad_buffer_bytes);
}

MemoryStats Runtime::memory() const {
  MemoryStats m = memory_;
  const BufferPoolStats pool = pool_.stats();
  m.pool_bytes = pool.held_bytes;
  m.peak_pool_bytes = pool.peak_held_bytes;
  m.pool_fresh_blocks = pool.fresh_blocks;
  m.used_prefetches = used_prefetches_;
  m.unused_prefetches = unused_prefetches_;
  m.sharded_param_bytes = 0;
  m.sharded_grad_bytes = 0;
  m.sharded_frozen_bytes = 0;
  for (const auto& u : units_) {
    m.sharded_param_bytes += u->flat().shard().nbytes();
    m.sharded_grad_bytes += u->flat().grad_shard().nbytes();
    m.sharded_frozen_bytes += u->frozen().shard().nbytes();
  }
  if (options_.offload_params_) {
    m.host_shard_bytes = m.sharded_param_bytes + m.sharded_grad_bytes + m.sharded_frozen_bytes;
  }
  return m;
}

void Runtime::reset_peak_memory() {
  memory_.peak_gathered_param_bytes = memory_.gathered_param_bytes;
  memory_.peak_grad_buffer_bytes = memory_.grad_buffer_bytes;
}

std::map<std::string, at::Tensor> Runtime::gather_full_params() {
  std::map<std::string, at::Tensor> out;
  for (auto& u : units_) {
    for (FlatParam* flat : {&u->flat(), &u->frozen()}) {
      if (flat->empty()) continue;
      at::Tensor full = flat->shard();
      if (flat->shard_count() > 1) {
        shard_group_->set_context("gather_full_params '" + u->display_name() + "'");
        full = at::empty({flat->padded_numel()}, flat->shard().options());
        all_gather(*shard_group_, flat->shard(), full)->wait();
      }
      for (const auto& s : flat->slots()) {
        out[s.name] = full.narrow(0, s.offset, s.numel).view(s.shape).to(at::kFloat, false, true);
        for (const auto& alias : s.aliases) out[alias] = out[s.name];
      }
    }
  }
  return out;
}

}  // namespace fsdp
