// A unit's life in a step: the state machine (sharded <-> unsharded), the forward hooks that
// fsdp::forward calls, the autograd function that brings parameters back for backward, and the
// gradient-accumulator hooks that put gradients into its buffer and trigger its reduction.
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>

#include "comm/scalar_type.h"
#include "core/check.h"
#include "core/collectives.h"
#include "core/runtime.h"
#include "core/split_reduce.h"

namespace fsdp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Identity on a unit's outputs whose backward runs the unit's pre-backward: autograd reaches it
// once the gradient of every output is known, before any of the unit's own backward nodes.
struct UnitBackwardHook : public torch::autograd::Function<UnitBackwardHook> {
  static variable_list forward(AutogradContext* ctx, at::TensorList outputs, Unit* unit) {
    ctx->saved_data["unit"] = reinterpret_cast<int64_t>(unit);
    return outputs.vec();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    reinterpret_cast<Unit*>(ctx->saved_data["unit"].toInt())->pre_backward();
    grads.emplace_back();  // no gradient for the unit pointer
    return grads;
  }
};

// Identity on a unit's tensor arguments whose backward tells the unit that the gradients of all
// of them are known: the unit's own backward nodes that lead to its inputs have run, so its frozen
// parameters are read no more ([Note: frozen parameters]; FSDP2's RegisterPostBackwardFunction).
struct UnitInputHook : public torch::autograd::Function<UnitInputHook> {
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs, Unit* unit) {
    ctx->saved_data["unit"] = reinterpret_cast<int64_t>(unit);
    return inputs.vec();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    reinterpret_cast<Unit*>(ctx->saved_data["unit"].toInt())->inputs_done();
    grads.emplace_back();  // no gradient for the unit pointer
    return grads;
  }
};

// Before a parameter's AccumulateGrad: the gradient goes into the unit's buffer here
// (FlatParam::accumulate_grad: a copy the first time, no zero fill) and on as nothing, which the
// accumulator takes as no gradient; the parameter's own hooks (register_hook) have run on it
// first (compat::leaf_grad_hooks). Without a buffer (a gradient outside the unit's backward)
// autograd's accumulation runs as usual and the unit's check then names the parameter's unit.
struct GradIntoBufferHook : public torch::autograd::FunctionPreHook {
  GradIntoBufferHook(FlatParam* flat, size_t slot) : flat_(flat), slot_(slot) {}
  variable_list operator()(const variable_list& grads) override {
    if (grads.size() != 1 || !grads[0].defined() || !flat_->has_full_grad()) return grads;
    const at::Tensor grad = compat::leaf_grad_hooks(flat_->slots()[slot_].param, grads[0]);
    at::NoGradGuard no_grad;
    if (!flat_->accumulate_grad(slot_, grad)) return grads;  // another shape: autograd's error
    return {at::Tensor()};
  }
  FlatParam* flat_;
  size_t slot_;
};

// Runs after a parameter's AccumulateGrad (its gradient in the unit's buffer).
struct GradAccumulatedHook : public torch::autograd::FunctionPostHook {
  explicit GradAccumulatedHook(Unit* unit) : unit_(unit) {}
  variable_list operator()(const variable_list& outputs, const variable_list& /*inputs*/) override {
    unit_->on_grad_accumulated();
    return outputs;
  }
  Unit* unit_;
};

bool is_unit_boundary(const torch::autograd::Node* node) {
  return dynamic_cast<const torch::autograd::CppNode<UnitBackwardHook>*>(node) != nullptr;
}

// The row length the root's late gradient is sent in: the last dimension of its largest matrix
// (a token embedding's width, so that a row is a token's), else 256 elements.
int64_t late_row_length(const std::vector<ParamSlot>& slots) {
  int64_t row = 256, largest = 0;
  for (const auto& s : slots) {
    if (s.shape.size() >= 2 && s.numel > largest && s.shape.back() > 0) {
      largest = s.numel;
      row = s.shape.back();
    }
  }
  return row;
}

// `tensors` with those that require grad passed through `Hook` (one node for all of them); the
// same tensors when none does.
template <typename Hook>
std::vector<at::Tensor> through_hook(std::vector<at::Tensor> tensors, Unit* unit) {
  std::vector<size_t> positions;
  std::vector<at::Tensor> differentiable;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].defined() && tensors[i].requires_grad()) {
      positions.push_back(i);
      differentiable.push_back(tensors[i]);
    }
  }
  if (differentiable.empty()) return tensors;
  variable_list wrapped = Hook::apply(at::TensorList(differentiable), unit);
  for (size_t k = 0; k < positions.size(); ++k) tensors[positions[k]] = wrapped[k];
  return tensors;
}

