// CUDA kernels of the fused element-wise nodes (fsdp/models/fused_ops.h), launched through
// fused_kernels_launch.h. Arithmetic in fp32; forward rounds to the storage dtype where HF's eager
// modules round (RMSNorm's normalised value before the weight, the activation before the product,
// each of the rotation's two products before their sum), so that forward matches the composite ops
// to their own rounding; backward rounds once, at its outputs. Memory-bound kernels: one pass over
// the inputs each, rows spread over blocks and columns over threads.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "models/fused_kernels_launch.h"

namespace fsdp {
namespace detail {
namespace {

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_f(float v);
template <>
__device__ __forceinline__ float from_f<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_f<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// v rounded to T and back: what an eager op that stores T hands the next one.
template <typename T>
__device__ __forceinline__ float rounded(float v) {
  return to_f(from_f<T>(v));
}

// The sum of v over the block, in every thread; blockDim.x a multiple of 32, at most 1024.
__device__ float block_sum(float v) {
  __shared__ float partial[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (blockDim.x <= 32) return v;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // a previous call's readers are done with `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? partial[lane] : 0.f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Threads per row of `cols`: a warp for a head's 64 or 128 channels (Qwen3's q/k norms), up to
// 256 for a residual stream's thousands.
int row_threads(int64_t cols) {
  if (cols <= 128) return 32;
  if (cols <= 512) return 128;
  return 256;
}

// --- RMSNorm ---------------------------------------------------------------------------------

template <typename T>
__global__ void rms_norm_forward_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                        T* __restrict__ y, float* __restrict__ rstd, int64_t rows,
                                        int64_t cols, float eps, bool offset) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    T* yr = y + row * cols;
    float ss = 0.f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float v = to_f(xr[j]);
      ss += v * v;
    }
    const float r = rsqrtf(block_sum(ss) / static_cast<float>(cols) + eps);
    if (threadIdx.x == 0) rstd[row] = r;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float h = to_f(xr[j]) * r;
      yr[j] = offset ? from_f<T>(h * (1.f + to_f(w[j]))) : from_f<T>(to_f(w[j]) * rounded<T>(h));
    }
  }
}

// dx = r dh - r^3 x mean(dh x), dh = dy w' (w' = w, or 1 + w with the offset).
template <typename T>
__global__ void rms_norm_dx_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                   const T* __restrict__ w, const float* __restrict__ rstd,
                                   T* __restrict__ dx, int64_t rows, int64_t cols, bool offset) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    const T* gr = dy + row * cols;
    const float r = rstd[row];
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float wj = offset ? 1.f + to_f(w[j]) : to_f(w[j]);
      s += to_f(gr[j]) * wj * to_f(xr[j]);
    }
    const float k = r * r * r * block_sum(s) / static_cast<float>(cols);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float wj = offset ? 1.f + to_f(w[j]) : to_f(w[j]);
      dx[row * cols + j] = from_f<T>(r * to_f(gr[j]) * wj - to_f(xr[j]) * k);
    }
  }
}

constexpr int kColsPerBlock = 32, kRowLanes = 8;

// dw's partial sums: block (32, 8) sums 32 columns over the rows of its part (blockIdx.y), into
// parts[blockIdx.y][column]; the host sums the parts. h as forward scaled it (rounded first
// without the offset).
template <typename T>
__global__ void rms_norm_dw_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                   const float* __restrict__ rstd, float* __restrict__ parts,
                                   int64_t rows, int64_t cols, bool offset) {
  __shared__ float sums[kRowLanes][kColsPerBlock + 1];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kColsPerBlock + threadIdx.x;
  float acc = 0.f;
  if (col < cols) {
    for (int64_t row = static_cast<int64_t>(blockIdx.y) * kRowLanes + threadIdx.y; row < rows;
         row += static_cast<int64_t>(gridDim.y) * kRowLanes) {
      const float h = to_f(x[row * cols + col]) * rstd[row];
      acc += to_f(dy[row * cols + col]) * (offset ? h : rounded<T>(h));
    }
  }
  sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.f;
    for (int i = 0; i < kRowLanes; ++i) total += sums[i][threadIdx.x];
    parts[static_cast<int64_t>(blockIdx.y) * cols + col] = total;
  }
}

// --- gated activation ------------------------------------------------------------------------

// ATen's constants and formulas for GELU's tanh form and SiLU (their CUDA kernels in fp32).
constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kKappa = 0.044715f;

