// Forward hooks for C++ modules: the one seam between a model and the sharding runtime.
//
// LibTorch's C++ modules have no forward hooks, and a parent calls its children through typed
// members, so a wrapper cannot be swapped in behind a model's back. Instead a model calls the
// blocks it wants to be shardable through `fsdp::forward(block, args...)`. With no hooks
// registered for `block` this is exactly `block->forward(args...)` (one hash lookup); once the
// model is sharded, the runtime's pre-forward gathers the block's parameters and its post-forward
// may release them and wrap the outputs for backward. The model never sees FSDP internals.
//
// Thread-safety: hooks are registered and removed while no forward runs.
#pragma once

#include <ATen/core/Tensor.h>

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

template <typename Out>
Out run_post_forward(ModuleHooks& hooks, Out out) {
  if constexpr (std::is_same_v<Out, at::Tensor>) {
    return hooks.post_forward({std::move(out)})[0];
  } else if constexpr (std::is_same_v<Out, std::vector<at::Tensor>>) {
    return hooks.post_forward(std::move(out));
  } else {
    static_assert(
        IsTensorTuple<Out>::value,
        "fsdp::forward: a hooked module must return a Tensor, a vector or a tuple of Tensors");
    std::vector<at::Tensor> flat =
        std::apply([](auto&... t) { return std::vector<at::Tensor>{t...}; }, out);
    flat = hooks.post_forward(std::move(flat));
    size_t i = 0;
    std::apply([&](auto&... t) { ((t = flat[i++]), ...); }, out);
    return out;
  }
}
}  // namespace detail

// `module` is a ModuleHolder (e.g. `Linear`), a std::shared_ptr to a module, or anything else
// whose operator-> reaches a module with a forward().
template <typename M, typename... Args>
auto forward(M& module, Args&&... args) {
  auto& impl = *module;
  ModuleHooks* hooks = find_module_hooks(static_cast<const torch::nn::Module*>(&impl));
  if (hooks == nullptr) return impl.forward(std::forward<Args>(args)...);
  hooks->pre_forward();
  return detail::run_post_forward(*hooks, impl.forward(std::forward<Args>(args)...));
}

}  // namespace fsdp