// The slots of parameters that train (requires_grad), or of those that do not.
std::vector<ParamSlot> slots_that_train(const std::vector<ParamSlot>& slots, bool train) {
  std::vector<ParamSlot> out;
  for (const auto& s : slots) {
    if (s.param.requires_grad() == train) out.push_back(s);
  }
  return out;
}

FlatParam make_flat(Runtime& runtime, std::vector<ParamSlot> slots, bool trainable) {
  const ShardingOptions& o = runtime.options();
  return FlatParam(std::move(slots), runtime.shard_group().rank(), runtime.shard_group().size(),
                   to_scalar_type(o.param_dtype_), o.param_init_, runtime.device(),
                   o.offload_params_, trainable);
}

}  // namespace

Unit::Unit(Runtime& runtime, std::string name, const torch::nn::Module* module,
           std::vector<ParamSlot> slots, bool is_root, UnitPolicy policy)
    : runtime_(runtime),
      name_(std::move(name)),
      display_name_(is_root ? std::string("(root)") : name_),
      module_(module),
      is_root_(is_root),
      flat_(make_flat(runtime, slots_that_train(slots, true), /*trainable=*/true)),
      frozen_(make_flat(runtime, slots_that_train(slots, false), /*trainable=*/false)),
      policy_(policy),
      late_row_(late_row_length(flat_.slots())) {
  for (FlatParam* f : {&flat_, &frozen_}) {
    if (!f->empty()) held_.push_back(f);
  }
  register_grad_hooks();
  // A FlatParam starts gathered (it was built from the full parameters); start sharded, every
  // op on a sharded parameter failing in fsdp's words.
  for (FlatParam* f : held_) {
    f->guard_params(display_name_);
    f->free_full();
  }
  state_ = UnitState::kSharded;
}

Unit::~Unit() {
  for (size_t i = 0; i < accumulators_.size(); ++i) {
    accumulators_[i]->del_post_hook(hook_keys_[i]);
    auto& pre = accumulators_[i]->pre_hooks();
    pre.erase(std::remove_if(pre.begin(), pre.end(),
                             [&](const auto& h) { return h.get() == pre_hooks_[i]; }),
              pre.end());
  }
}

void Unit::register_grad_hooks() {
  const auto& slots = flat_.slots();  // all of them require grad
  for (size_t i = 0; i < slots.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(slots[i].param);
    FSDP_CHECK(acc, "no gradient accumulator for parameter '", slots[i].name, "'");
    auto pre = std::make_unique<GradIntoBufferHook>(&flat_, i);
    pre_hooks_.push_back(pre.get());
    acc->add_pre_hook(std::move(pre));
    hook_keys_.push_back(acc->add_post_hook(std::make_unique<GradAccumulatedHook>(this)));
    grad_sinks_[acc.get()] = [this, i](const at::Tensor& grad) {
      return flat_.accumulate_grad(i, grad);
    };
    accumulators_.push_back(std::move(acc));
    ++trainable_params_;
  }
}

void Unit::set_context(const char* phase) const {
  std::string label =
      "unit '" + display_name_ + "' " + phase + ", step " + std::to_string(runtime_.step());
  runtime_.shard_group().set_context(label);
  runtime_.replicate_group().set_context(label);
  runtime_.world().set_context(label);  // the split reduction's rows go over the whole world
}

// Gathering, on the gather stream where the device has one (core/streams.h): an offloaded shard
// is first copied to a device buffer of its dtype (asynchronously from pinned memory; the cast to
// param_dtype then runs on the device, not the host: docs/design.md, [Note: offload]), cast, and
// all-gathered into `full`, or with one shard copied there; the unit's trainable and frozen
// FlatParams one after the other. Buffers are taken on the compute stream first, and held until
// wait_unshard has made the compute stream wait for the gather.
void Unit::issue_unshard(const char* phase) {
  if (state_ != UnitState::kSharded) return;
  state_ = UnitState::kUnsharded;
  std::vector<Gather> gathers;
  for (FlatParam* f : held_) {
    if (!f->aliased()) gathers.push_back(stage_gather(*f));
  }
  if (gathers.empty()) return;
  at::NoGradGuard no_grad;
  if (gathers.front().flat->shard_count() > 1) set_context(phase);
  {
    OnSideStream side(runtime_.streams().gather());
    for (Gather& g : gathers) issue_gather(g);
    gathered_ = side.record();
  }
  bool pending = gathered_ != nullptr;
  for (const Gather& g : gathers) pending = pending || g.work;
  if (pending) {
    gathers_ = std::move(gathers);
    state_ = UnitState::kGathering;
  }
}