__device__ __forceinline__ float act(float v, bool gelu) {
  if (gelu) return 0.5f * v * (1.f + tanhf(kBeta * (v + kKappa * v * v * v)));
  return v / (1.f + expf(-v));
}

__device__ __forceinline__ float act_derivative(float v, bool gelu) {
  if (gelu) {
    const float t = tanhf(kBeta * (v + kKappa * v * v * v));
    return 0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * kBeta * (1.f + 3.f * kKappa * v * v);
  }
  const float s = 1.f / (1.f + expf(-v));
  return s * (1.f + v * (1.f - s));
}

// Rows over blockIdx.y (strided), columns over the threads of blockIdx.x.
template <typename T>
__global__ void gated_forward_kernel(const T* __restrict__ gate, int64_t gate_stride,
                                     const T* __restrict__ up, int64_t up_stride, T* __restrict__ y,
                                     int64_t rows, int64_t cols, bool gelu) {
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < cols;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const float a = rounded<T>(act(to_f(gate[row * gate_stride + j]), gelu));
      y[row * cols + j] = from_f<T>(a * to_f(up[row * up_stride + j]));
    }
  }
}

template <typename T>
__global__ void gated_backward_kernel(const T* __restrict__ dy, const T* __restrict__ gate,
                                      int64_t gate_stride, const T* __restrict__ up,
                                      int64_t up_stride, T* __restrict__ dgate,
                                      int64_t dgate_stride, T* __restrict__ dup, int64_t dup_stride,
                                      int64_t rows, int64_t cols, bool gelu) {
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < cols;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const float g = to_f(dy[row * cols + j]);
      const float v = to_f(gate[row * gate_stride + j]);
      const float u = to_f(up[row * up_stride + j]);
      dup[row * dup_stride + j] = from_f<T>(g * rounded<T>(act(v, gelu)));
      dgate[row * dgate_stride + j] = from_f<T>(g * u * act_derivative(v, gelu));
    }
  }
}

// --- rotary embedding ------------------------------------------------------------------------

// Rows (b, t) over blockIdx.y, a row's H * D channels over the threads. Forward, channel d < rd
// of a head: x_d cos_d + rot_d sin_d with rot = (-x2, x1) over the halves; backward, the
// transpose: g_d cos_d + g_(d+h) sin_(d+h) in the first half, g_d cos_d - g_(d-h) sin_(d-h) in the
// second. Channels from rd on pass.
template <typename T>
__global__ void rotary_kernel(const T* __restrict__ x, const T* __restrict__ cos,
                              const T* __restrict__ sin, T* __restrict__ y, int64_t B, int64_t T_,
                              int64_t H, int64_t D, int64_t rd, int64_t cos_batch, bool backward) {
  const int64_t width = H * D, half = rd / 2;
  for (int64_t bt = blockIdx.y; bt < B * T_; bt += gridDim.y) {
    const int64_t b = bt / T_, t = bt % T_;
    const int64_t table_row = ((cos_batch == 1 ? 0 : b) * T_ + t) * rd;
    const T* c = cos + table_row;
    const T* s = sin + table_row;
    const T* xr = x + bt * width;
    T* yr = y + bt * width;
    for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < width;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const int64_t d = j % D;
      if (d >= rd) {
        yr[j] = xr[j];
        continue;
      }
      const float v = to_f(xr[j]);
      if (!backward) {
        const float rot = d < half ? -to_f(xr[j + half]) : to_f(xr[j - half]);
        yr[j] = from_f<T>(rounded<T>(v * to_f(c[d])) + rounded<T>(rot * to_f(s[d])));
      } else {
        const float other = d < half ? to_f(xr[j + half]) * to_f(s[d + half])
                                     : -to_f(xr[j - half]) * to_f(s[d - half]);
        yr[j] = from_f<T>(v * to_f(c[d]) + other);
      }
    }
  }
}

// --- launches --------------------------------------------------------------------------------

constexpr int64_t kMaxGridY = 65535;
constexpr int64_t kMaxRowBlocks = int64_t{1} << 20;

dim3 elementwise_grid(int64_t rows, int64_t cols, int threads) {
  const int64_t col_blocks = std::min<int64_t>((cols + threads - 1) / threads, 64);
  return dim3(static_cast<unsigned>(col_blocks),
              static_cast<unsigned>(std::min<int64_t>(rows, kMaxGridY)));
}

