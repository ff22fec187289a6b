// The CUDA table of fused_kernels.h: allocates the outputs on the tensors' device, launches the
// kernels of fused_kernels.cu on the current stream and turns a launch's error into an exception
// naming the kernel. Compiled in builds against a CUDA LibTorch only.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <stdexcept>
#include <string>

#include "models/fused_kernels.h"
#include "models/fused_kernels_launch.h"

namespace fsdp {
namespace detail {
namespace {

KernelDtype kernel_dtype(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return KernelDtype::kFloat;
    case at::kHalf:
      return KernelDtype::kHalf;
    case at::kBFloat16:
      return KernelDtype::kBFloat16;
    default:
      throw std::invalid_argument(std::string("fused kernels: no CUDA kernel for dtype ") +
                                  c10::toString(t.scalar_type()));
  }
}

void check(cudaError_t err, const char* kernel) {
  if (err != cudaSuccess) {
    // cudaGetLastError also reports an earlier kernel's asynchronous failure.
    throw std::runtime_error(std::string("fused kernels: ") + kernel +
                             " (or a kernel before it): " + cudaGetErrorString(err));
  }
}

cudaStream_t stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

std::pair<at::Tensor, at::Tensor> rms_norm_forward(const at::Tensor& x, const at::Tensor& w,
                                                   double eps, bool offset) {
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t rows = x.size(0), cols = x.size(1);
  at::Tensor y = at::empty_like(x);
  at::Tensor rstd = at::empty({rows}, x.options().dtype(at::kFloat));
  check(launch_rms_norm_forward(kernel_dtype(x), x.data_ptr(), w.data_ptr(), y.data_ptr(),
                                rstd.data_ptr<float>(), rows, cols, static_cast<float>(eps), offset,
                                stream()),
        "rms_norm_forward");
  return {y, rstd};
}

std::pair<at::Tensor, at::Tensor> rms_norm_backward(const at::Tensor& dy, const at::Tensor& x,
                                                    const at::Tensor& w, const at::Tensor& rstd,
                                                    bool offset) {
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t rows = x.size(0), cols = x.size(1);
  const int64_t parts = rms_norm_weight_parts(rows);
  at::Tensor dx = at::empty_like(x);
  at::Tensor dw_parts = at::empty({parts, cols}, x.options().dtype(at::kFloat));
  check(launch_rms_norm_backward(kernel_dtype(x), dy.data_ptr(), x.data_ptr(), w.data_ptr(),
                                 rstd.data_ptr<float>(), dx.data_ptr(), dw_parts.data_ptr<float>(),
                                 parts, rows, cols, offset, stream()),
        "rms_norm_backward");
  return {dx, rows == 0 ? at::zeros({cols}, dw_parts.options()) : dw_parts.sum(0)};
}

at::Tensor gated_forward(const at::Tensor& gate, const at::Tensor& up, bool gelu) {
  const c10::cuda::CUDAGuard guard(gate.device());
  const int64_t rows = gate.size(0), cols = gate.size(1);
  at::Tensor y = at::empty({rows, cols}, gate.options());
  check(launch_gated_forward(kernel_dtype(gate), gate.data_ptr(), gate.stride(0), up.data_ptr(),
                             up.stride(0), y.data_ptr(), rows, cols, gelu, stream()),
        "gated_forward");
  return y;
}

void gated_backward(const at::Tensor& dy, const at::Tensor& gate, const at::Tensor& up, bool gelu,
                    const at::Tensor& dgate, const at::Tensor& dup) {
  const c10::cuda::CUDAGuard guard(gate.device());
  check(launch_gated_backward(kernel_dtype(gate), dy.data_ptr(), gate.data_ptr(), gate.stride(0),
                              up.data_ptr(), up.stride(0), dgate.data_ptr(), dgate.stride(0),
                              dup.data_ptr(), dup.stride(0), gate.size(0), gate.size(1), gelu,
                              stream()),
        "gated_backward");
}

at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                  bool backward) {
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty_like(x);
  check(launch_rotary(kernel_dtype(x), x.data_ptr(), cos.data_ptr(), sin.data_ptr(), y.data_ptr(),
                      x.size(0), x.size(1), x.size(2), x.size(3), cos.size(2), cos.size(0),
                      backward, stream()),
        "rotary");
  return y;
}

const FusedKernels kCuda = {rms_norm_forward, rms_norm_backward, gated_forward, gated_backward,
                            rotary};

}  // namespace

const FusedKernels* cuda_fused_kernels() { return &kCuda; }

}  // namespace detail
}  // namespace fsdp