// `full`'s bytes, and the buffers a gather of `flat` reads (on the compute stream).
Unit::Gather Unit::stage_gather(FlatParam& flat) {
  flat.alloc_full(runtime_.pool());
  runtime_.track_gathered(flat.full_bytes());
  BufferPool& pool = runtime_.pool();
  Gather g;
  g.flat = &flat;
  g.staged = flat.offloaded() ? pool.empty(flat.shard_numel(), flat.shard_dtype()) : flat.shard();
  g.src = flat.shard_count() > 1 && flat.param_dtype() != flat.shard_dtype()
              ? pool.empty(flat.shard_numel(), flat.param_dtype())
              : g.staged;
  return g;
}

void Unit::issue_gather(Gather& g) {
  FlatParam& flat = *g.flat;
  if (flat.offloaded()) {
    g.staged.copy_(flat.shard(), /*non_blocking=*/true);
    runtime_.note_offload_copy();
  }
  if (flat.shard_count() == 1) {
    flat.full().copy_(g.staged);
    return;
  }
  if (!g.src.is_same(g.staged)) g.src.copy_(g.staged);
  g.work = all_gather(runtime_.shard_group(), g.src, flat.full());
}

void Unit::wait_unshard() {
  if (state_ != UnitState::kGathering) return;
  for (Gather& g : gathers_) {
    if (g.work) g.work->wait();
  }
  wait_for(gathered_, runtime_.device());
  gathers_.clear();
  state_ = UnitState::kUnsharded;
}

bool Unit::prefetch(const char* phase) {
  if (state_ != UnitState::kSharded) return false;
  issue_unshard(phase);
  prefetched_ = true;
  return true;
}

void Unit::settle_prefetch(bool used) {
  if (!prefetched_) return;
  prefetched_ = false;
  runtime_.prefetch_settled(used);
}

void Unit::reshard() {
  wait_unshard();  // the collective writes into the buffer this frees
  settle_prefetch(/*used=*/false);
  if (state_ == UnitState::kSharded) return;
  state_ = UnitState::kSharded;
  for (FlatParam* f : held_) {
    if (f->aliased()) continue;
    f->free_full();
    runtime_.track_gathered(-f->full_bytes());
  }
}

void Unit::pre_forward() {
  if (is_root_) {
    runtime_.begin_forward();
  } else {
    FSDP_CHECK(runtime_.root_unit().forwarded(), "unit '", name_,
               "' ran before the root module: call the root through fsdp::forward(model, ...)");
  }
  forwarded_ = true;
  settle_prefetch(/*used=*/true);
  issue_unshard("forward all-gather");
  runtime_.forward_reached(*this);
  wait_unshard();
}

std::vector<at::Tensor> Unit::pre_forward_inputs(std::vector<at::Tensor> inputs) {
  if (!at::GradMode::is_enabled()) return inputs;
  const bool any = std::any_of(inputs.begin(), inputs.end(), [](const at::Tensor& t) {
    return t.defined() && t.requires_grad();
  });
  if (!any) return inputs;
  ++inputs_pending_;
  inputs_hooked_ = true;
  return through_hook<UnitInputHook>(std::move(inputs), this);
}

void Unit::inputs_done() {
  if (inputs_pending_ > 0) --inputs_pending_;
  // A unit with nothing to train has no gradient to wait for: its backward is done.
  if (flat_.empty() && inputs_pending_ == 0 && in_backward_) {
    post_backward();
    return;
  }
  reshard_if_backward_done();
}

