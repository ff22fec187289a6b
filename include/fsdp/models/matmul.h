// The families' matrix products (projections, GPT-2's Conv1D, LoRA's branches, explicit
// attention), and how they compute in bf16 on a CPU. LibTorch's bf16 GEMM is fast only where
// oneDNN runs it (CPUs with AVX-512 BW, VL and DQ, oneDNN on); on every other x86-64 CPU (AVX2
// only, or oneDNN off) ATen's fallback loops run it about 20 times slower than fp32's GEMM
// (2.2-3.7 against 33-79 GFLOP/s on one AMD EPYC core, LibTorch 2.14.1). There, bf16 products
// compute as fp32 GEMMs on the inputs converted, the result rounded to bf16 once: the arithmetic a
// bf16 GEMM does (fp32 products and sums, one rounding), in another order. One autograd node keeps
// the bf16 inputs, as the native product does (no fp32 copy of a weight lives past its product),
// and computes the input's and the weight's gradients the same way. Other dtypes, devices and
// CPUs call ATen's op unchanged.
#pragma once

#include <ATen/core/Tensor.h>

namespace fsdp {

// Which bf16 CPU products go through fp32 GEMMs. kAuto (the default): where ATen would not use
// oneDNN (the CPU lacks AVX-512 BW, VL or DQ, or at::globalContext().userEnabledMkldnn() is
// false). kNative: never (ATen's own kernel). kFp32: always. Process-wide; tests set it.
enum class CpuBf16Matmul { kAuto, kNative, kFp32 };
void set_cpu_bf16_matmul(CpuBf16Matmul mode);
CpuBf16Matmul cpu_bf16_matmul();

// Whether a product of bf16 CPU tensors like `t` goes through fp32 here and now.
bool bf16_matmul_through_fp32(const at::Tensor& t);

// x [..., in] times weight [out, in] transposed, plus bias [out] when defined: at::linear.
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});

// a [..., n, k] times b [..., k, m], both of the same dimensions (no broadcasting of one over
// the other's batch): at::matmul.
at::Tensor matmul(const at::Tensor& a, const at::Tensor& b);

}  // namespace fsdp
