// Causal self-attention (fsdp/models/attention.h): the kernel choice and both paths. Whether the
// fused kernel exists is compat.h's to say.
#include "fsdp/models/attention.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "compat.h"
#include "fsdp/models/matmul.h"

namespace fsdp {
namespace {

// [T, T]: true where position t may not see s: the future, and (window > 0) what lies window or
// more positions back.
at::Tensor hidden_positions(int64_t T, int64_t window, const at::TensorOptions& like) {
  const at::Tensor ones = at::ones({T, T}, like.dtype(at::kBool));
  at::Tensor hidden = ones.triu(1);
  if (window > 0) hidden = hidden.logical_or(ones.tril(-window));
  return hidden;
}

// hidden_positions, and for packed rows also every key of another sequence: [B, 1, T, T].
at::Tensor hidden_keys(int64_t T, const AttentionOptions& o, const at::TensorOptions& like) {
  const at::Tensor hidden = hidden_positions(T, o.window, like);
  if (!o.same_sequence.defined()) return hidden;
  return o.same_sequence.logical_not().logical_or(hidden);
}

at::Tensor explicit_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     bool softmax_in_fp32, const AttentionOptions& o) {
  const int64_t T = q.size(-2);
  // [B, nh, T, T]; HF's eager paths divide (GPT-2, Llama) or multiply by a given scaling (Gemma).
  at::Tensor att = o.scale > 0 ? fsdp::matmul(q, k.transpose(-2, -1)) * o.scale
                               : fsdp::matmul(q, k.transpose(-2, -1)) /
                                     std::sqrt(static_cast<double>(q.size(-1)));
  att = att.masked_fill(hidden_keys(T, o, q.options()), -std::numeric_limits<double>::infinity());
  att =
      softmax_in_fp32 ? at::softmax(att, -1, at::kFloat).to(q.scalar_type()) : at::softmax(att, -1);
  return fsdp::matmul(att, v);
}

}  // namespace

SequenceLayout packed_layout(const at::Tensor& positions, c10::Device device,
                             bool within_sequences) {
  if (positions.dim() != 2 || positions.scalar_type() != at::kLong) {
    throw std::invalid_argument("packed_layout: positions must be [B, T] int64, got " +
                                std::to_string(positions.dim()) + "-D " +
                                std::string(c10::toString(positions.scalar_type())));
  }
  SequenceLayout layout;
  layout.positions = positions.to(at::kCPU);
  if (!within_sequences) return layout;
  const int64_t T = positions.size(1);
  // A sequence number per token: how many starts lie at or before it (the first token's counts
  // as none, as in transformers, whatever its position).
  at::Tensor starts = at::zeros_like(layout.positions);
  if (T > 1) {
    starts.narrow(1, 1, T - 1)
        .copy_(
            layout.positions.narrow(1, 1, T - 1).sub(layout.positions.narrow(1, 0, T - 1)).ne(1));
  }
  const at::Tensor sequence = starts.cumsum(1).to(device);  // [B, T]
  layout.same_sequence = sequence.unsqueeze(2).eq(sequence.unsqueeze(1)).unsqueeze(1);
  return layout;
}

void check_layout(const SequenceLayout& layout, const at::Tensor& idx, int64_t max_positions,
                  const std::string& who) {
  const int64_t B = idx.size(0), T = idx.size(1);
  const at::Tensor& p = layout.positions;
  if (p.defined()) {
    if (p.dim() != 2 || p.size(0) != B || p.size(1) != T || p.scalar_type() != at::kLong) {
      throw std::invalid_argument(who + ": positions must be int64 of the ids' shape [" +
                                  std::to_string(B) + ", " + std::to_string(T) + "]");
    }
    if (p.numel() > 0 &&
        (p.min().item<int64_t>() < 0 || p.max().item<int64_t>() >= max_positions)) {
      throw std::invalid_argument(who + ": positions outside [0, " + std::to_string(max_positions) +
                                  "), the context length");
    }
  }
  const at::Tensor& m = layout.same_sequence;
  if (m.defined() && (m.dim() != 4 || m.size(0) != B || m.size(1) != 1 || m.size(2) != T ||
                      m.size(3) != T || m.scalar_type() != at::kBool)) {
    throw std::invalid_argument(who + ": the sequence mask must be bool [B, 1, T, T]");
  }
}

bool attention_kernel_available(AttentionKernel kernel) {
  return kernel != AttentionKernel::kFused || compat::kHasFusedAttention;
}

bool runs_fused(AttentionKernel kernel) {
  return kernel == AttentionKernel::kFused ||
         (kernel == AttentionKernel::kAuto && compat::kHasFusedAttention);
}

void check_attention_kernel(AttentionKernel kernel, const std::string& field) {
  if (!attention_kernel_available(kernel)) {
    throw std::invalid_argument(field + " = fused needs LibTorch 2.0 or later (this is " +
                                TORCH_VERSION + "); use auto or explicit");
  }
}

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            AttentionKernel kernel, bool softmax_in_fp32,
                            const AttentionOptions& options) {
  if (!runs_fused(kernel)) return explicit_causal_attention(q, k, v, softmax_in_fp32, options);
  if (options.scale <= 0 && options.window <= 0 && !options.same_sequence.defined()) {
    return compat::fused_causal_attention(q, k, v);
  }
  const double scale =
      options.scale > 0 ? options.scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  // The kernels take the positions each query may see.
  const at::Tensor visible = hidden_keys(q.size(-2), options, q.options()).logical_not();
  return compat::fused_masked_attention(q, k, v, visible, scale);
}

}  // namespace fsdp
