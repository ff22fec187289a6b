// A device's kernels for the fused element-wise nodes (fsdp/models/fused_ops.h): one table per
// device type, looked up by the tensors' device. The CUDA build's table is in
// fused_kernels_cuda.cpp (its kernels in fused_kernels.cu); every other build links
// fused_kernels_none.cpp, whose lookup finds nothing, and the nodes compute with ATen's ops. The
// node checks shapes and dtypes before it calls a kernel: rows contiguous in the last dimension,
// the dtypes the node's comment names.
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

namespace fsdp {
namespace detail {

struct FusedKernels {
  // x [R, C] contiguous, weight [C] of x's dtype -> y [R, C], rstd [R] fp32.
  std::pair<at::Tensor, at::Tensor> (*rms_norm_forward)(const at::Tensor& x, const at::Tensor& w,
                                                        double eps, bool offset);
  // -> dx [R, C] in x's dtype, dw [C] in fp32 (the caller casts).
  std::pair<at::Tensor, at::Tensor> (*rms_norm_backward)(const at::Tensor& dy, const at::Tensor& x,
                                                         const at::Tensor& w,
                                                         const at::Tensor& rstd, bool offset);
  // gate, up [R, F], each row contiguous, any row stride -> act(gate) * up, [R, F] contiguous.
  at::Tensor (*gated_forward)(const at::Tensor& gate, const at::Tensor& up, bool gelu);
  // Writes d gate and d up into dgate and dup ([R, F], rows contiguous, any row stride).
  void (*gated_backward)(const at::Tensor& dy, const at::Tensor& gate, const at::Tensor& up,
                         bool gelu, const at::Tensor& dgate, const at::Tensor& dup);
  // x [B, T, H, D] contiguous, cos and sin [B or 1, T, rd] contiguous in x's dtype -> the rotated
  // x (backward: the rotation's transpose applied to a gradient).
  at::Tensor (*rotary)(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                       bool backward);
};

// The kernels for `device`'s type, or nullptr where this build has none.
const FusedKernels* fused_kernels(const c10::Device& device);

}  // namespace detail
}  // namespace fsdp
