// The CUDA kernels' launchers (fused_kernels.cu), called by fused_kernels_cuda.cpp: raw pointers,
// sizes and a stream, so that nvcc compiles the kernels without LibTorch's headers. Each returns
// the launch's error (cudaSuccess when nothing was launched for an empty tensor). Tensors are the
// contiguous layouts fused_kernels.h names; `row_stride`s count elements.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fsdp {
namespace detail {

enum class KernelDtype { kFloat, kHalf, kBFloat16 };

cudaError_t launch_rms_norm_forward(KernelDtype dtype, const void* x, const void* w, void* y,
                                    float* rstd, int64_t rows, int64_t cols, float eps, bool offset,
                                    cudaStream_t stream);
// dx by rows; dw's partial sums [parts, cols] in fp32 (parts: rms_norm_weight_parts).
cudaError_t launch_rms_norm_backward(KernelDtype dtype, const void* dy, const void* x,
                                     const void* w, const float* rstd, void* dx, float* dw_parts,
                                     int64_t parts, int64_t rows, int64_t cols, bool offset,
                                     cudaStream_t stream);
int64_t rms_norm_weight_parts(int64_t rows);

cudaError_t launch_gated_forward(KernelDtype dtype, const void* gate, int64_t gate_stride,
                                 const void* up, int64_t up_stride, void* y, int64_t rows,
                                 int64_t cols, bool gelu, cudaStream_t stream);
cudaError_t launch_gated_backward(KernelDtype dtype, const void* dy, const void* gate,
                                  int64_t gate_stride, const void* up, int64_t up_stride,
                                  void* dgate, int64_t dgate_stride, void* dup, int64_t dup_stride,
                                  int64_t rows, int64_t cols, bool gelu, cudaStream_t stream);

// x and y [B, T, H, D]; cos and sin [cos_batch (1 or B), T, rd].
cudaError_t launch_rotary(KernelDtype dtype, const void* x, const void* cos, const void* sin,
                          void* y, int64_t B, int64_t T, int64_t H, int64_t D, int64_t rd,
                          int64_t cos_batch, bool backward, cudaStream_t stream);

}  // namespace detail
}  // namespace fsdp
