// Activation checkpointing behind fsdp::forward (fsdp/hooks.h): an autograd function whose
// forward runs a module without recording its graph, keeping only the module's tensor inputs, and
// whose backward runs the module again with grad and backpropagates through that fresh graph (a
// nested, reentrant backward, like PyTorch's reentrant torch.utils.checkpoint). Parameter
// gradients land through their accumulators during the nested backward, so the sharding runtime's
// gradient hooks fire as they would without checkpointing.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <mutex>

#include "fsdp/hooks.h"

namespace fsdp {
namespace detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What backward needs besides the saved inputs: the module call and the generator state its
// first run started from.
struct Replay : torch::CustomClassHolder {
  Recompute recompute;
  at::Tensor rng_state;
};

at::Tensor cpu_rng_state() {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_cpu_rng_state(const at::Tensor& state) {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

struct Checkpoint : public torch::autograd::Function<Checkpoint> {
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs,
                               c10::intrusive_ptr<Replay> replay) {
    ctx->save_for_backward(inputs.vec());
    replay->rng_state = cpu_rng_state();
    ctx->saved_data["replay"] = c10::IValue::make_capsule(replay);
    return replay->recompute(inputs.vec());  // apply() runs this without grad
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto replay = c10::static_intrusive_pointer_cast<Replay>(ctx->saved_data["replay"].toCapsule());
    variable_list inputs;
    for (const at::Tensor& saved : ctx->get_saved_variables()) {
      inputs.push_back(saved.detach().requires_grad_(saved.requires_grad()));
    }
    const at::Tensor now = cpu_rng_state();
    set_cpu_rng_state(replay->rng_state);
    variable_list outputs;
    {
      at::AutoGradMode grad(true);
      outputs = replay->recompute(inputs);
    }
    set_cpu_rng_state(now);
    variable_list roots, root_grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].requires_grad() && grads[i].defined()) {
        roots.push_back(outputs[i]);
        root_grads.push_back(grads[i]);
      }
    }
    if (!roots.empty()) torch::autograd::backward(roots, root_grads);
    variable_list input_grads;
    for (const at::Tensor& in : inputs) {
      input_grads.push_back(in.requires_grad() ? in.grad() : at::Tensor());
    }
    input_grads.emplace_back();  // none for the replay
    return input_grads;
  }
};

}  // namespace

bool grad_enabled() { return at::GradMode::is_enabled(); }

std::vector<at::Tensor> run_checkpointed(Recompute recompute, std::vector<at::Tensor> inputs) {
  // With no input that requires grad, autograd would never call the checkpoint's backward, and
  // the module's parameters would get no gradient: run it plainly (no memory saved).
  bool any = false;
  for (const at::Tensor& t : inputs) any |= t.defined() && t.requires_grad();
  if (!any) return recompute(inputs);
  auto replay = c10::make_intrusive<Replay>();
  replay->recompute = std::move(recompute);
  return Checkpoint::apply(at::TensorList(inputs), replay);
}

}  // namespace detail
}  // namespace fsdp
