// Global-norm gradient clipping over shards: each rank's sum of squares, summed over the group
// across which the shards are disjoint, then torch::nn::utils::clip_grad_norm_'s scaling rule.
// Everything is accumulated in double, so that the norm, and with it the clipping factor, does not
// depend on how the gradients are sharded (LibTorch 1.13's fp32 norm of a 40M-element tensor is
// off by 3e-3 relative; its float64 one, and the sum of those over shards and ranks, by ~1e-15).
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "fsdp/optim.h"

namespace fsdp {
namespace {

// Elements converted to float64 at a time: bounds the temporary copy the float64 norm makes
// (8 MiB) whatever the shard's size, at a negligible cost in calls.
constexpr int64_t kChunk = int64_t{1} << 20;

// Sum of the squares of g's elements, accumulated in float64: each chunk's norm is taken in
// float64 (a float squared is exact in a double), and the chunks' squares are summed in double.
// The sum stays a tensor on g's device until the end: on a GPU a read per chunk would wait for the
// device each time.
double sum_of_squares(const at::Tensor& g) {
  const at::Tensor flat = g.reshape({-1});
  const at::Tensor sum = at::zeros({}, flat.options().dtype(at::kDouble));
  for (int64_t begin = 0; begin < flat.numel(); begin += kChunk) {
    const at::Tensor chunk = flat.narrow(0, begin, std::min(kChunk, flat.numel() - begin));
    const at::Tensor norm =
        at::linalg_vector_norm(chunk, 2, at::OptionalIntArrayRef{}, false, at::kDouble);
    sum.add_(norm * norm);
  }
  return sum.item<double>();
}

// The group's total of every rank's `mine`, in float64 (the Comm has no fp64 type: the values
// travel as their bits), summed in rank order so that every rank gets the same bits.
double sum_over_group(double mine, Comm& group) {
  int64_t bits = 0;
  std::memcpy(&bits, &mine, sizeof bits);
  std::vector<int64_t> all(static_cast<size_t>(group.size()));
  group.all_gather(&bits, all.data(), 1, DType::kInt64);
  double total = 0;
  for (int64_t b : all) {
    double v = 0;
    std::memcpy(&v, &b, sizeof v);
    total += v;
  }
  return total;
}

// This rank's sum of squared gradient elements, over all its shards.
double local_sum_of_squares(const std::vector<ShardedParam>& params) {
  double sum = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& g = params[i].grad;
    if (!g.defined() || g.scalar_type() != at::kFloat) {
      throw std::invalid_argument("clip_grad_norm: shard " + std::to_string(i) +
                                  " has no fp32 gradient");
    }
    if (g.numel() == 0) continue;
    sum += sum_of_squares(g);
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
  shard_group.set_context("clip_grad_norm: all_gather of the squared gradient norms");
  const double norm = std::sqrt(sum_over_group(local_sum_of_squares(params), shard_group));
  if (!std::isfinite(norm)) return norm;
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1) {
    for (const auto& s : params) s.grad.mul_(coef);
  }
  return norm;
}

}  // namespace fsdp