// [Note: frozen parameters] A unit's trainable parameters are read by no backward node after the
// last of their gradients lands; its frozen ones are read until its inputs' gradients are known,
// which may come later (a frozen projection's input gradient) or earlier (an adapter's gradient).
// So a unit with frozen parameters reshards once both have happened; one whose inputs need no
// gradient (or come in some other way than as tensor arguments) reshards at the end of backward.
void Unit::reshard_if_backward_done() {
  if (!in_backward_) return;
  if (!post_backward_done_ && !flat_.empty()) return;
  if (!frozen_.empty() && (is_root_ || !inputs_hooked_ || inputs_pending_ > 0)) return;
  reshard();
}

std::vector<at::Tensor> Unit::post_forward(std::vector<at::Tensor> outputs) {
  bool backward_expected = false;
  if (at::GradMode::is_enabled()) {
    for (const auto& t : outputs) backward_expected |= t.defined() && t.requires_grad();
  }
  if (policy_.reshard_after_forward) reshard();
  if (backward_expected && is_root_ && runtime_.splits_root_reduction()) {
    intercept_early_uses(outputs, grad_sinks_, is_unit_boundary);
  }
  if (backward_expected) outputs = through_hook<UnitBackwardHook>(std::move(outputs), this);
  if (is_root_) runtime_.end_forward(backward_expected);
  return outputs;
}

void Unit::pre_backward() {
  if (in_backward_) return;  // a unit run several times in one forward reaches here once each
  in_backward_ = true;
  post_backward_done_ = false;
  early_reduced_ = false;
  if (early_grad_.defined()) release_early();
  runtime_.ensure_final_callback();
  settle_prefetch(/*used=*/true);
  issue_unshard("backward all-gather");
  runtime_.backward_reached(*this);
  // Behind this unit's gathers in the queue: they are needed first.
  if (!is_root_) runtime_.root_unit().reduce_early();
  wait_unshard();
  if (!flat_.empty() && !flat_.has_full_grad()) {
    flat_.alloc_full_grad(runtime_.pool());
    runtime_.track_grad_buffers(flat_.full_grad_bytes());
  }
  grads_pending_ = trainable_params_;
}

void Unit::on_grad_accumulated() {
  FSDP_CHECK(in_backward_, "a parameter of unit '", display_name_,
             "' received a gradient before the unit's backward began: its parameters must only "
             "be used inside its own forward (called through fsdp::forward)");
  if (--grads_pending_ == 0) post_backward();
}

void Unit::post_backward() {
  if (post_backward_done_) return;
  post_backward_done_ = true;
  if (runtime_.sync_gradients() && !flat_.empty()) {
    if (early_reduced_) {
      while (early_grad_.defined()) reduce_early_piece();  // more pieces than units reached
      reduce_late();
    } else {
      reduce_gradients();
    }
  }
  reshard_if_backward_done();
  runtime_.backward_done(*this);
}

void Unit::reduce_gradients() {
  set_context("backward gradient reduction");
  at::Tensor full_grad = flat_.full_grad();
  const int64_t held = flat_.full_grad_bytes();
  flat_.free_full_grad();
  runtime_.enqueue_reduce(make_reduction(full_grad, /*offset=*/0, held));
}

bool Unit::reduces_in_place(const at::Tensor& grad) const {
  return grad.is_contiguous() &&
         grad.scalar_type() == to_scalar_type(runtime_.options().reduce_dtype_);
}

// Issues the reduction of `grad`: the shard group's slices of one range of the unit's gradient,
// one after another ([shard count, n], or flat), into this rank's gradient shard from `offset`.
// It reads `grad` itself where it can (reduces_in_place), else a reduce_dtype copy. `owned`: the
// tracked bytes this reduction takes over, released when it completes.
PendingReduce Unit::make_reduction(const at::Tensor& grad, int64_t offset, int64_t owned) {
  const at::ScalarType reduce_type = to_scalar_type(runtime_.options().reduce_dtype_);
  PendingReduce pending;
  pending.unit = this;
  pending.offset = offset;
  const bool in_place = reduces_in_place(grad);
  if (in_place) {
    pending.source = grad.view({-1});
  } else {
    pending.source = runtime_.pool().empty(grad.numel(), reduce_type);
    pending.source.view(grad.sizes()).copy_(grad);
  }
  const double predivide = runtime_.gradient_predivide_factor();
  if (predivide != 1) {
    // The copy above, or the gradient itself, which is not read again.
    pending.source.div_(predivide);
  }
  Comm& group = runtime_.shard_group();
  if (group.size() > 1) {
    pending.output = runtime_.pool().empty(pending.source.numel() / group.size(), reduce_type);
    pending.work = reduce_scatter(group, pending.source, pending.output, ReduceOp::kSum);
  } else {
    pending.output = pending.source;
  }
  pending.tracked_bytes = owned + (in_place ? 0 : pending.source.nbytes()) +
                          (pending.output.is_same(pending.source) ? 0 : pending.output.nbytes());
  runtime_.track_grad_buffers(pending.tracked_bytes - owned);
  return pending;
}

