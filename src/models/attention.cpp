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

at::Tensor explicit_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     bool softmax_in_fp32) {
  const int64_t T = q.size(-2);
  // [B, nh, T, T]
  at::Tensor att = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  at::Tensor future = at::ones({T, T}, q.options().dtype(at::kBool)).triu(1);
  att = att.masked_fill(future, -std::numeric_limits<double>::infinity());
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
                            AttentionKernel kernel, bool softmax_in_fp32) {
  if (runs_fused(kernel)) return compat::fused_causal_attention(q, k, v);
  return explicit_causal_attention(q, k, v, softmax_in_fp32);
}

}  // namespace fsdp
