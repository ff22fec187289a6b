// The Llama block's element-wise layers, each as one autograd node with a written-out backward:
// RMSNorm, the gated feed-forward's activation (SwiGLU, GeGLU) and the rotary embedding. Written as
// ATen's composite ops, RMSNorm alone is eight kernels forward and more backward and keeps an fp32
// copy of its input, its square and its normalised output for backward; on an H200 the 1B Llama's
// step spent a quarter of its kernel time in such element-wise kernels (bench/NOTES.md). Fused, a
// node keeps only its inputs (and RMSNorm a number per row) and runs one kernel forward and one or
// two backward: on a GPU CUDA's (fused_kernels.cu), on the CPU loops over rows for RMSNorm and the
// rotation (fused_kernels_cpu.cpp); the gated activation on the CPU is ATen's vectorised ops, with
// autograd's own arithmetic.
//
// The numbers: forward rounds where HF's eager modules round (the normalised value before the
// weight, the activation before the product, each of the rotation's products before their sum),
// so it equals the composite ops to within their sums' order and CUDA's exp and tanh (the CPU's
// gated activation bit for bit). Backward computes in fp32 and rounds once to the inputs' dtype,
// where autograd through the composite ops rounds every intermediate gradient: below fp32 the
// fused gradients are the more exact ones (tests/test_fused_ops.cpp). The backward is not itself
// differentiable (no second derivatives: create_graph needs `fused` false). `fused` false runs the
// composite ops (HF's modules written out), the reference.
#pragma once

#include <ATen/core/Tensor.h>

namespace fsdp {

// HF's LlamaRMSNorm over the last dimension: x in fp32 times rsqrt(mean(x^2) + eps), cast back to
// x's dtype, times weight. offset (Gemma's): times (1 + weight) in fp32, then cast back. The fused
// node needs x and weight of one floating dtype; others run the composite ops.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, bool offset,
                    bool fused);

// The gated feed-forward's activation: act(gate) * up, act SiLU (Llama's SwiGLU) or the
// tanh-approximated GELU (Gemma's GeGLU).
enum class GateActivation { kSilu, kGeluTanh };
at::Tensor gated_activation(const at::Tensor& gate, const at::Tensor& up, GateActivation act,
                            bool fused);
// The same over one projection's output whose last dimension holds the gate, then up (Phi-3's
// gate_up_proj): its gradient is one tensor, not two halves stitched together in backward.
at::Tensor gated_activation(const at::Tensor& gate_up, GateActivation act, bool fused);

// HF's apply_rotary_pos_emb on the first rd channels of each head, the rest passed: x [B, T, H, D]
// (heads not yet moved to dimension 1), cos and sin [B or 1, T, rd] in x's dtype and device, rd
// even and at most D. y = x * cos + rotate_half(x) * sin, rotate_half pairing channel i with
// i + rd / 2.
at::Tensor rotary_embedding(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                            bool fused);

}  // namespace fsdp
