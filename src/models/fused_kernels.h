// A device's kernels for the fused element-wise nodes (fsdp/models/fused_ops.h): one table per
// device type, for fp32, fp16 and bf16. The CPU's is in fused_kernels_cpu.cpp; the CUDA build's in
// fused_kernels_cuda.cpp (its kernels in fused_kernels.cu), and every other build links
// fused_kernels_none.cpp, which has none. Where a table or one of its entries is missing (another
// dtype, device or operation), the node computes with ATen's ops. The node checks shapes and
// dtypes before it calls a kernel: rows contiguous in the last dimension, as each entry says.
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
  // dy [R, F] contiguous; writes d gate and d up into dgate and dup ([R, F], rows contiguous, any
  // row stride).
  void (*gated_backward)(const at::Tensor& dy, const at::Tensor& gate, const at::Tensor& up,
                         bool gelu, const at::Tensor& dgate, const at::Tensor& dup);
  // x [B, T, H, D] contiguous, cos and sin [B or 1, T, rd] contiguous in x's dtype -> the rotated
  // x (backward: the rotation's transpose applied to a gradient).
  at::Tensor (*rotary)(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                       bool backward);
};

const FusedKernels* cpu_fused_kernels();
const FusedKernels* cuda_fused_kernels();  // nullptr in a build without CUDA

}  // namespace detail
}  // namespace fsdp
