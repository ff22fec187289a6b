// Causal self-attention for the models: which kernel computes it, and the one function both models
// call. The explicit path (softmax(QK^T / sqrt(d)) V, written out) is the reference that the fused
// one is tested against, and LibTorch 1.13's only path; at::scaled_dot_product_attention (2.0 and
// later) runs fused kernels (flash or memory-efficient on CUDA, a blocked one on CPU) that never
// hold the [T, T] score matrix.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace fsdp {

enum class AttentionKernel {
  kAuto,      // kFused where the LibTorch has it (2.0 and later), else kExplicit
  kFused,     // at::scaled_dot_product_attention; asking for it on LibTorch 1.13 is an error
  kExplicit,  // the written-out reference
};

// Whether this LibTorch can run `kernel` (all but kFused on 1.13); the check throws
// std::invalid_argument naming `field` where it cannot.
bool attention_kernel_available(AttentionKernel kernel);
// Whether `kernel` runs the fused path on this LibTorch: kFused, or kAuto where it is available.
bool runs_fused(AttentionKernel kernel);
void check_attention_kernel(AttentionKernel kernel, const std::string& field);

// What differs from plain causal attention (Gemma 3): scores multiplied by `scale` (0: divided by
// sqrt(hs)), and position t attending only to t - window < s <= t (0: every s <= t).
struct AttentionOptions {
  double scale = 0;
  int64_t window = 0;
};

// q, k, v [B, nh, T, hs] -> [B, nh, T, hs]: position t attends to positions <= t, scores scaled
// by 1/sqrt(hs), no dropout. softmax_in_fp32: the explicit path takes the softmax in fp32 and
// casts back (Llama, as HF's eager path); otherwise in the inputs' dtype (GPT-2). The fused
// kernels accumulate in fp32 whatever the flag.
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            AttentionKernel kernel, bool softmax_in_fp32,
                            const AttentionOptions& options = {});

}  // namespace fsdp