template <typename Fn>
cudaError_t by_dtype(KernelDtype dtype, Fn fn) {
  switch (dtype) {
    case KernelDtype::kFloat:
      fn(float{});
      break;
    case KernelDtype::kHalf:
      fn(__half{});
      break;
    case KernelDtype::kBFloat16:
      fn(__nv_bfloat16{});
      break;
  }
  return cudaGetLastError();
}

}  // namespace

int64_t rms_norm_weight_parts(int64_t rows) {
  // About 64 rows a part (8 a lane), at most 512 parts: the host's sum over parts stays small.
  return std::max<int64_t>(1, std::min<int64_t>((rows + 63) / 64, 512));
}

cudaError_t launch_rms_norm_forward(KernelDtype dtype, const void* x, const void* w, void* y,
                                    float* rstd, int64_t rows, int64_t cols, float eps, bool offset,
                                    cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const int threads = row_threads(cols);
  const auto blocks = static_cast<unsigned>(std::min(rows, kMaxRowBlocks));
  return by_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    rms_norm_forward_kernel<T>
        <<<blocks, threads, 0, stream>>>(static_cast<const T*>(x), static_cast<const T*>(w),
                                         static_cast<T*>(y), rstd, rows, cols, eps, offset);
  });
}

cudaError_t launch_rms_norm_backward(KernelDtype dtype, const void* dy, const void* x,
                                     const void* w, const float* rstd, void* dx, float* dw_parts,
                                     int64_t parts, int64_t rows, int64_t cols, bool offset,
                                     cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const int threads = row_threads(cols);
  const auto blocks = static_cast<unsigned>(std::min(rows, kMaxRowBlocks));
  const dim3 dw_grid(static_cast<unsigned>((cols + kColsPerBlock - 1) / kColsPerBlock),
                     static_cast<unsigned>(parts));
  return by_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    rms_norm_dx_kernel<T><<<blocks, threads, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(w), rstd,
        static_cast<T*>(dx), rows, cols, offset);
    rms_norm_dw_kernel<T><<<dw_grid, dim3(kColsPerBlock, kRowLanes), 0, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), rstd, dw_parts, rows, cols, offset);
  });
}

cudaError_t launch_gated_forward(KernelDtype dtype, const void* gate, int64_t gate_stride,
                                 const void* up, int64_t up_stride, void* y, int64_t rows,
                                 int64_t cols, bool gelu, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  constexpr int threads = 256;
  const dim3 grid = elementwise_grid(rows, cols, threads);
  return by_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    gated_forward_kernel<T><<<grid, threads, 0, stream>>>(static_cast<const T*>(gate), gate_stride,
                                                          static_cast<const T*>(up), up_stride,
                                                          static_cast<T*>(y), rows, cols, gelu);
  });
}

cudaError_t launch_gated_backward(KernelDtype dtype, const void* dy, const void* gate,
                                  int64_t gate_stride, const void* up, int64_t up_stride,
                                  void* dgate, int64_t dgate_stride, void* dup, int64_t dup_stride,
                                  int64_t rows, int64_t cols, bool gelu, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  constexpr int threads = 256;
  const dim3 grid = elementwise_grid(rows, cols, threads);
  return by_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    gated_backward_kernel<T><<<grid, threads, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(gate), gate_stride,
        static_cast<const T*>(up), up_stride, static_cast<T*>(dgate), dgate_stride,
        static_cast<T*>(dup), dup_stride, rows, cols, gelu);
  });
}

cudaError_t launch_rotary(KernelDtype dtype, const void* x, const void* cos, const void* sin,
                          void* y, int64_t B, int64_t T, int64_t H, int64_t D, int64_t rd,
                          int64_t cos_batch, bool backward, cudaStream_t stream) {
  if (B * T * H * D == 0) return cudaSuccess;
  constexpr int threads = 256;
  const dim3 grid = elementwise_grid(B * T, H * D, threads);
  return by_dtype(dtype, [&](auto tag) {
    using E = decltype(tag);
    rotary_kernel<E><<<grid, threads, 0, stream>>>(
        static_cast<const E*>(x), static_cast<const E*>(cos), static_cast<const E*>(sin),
        static_cast<E*>(y), B, T, H, D, rd, cos_batch, backward);
  });
}

}  // namespace detail
}  // namespace fsdp
