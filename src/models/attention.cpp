// Causal self-attention (fsdp/models/attention.h): the kernel choice and both paths. Whether the
// fused kernel exists is compat.h's to say.
#include "fsdp/models/attention.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "compat.h"

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

at::Tensor explicit_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     bool softmax_in_fp32, const AttentionOptions& o) {
  const int64_t T = q.size(-2);
  // [B, nh, T, T]; HF's eager paths divide (GPT-2, Llama) or multiply by a given scaling (Gemma).
  at::Tensor att =
      o.scale > 0 ? at::matmul(q, k.transpose(-2, -1)) * o.scale
                  : at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  att = att.masked_fill(hidden_positions(T, o.window, q.options()),
                        -std::numeric_limits<double>::infinity());
  att =
      softmax_in_fp32 ? at::softmax(att, -1, at::kFloat).to(q.scalar_type()) : at::softmax(att, -1);
  return at::matmul(att, v);
}

}  // namespace

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
  if (options.scale <= 0 && options.window <= 0) return compat::fused_causal_attention(q, k, v);
  const double scale =
      options.scale > 0 ? options.scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  // The kernels take the positions each query may see.
  const at::Tensor visible =
      hidden_positions(q.size(-2), options.window, q.options()).logical_not();
  return compat::fused_masked_attention(q, k, v, visible, scale);
}

}  // namespace fsdp
