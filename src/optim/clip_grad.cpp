// Global-norm gradient clipping over shards: each rank's sum of squares, summed over the group
// across which the shards are disjoint, then torch::nn::utils::clip_grad_norm_'s scaling rule.
#include <torch/torch.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "fsdp/optim.h"

namespace fsdp {
namespace {

// This rank's sum of squared gradient elements. Each shard's norm comes from torch's reduction
// (which accumulates fp32 in double on CPU); the squares are summed in double.
double local_sum_of_squares(const std::vector<ShardedParam>& params) {
  double sum = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& g = params[i].grad;
    if (!g.defined() || g.scalar_type() != at::kFloat) {
      throw std::invalid_argument("clip_grad_norm: shard " + std::to_string(i) +
                                  " has no fp32 gradient");
    }
    if (g.numel() == 0) continue;
    const double norm = g.norm().item<double>();
    sum += norm * norm;
  }
  return sum;
}

}  // namespace

double clip_grad_norm(const std::vector<ShardedParam>& params, double max_norm, Comm& shard_group) {
  if (!(max_norm > 0)) {
    throw std::invalid_argument("clip_grad_norm: max_norm must be positive, got " +
                                std::to_string(max_norm));
  }
  at::NoGradGuard no_grad;
  // The Comm has no fp64; one fp32 value keeps the norm to fp32 precision, as torch's fp32 norm.
  float sum = static_cast<float>(local_sum_of_squares(params));
  shard_group.set_context("clip_grad_norm: all_reduce of the squared gradient norm");
  shard_group.all_reduce(&sum, 1, DType::kFloat32, ReduceOp::kSum);
  const double norm = std::sqrt(static_cast<double>(sum));
  if (!std::isfinite(norm)) return norm;
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1) {
    for (const auto& s : params) s.grad.mul_(coef);
  }
  return norm;
}

}  // namespace fsdp