// [Note: split root reduction] in docs/design.md. The first wrapped unit's backward has begun:
// what the root's gradient buffer holds is final (the output head's gradients, the early share of
// a tied embedding's, and any earlier no_sync micro-batches'). It is kept aside and reduced in
// pieces, one as each of the next units' backward begins, behind that unit's gathers; the buffer
// starts again from zero for the gradients still to come.
void Unit::reduce_early() {
  if (!is_root_ || !in_backward_ || post_backward_done_ || !runtime_.sync_gradients() ||
      !runtime_.splits_root_reduction()) {
    return;
  }
  if (!early_reduced_) {
    if (!flat_.has_full_grad()) return;
    early_reduced_ = true;
    early_grad_ = flat_.full_grad();
    early_held_ = flat_.full_grad_bytes();
    early_sent_ = 0;
    flat_.free_full_grad();
    flat_.alloc_full_grad(runtime_.pool());
    runtime_.track_grad_buffers(flat_.full_grad_bytes());
  }
  if (early_grad_.defined()) reduce_early_piece();
}

// The next piece of the early part: the same slice of every rank's shard ([Note: split root
// reduction], "in pieces"). One piece reads the buffer itself; more are copied out of it, and the
// buffer goes once the last is.
void Unit::reduce_early_piece() {
  const int pieces = runtime_.root_reduction_chunks();
  const int64_t shard = flat_.shard_numel();
  const int64_t begin = shard * early_sent_ / pieces;
  const int64_t end = shard * (early_sent_ + 1) / pieces;
  ++early_sent_;
  set_context(pieces == 1 ? "backward gradient reduction (the root's early part)"
                          : ("backward gradient reduction (the root's early part, piece " +
                             std::to_string(early_sent_) + " of " + std::to_string(pieces) + ")")
                                .c_str());
  const at::Tensor region =
      early_grad_.view({flat_.shard_count(), shard}).narrow(1, begin, end - begin);
  const int64_t owned = reduces_in_place(region) ? static_cast<int64_t>(region.nbytes()) : 0;
  early_held_ -= owned;
  runtime_.enqueue_early_piece(make_reduction(region, begin, owned));
  if (early_sent_ == pieces) release_early();
}

// Drops the early part's buffer: every piece has been sent (or a backward that threw left it).
void Unit::release_early() {
  runtime_.track_grad_buffers(-early_held_);
  early_held_ = 0;
  early_grad_.reset();
}

// The rest of a split reduction: sent as its nonzero rows (the batch's tokens' rows of an
// embedding) when that is less than half a reduce-scatter's traffic, else reduced whole. Decided
// afresh every step from that step's gradients alone, so that a run resumed from a checkpoint
// sums in the same order as the run that wrote it.
void Unit::reduce_late() {
  const double dense_bytes = static_cast<double>(flat_.padded_numel()) *
                             static_cast<double>(dtype_size(runtime_.options().reduce_dtype_)) / 2;
  set_context("backward gradient reduction (nonzero rows)");
  if (!reduce_nonzero_rows(runtime_.world(), flat_.full_grad(), late_row_,
                           flat_.shard_rank() * flat_.shard_numel(), flat_.shard_numel(),
                           runtime_.world().size(), dense_bytes, flat_.grad_shard())) {
    reduce_gradients();
    return;
  }
  runtime_.track_grad_buffers(-flat_.full_grad_bytes());
  flat_.free_full_grad();
}

void Unit::finish_backward() {
  if (in_backward_ && !post_backward_done_) post_backward();
  // A buffer kept past backward (no_sync) is what the parameters' .grad show: zero where no
  // gradient came.
  flat_.complete_full_grad();
  reshard();
  in_backward_ = false;
  forwarded_ = false;
  inputs_pending_ = 0;
  inputs_hooked_ = false;
}

}  // namespace fsdp
