// Forward hooks for C++ modules: the one seam between a model and the sharding runtime.
//
// LibTorch's C++ modules have no forward hooks, and a parent calls its children through typed
// members, so a wrapper cannot be swapped in behind a model's back. Instead a model calls the
// blocks it wants to be shardable through `fsdp::forward(block, args...)`. With no hooks
// registered for `block` this is exactly `block->forward(args...)` (one hash lookup); once the
// model is sharded, the runtime's pre-forward gathers the block's parameters and its post-forward
// may release them and wrap the outputs for backward. The model never sees FSDP internals.
// A checkpointed unit's forward runs through an autograd function that keeps only its inputs and
// runs the forward again in backward (docs/design.md, [Note: activation checkpointing]); a unit
// with frozen parameters sees its tensor arguments go through an identity node whose backward
// tells it when their gradients are known ([Note: frozen parameters]).
//
// Thread-safety: hooks are registered and removed while no forward runs.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace torch {
namespace nn {
class Module;
}
}  // namespace torch

namespace fsdp {

class ModuleHooks {
 public:
  virtual ~ModuleHooks() = default;
  virtual void pre_forward() = 0;
  // Receives the module's tensor outputs and returns the tensors the caller will see.
  virtual std::vector<at::Tensor> post_forward(std::vector<at::Tensor> outputs) = 0;
  // Activation checkpointing: when true (and grad mode is on), the module's forward runs without
  // keeping activations, and again in backward (see detail::run_checkpointed).
  virtual bool checkpointed() const { return false; }
  // When true (and grad mode is on), the module's tensor arguments go through
  // pre_forward_inputs, after pre_forward, and the module receives what it returns.
  virtual bool wraps_inputs() const { return false; }
  virtual std::vector<at::Tensor> pre_forward_inputs(std::vector<at::Tensor> inputs) {
    return inputs;
  }
};

// Replaces any hooks registered for `module`; a null `hooks` removes them.
void set_module_hooks(const torch::nn::Module* module, std::shared_ptr<ModuleHooks> hooks);
ModuleHooks* find_module_hooks(const torch::nn::Module* module);

namespace detail {
template <typename T>
struct IsTensorTuple : std::false_type {};
template <typename... T>
struct IsTensorTuple<std::tuple<T...>>
    : std::conjunction<std::is_same<std::decay_t<T>, at::Tensor>...> {};

// A module's output (a Tensor, a vector or a tuple of Tensors) as a vector, and back.
template <typename Out>
std::vector<at::Tensor> to_tensors(Out out) {
  if constexpr (std::is_same_v<Out, at::Tensor>) {
    return {std::move(out)};
  } else if constexpr (std::is_same_v<Out, std::vector<at::Tensor>>) {
    return out;
  } else {
    static_assert(
        IsTensorTuple<Out>::value,
        "fsdp::forward: a hooked module must return a Tensor, a vector or a tuple of Tensors");
    return std::apply([](auto&... t) { return std::vector<at::Tensor>{t...}; }, out);
  }
}

template <typename Out>
Out from_tensors(std::vector<at::Tensor> flat) {
  if constexpr (std::is_same_v<Out, at::Tensor>) {
    return flat[0];
  } else if constexpr (std::is_same_v<Out, std::vector<at::Tensor>>) {
    return flat;
  } else {
    Out out;
    size_t i = 0;
    std::apply([&](auto&... t) { ((t = flat[i++]), ...); }, out);
    return out;
  }
}

template <typename Out>
Out run_post_forward(ModuleHooks& hooks, Out out) {
  return from_tensors<Out>(hooks.post_forward(to_tensors(std::move(out))));
}

// Activation checkpointing. `recompute` maps the module's tensor arguments to its outputs; it runs
// once without grad now and again, with grad, when backward reaches the outputs (which then
// backpropagates through the recomputed graph). The CPU generator's state is restored for the
// second run, so random draws (dropout) repeat. Implemented in src/core/hooks.cpp.
bool grad_enabled();  // at::GradMode, without its header here
using Recompute = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;
std::vector<at::Tensor> run_checkpointed(Recompute recompute, std::vector<at::Tensor> inputs);

template <typename A>
constexpr bool kIsTensor = std::is_same_v<std::decay_t<A>, at::Tensor>;

// For each argument, its index among the tensor arguments (unused for the others).
template <typename... A>
constexpr std::array<size_t, sizeof...(A)> tensor_slots() {
  std::array<size_t, sizeof...(A)> slots{};
  size_t k = 0, n = 0;
  ((slots[k++] = kIsTensor<A> ? n++ : 0), ...);
  return slots;
}

template <size_t I, typename Tuple>
decltype(auto) argument(Tuple& kept, const std::vector<at::Tensor>& tensors, size_t slot) {
  if constexpr (kIsTensor<std::tuple_element_t<I, Tuple>>) {
    return tensors[slot];
  } else {
    return std::get<I>(kept);
  }
}

// Calls impl.forward with the non-tensor arguments from `kept` and the tensor ones from `tensors`.
template <typename Impl, typename Tuple, size_t... I>
auto call_forward(Impl& impl, Tuple& kept, const std::vector<at::Tensor>& tensors,
                  std::index_sequence<I...>) {
  constexpr auto slots = tensor_slots<std::tuple_element_t<I, Tuple>...>();
  return impl.forward(argument<I>(kept, tensors, slots[I])...);
}

template <typename... Args>
std::vector<at::Tensor> tensor_arguments(const Args&... args) {
  std::vector<at::Tensor> tensors;
  (
      [&](const auto& a) {
        if constexpr (kIsTensor<decltype(a)>) tensors.push_back(a);
      }(args),
      ...);
  return tensors;
}

// `inputs` non-null: the tensor arguments go through its pre_forward_inputs first, outside the
// checkpoint (so that its node's backward follows the recomputation's).
template <typename Impl, typename... Args>
auto checkpointed_forward(Impl& impl, ModuleHooks* inputs, Args&&... args) {
  using Out = decltype(impl.forward(std::forward<Args>(args)...));
  std::vector<at::Tensor> tensors = tensor_arguments(args...);
  if (inputs != nullptr) tensors = inputs->pre_forward_inputs(std::move(tensors));
  // Non-tensor arguments are copied: the module runs again in backward, after the caller's
  // arguments are gone. Tensor slots of `kept` stay empty; the checkpoint saves the tensors.
  auto kept = std::make_shared<std::tuple<std::decay_t<Args>...>>(
      [](auto&& a) -> std::decay_t<decltype(a)> {
        if constexpr (kIsTensor<decltype(a)>) {
          return at::Tensor();
        } else {
          return a;
        }
      }(args)...);
  Recompute recompute = [&impl, kept](const std::vector<at::Tensor>& in) {
    return to_tensors(call_forward(impl, *kept, in, std::index_sequence_for<Args...>{}));
  };
  return from_tensors<Out>(run_checkpointed(std::move(recompute), std::move(tensors)));
}

// The module called with its tensor arguments replaced by what `hooks.pre_forward_inputs`
// returns for them; the other arguments as they came.
template <typename Impl, typename... Args>
auto forward_wrapping_inputs(ModuleHooks& hooks, Impl& impl, Args&&... args) {
  const std::vector<at::Tensor> tensors = hooks.pre_forward_inputs(tensor_arguments(args...));
  auto refs = std::forward_as_tuple(args...);
  return call_forward(impl, refs, tensors, std::index_sequence_for<Args...>{});
}
template <typename M, typename = void>
struct Dereferences : std::false_type {};
template <typename M>
struct Dereferences<M, std::void_t<decltype(*std::declval<M&>())>> : std::true_type {};

// The module `m` is or points to.
template <typename M>
auto& module_of(M& m) {
  if constexpr (std::is_base_of_v<torch::nn::Module, std::remove_cv_t<M>>) {
    return m;
  } else {
    static_assert(Dereferences<M>::value,
                  "fsdp::forward: the first argument must be a module (its Impl), a ModuleHolder "
                  "(e.g. `Linear`) or a std::shared_ptr to a module");
    return *m;
  }
}

}  // namespace detail

// `module` is a ModuleHolder (e.g. `Linear`), a std::shared_ptr to a module (a temporary one
// too, as `list->ptr<BlockImpl>(0)`), the module itself (`*holder`), or anything else whose
// operator* reaches a module with a forward().
template <typename M, typename... Args>
auto forward(M&& module, Args&&... args) {
  auto& impl = detail::module_of(module);
  ModuleHooks* hooks = find_module_hooks(static_cast<const torch::nn::Module*>(&impl));
  if (hooks == nullptr) return impl.forward(std::forward<Args>(args)...);
  hooks->pre_forward();
  const bool grad = detail::grad_enabled();
  ModuleHooks* inputs = hooks->wraps_inputs() && grad ? hooks : nullptr;
  if (hooks->checkpointed() && grad) {
    return detail::run_post_forward(
        *hooks, detail::checkpointed_forward(impl, inputs, std::forward<Args>(args)...));
  }
  if (inputs != nullptr) {
    return detail::run_post_forward(
        *hooks, detail::forward_wrapping_inputs(*hooks, impl, std::forward<Args>(args)...));
  }
  return detail::run_post_forward(*hooks, impl.forward(std::forward<Args>(args)...));
}

}  // namespace fsdp
