// Where LibTorch 1.13 and 2.x differ, this header decides, so that no other file tests a version.
// Each difference is one small piece here: a base class, a constant, a function, each saying from
// which release it changed. Version macros come from torch/version.h; where a member's presence
// is the whole question (a c10d option added in some release), it is detected instead. Gloo's
// rendezvous API, which changes with the LibTorch it ships beside, is decided here too.
// Tested: LibTorch 1.13 (Debian 12), 2.6 (Debian 13), 2.14.1 (Debian sid).
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Allocator.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/version.h>

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

namespace fsdp::compat {

constexpr bool kTorch2 = TORCH_VERSION_MAJOR >= 2;

// c10::Allocator: allocate() lost its const in 2.3, and copy_data() (a pure virtual, used by
// clone()) arrived with it. Derive from this and implement allocate_block() instead.
class Allocator : public c10::Allocator {
 public:
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  c10::DataPtr allocate(size_t n) override { return allocate_block(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#else
  c10::DataPtr allocate(size_t n) const override {
    return const_cast<Allocator*>(this)->allocate_block(n);
  }
#endif

 protected:
  virtual c10::DataPtr allocate_block(size_t n) = 0;
};

// at::scaled_dot_product_attention arrived in 2.0 (fused flash / memory-efficient kernels on CUDA,
// a fused kernel on CPU); 1.13 has only the explicit softmax(QK^T)V path.
constexpr bool kHasFusedAttention = kTorch2;

// fp16 on the CPU: LibTorch 1.13 has no Half kernels for the CPU's matmul and layer norm
// ("addmm_impl_cpu_" not implemented for 'Half'); 2.x has them for every op the models use (the
// fp16 parity and trainer tests run on 2.6).
constexpr bool kHasCpuHalfKernels = kTorch2;

// Causal attention of q [B, nh, T, hs] over k, v of the same shape, scaled by 1/sqrt(hs), no
// dropout. Only where kHasFusedAttention; elsewhere it throws.
inline at::Tensor fused_causal_attention(const at::Tensor& q, const at::Tensor& k,
                                         const at::Tensor& v) {
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                          /*is_causal=*/true);
#else
  TORCH_CHECK(false, "at::scaled_dot_product_attention needs LibTorch 2.0 or later (this is ",
              TORCH_VERSION, ")");
#endif
}

// Attention of q [B, nh, T, hs] over k, v of the same shape where `visible` [T, T] (bool) is true,
// scores multiplied by `scale`, no dropout. The scale argument arrived in 2.1; only where
// kHasFusedAttention, and on 2.0 it throws.
inline at::Tensor fused_masked_attention(const at::Tensor& q, const at::Tensor& k,
                                         const at::Tensor& v, const at::Tensor& visible,
                                         double scale) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  return at::scaled_dot_product_attention(q, k, v, visible, /*dropout_p=*/0.0,
                                          /*is_causal=*/false, scale);
#else
  TORCH_CHECK(false,
              "a windowed or rescaled attention needs LibTorch 2.1 or later for its fused "
              "kernel (this is ",
              TORCH_VERSION, "); set model.attention explicit");
#endif
}

// AdamW in one multi-tensor kernel over lists of tensors (torch.optim.AdamW(fused=True)'s):
// at::_fused_adamw_ arrived in 2.0 for CUDA tensors (CPU ones in 2.4; the CPU keeps fsdp's own
// kernel, optim/adamw_fused.cpp). It reads the step from `steps` (fp32 tensors on the device, one
// per tensor) and does p *= 1 - lr * weight_decay, m and v, bias correction and the update per
// element in fp32. Only where kHasFusedAdamW; elsewhere it throws.
constexpr bool kHasFusedAdamW = kTorch2;

inline void fused_adamw(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                        at::TensorList exp_avg_sqs, at::TensorList steps, double lr, double beta1,
                        double beta2, double weight_decay, double eps) {
#if TORCH_VERSION_MAJOR >= 2
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr, beta1,
                    beta2, weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false);
#else
  TORCH_CHECK(false, "at::_fused_adamw_ needs LibTorch 2.0 or later (this is ", TORCH_VERSION, ")");
#endif
}

// A profiler event's duration: KinetoEvent::durationUs in 1.13, durationNs from 2.0.
template <class Event, class = void>
struct HasDurationNs : std::false_type {};
template <class Event>
struct HasDurationNs<Event, std::void_t<decltype(std::declval<const Event&>().durationNs())>>
    : std::true_type {};

template <class Event>
int64_t duration_ns(const Event& e) {
  if constexpr (HasDurationNs<Event>::value) {
    return static_cast<int64_t>(e.durationNs());
  } else {
    return static_cast<int64_t>(e.durationUs()) * 1000;
  }
}

// A parameter's own gradient hooks (Tensor::register_hook on a leaf) on `grad`, for a pre hook of
// its accumulator that takes the gradient over (the unit's gradient buffer): LibTorch 1.13 runs
// them inside AccumulateGrad::apply, after the pre hooks, so they are run here; 2.x runs them
// before any pre hook (the accumulator's tensor_pre_hooks), so `grad` has had them.
inline at::Tensor leaf_grad_hooks(const at::Tensor& param, at::Tensor grad) {
#if TORCH_VERSION_MAJOR >= 2
  (void)param;
  return grad;
#else
  return torch::autograd::AccumulateGrad::callHooks(param, std::move(grad));
#endif
}

// The handle on a parameter's gradient accumulator (an autograd Node): std::shared_ptr through
// the 2.x releases Debian 13 and the CUDA wheels carry, c10::intrusive_ptr in the newest (2.14).
using GradAccumulatorPtr =
    decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()));

// c10d's TCPStore (2.4 and later) serves through libuv unless told otherwise, and a LibTorch built
// without libuv (Debian 13's) then refuses to start: "use_libuv was requested but PyTorch was build
// without libuv support". The classic server works everywhere, so ask for it where the option
// exists (TCPStoreOptions::useLibUV, 2.2 and later).
template <class Options, class = void>
struct HasUseLibUV : std::false_type {};
template <class Options>
struct HasUseLibUV<Options, std::void_t<decltype(std::declval<Options&>().useLibUV)>>
    : std::true_type {};

template <class Options>
void use_classic_tcp_store(Options& options) {
  if constexpr (HasUseLibUV<Options>::value) options.useLibUV = false;
}

// Gloo's rendezvous (it travels with LibTorch, so its changes are ours too): PrefixStore and
// Context::connectFullMesh take a Store& in the snapshot Debian 12 and 13 ship, a
// std::shared_ptr<Store> in the one beside LibTorch 2.14. Templates, so that this header needs no
// Gloo headers; `store` must outlive `context` (the newer Gloo may keep it).
template <class PrefixStore, class Context, class Store, class Device>
void connect_full_mesh(Context& context, const std::string& prefix, Store& store, Device& device) {
  if constexpr (std::is_constructible_v<PrefixStore, const std::string&, Store&>) {
    PrefixStore prefixed(prefix, store);
    context.connectFullMesh(prefixed, device);
  } else {
    std::shared_ptr<Store> borrowed(&store, [](Store*) {});
    context.connectFullMesh(std::make_shared<PrefixStore>(prefix, borrowed), device);
  }
}

}  // namespace fsdp::compat
