// The language-model head and its cross entropy in one step that never holds the whole logits:
// for a chunk of rows at a time, logits = hidden x weight^T, then their log-sum-exp and the
// target's logit, and (while the chunk's logits are at hand) softmax minus one-hot straight into
// the gradients of the hidden states and of the weight, which backward scales by its upstream
// gradient ([Note: gradients in forward] in the .cpp; fp16 recomputes each chunk in backward
// instead). At a 128,256-token vocabulary and 16,384 rows (batch 8 x 2048) the unfused path holds
// 2.1 G logits (4.2 GB in bf16) and their gradient; this one holds `chunk_rows` x V at a time
// (their fp32 copy, and below fp32 the matmul's output or the rounded gradient) and the weight's
// gradient, which the unfused head's backward makes too.
//
// The numbers are the unfused path's (the head's matmul, then gpt2_loss): logits in the inputs'
// dtype, the loss's arithmetic in fp32, the logits' gradient rounded to the inputs' dtype once
// before the two matmuls of backward; the weight's gradient is summed over the chunks in its own
// dtype (below fp32, rounded once a chunk where the unfused matmul rounds once).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace fsdp {

// What a model's forward takes to return its loss instead of its logits (the head and the cross
// entropy fused: linear_cross_entropy): targets [B, T] (-100: ignored), and whether the loss is
// their mean or their sum. Passed inside the root module's forward, so that the head's weight is
// still gathered there and gathered again for the loss's backward.
struct LossTargets {
  at::Tensor targets;
  bool mean = true;
};

// Rows of logits a chunk of `rows` holds: at most those whose fp32 copy fits 64 MiB on the CPU,
// 512 MiB on a GPU (`gpu`: where the head's matmuls want about a thousand rows; at least one row,
// from 128 on a multiple of 128), and the rows split evenly into as few chunks as that allows
// (1,024 rows at GPT-2's 50,257 tokens on the CPU: 4 chunks of 256, not 333, 333, 333 and 25).
int64_t linear_cross_entropy_chunk_rows(int64_t vocab_size, int64_t rows, bool gpu = false);

// Cross entropy of the logits hidden [N, C] x weight [V, C]^T against targets [N] (int64, -100:
// ignored), over the targets that count: their mean (`mean`) or their sum (0 when none counts).
// hidden and weight share a floating dtype and device. chunk_rows 0: the default above for
// the inputs' device.
// Differentiable in hidden and weight (a tied head passes the embedding).
at::Tensor linear_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight,
                                const at::Tensor& targets, bool mean, int64_t chunk_rows = 0);

}  // namespace fsdp
