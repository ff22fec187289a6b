// Causal self-attention for the models: which kernel computes it, and the one function both models
// call. The explicit path (softmax(QK^T / sqrt(d)) V, written out) is the reference that the fused
// one is tested against, and LibTorch 1.13's only path; at::scaled_dot_product_attention (2.0 and
// later) runs fused kernels (flash or memory-efficient on CUDA, a blocked one on CPU) that never
// hold the [T, T] score matrix.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

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

// How a batch's rows hold their sequences. Default (both undefined): one sequence a row, at
// positions 0..T-1. Packed (instruction fine-tuning): several sequences a row, each starting again
// at position 0, and each token attending only to earlier tokens of its own sequence.
struct SequenceLayout {
  at::Tensor positions;      // [B, T] int64 on the CPU; undefined: 0..T-1 in every row
  at::Tensor same_sequence;  // [B, 1, T, T] bool on the compute device: query and key in one
                             // sequence; undefined: attention across the whole row
};

// The layout of rows whose `positions` [B, T] restart for each packed sequence. A sequence starts
// wherever a position is not its predecessor's plus one, transformers' rule
// (find_packed_sequence_indices), so that the same position ids give the same mask there and
// here. within_sequences false: the positions only, attention across the packed sequences.
SequenceLayout packed_layout(const at::Tensor& positions, c10::Device device,
                             bool within_sequences = true);

// Throws std::invalid_argument, naming `who`, unless `layout` suits the token ids `idx` [B, T]:
// positions of idx's shape, each in [0, max_positions), and a mask of [B, 1, T, T].
void check_layout(const SequenceLayout& layout, const at::Tensor& idx, int64_t max_positions,
                  const std::string& who);

// What differs from plain causal attention: scores multiplied by `scale` (0: divided by sqrt(hs);
// Gemma 3), position t attending only to t - window < s <= t (0: every s <= t; Gemma 3), and only
// to its own sequence where `same_sequence` ([B, 1, T, T], SequenceLayout) is defined.
struct AttentionOptions {
  double scale = 0;
  int64_t window = 0;
  at::Tensor same_sequence;
};

// q, k, v [B, nh, T, hs] -> [B, nh, T, hs]: position t attends to positions <= t, scores scaled
// by 1/sqrt(hs), no dropout. softmax_in_fp32: the explicit path takes the softmax in fp32 and
// casts back (Llama, as HF's eager path); otherwise in the inputs' dtype (GPT-2). The fused
// kernels accumulate in fp32 whatever the flag.
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            AttentionKernel kernel, bool softmax_in_fp32,
                            const AttentionOptions& options = {});

}  // namespace fsdp
