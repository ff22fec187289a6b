// The head and its cross entropy fused and chunked over rows (fsdp/models/fused_loss.h).
#include "fsdp/models/fused_loss.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace fsdp {
namespace {

constexpr int64_t kIgnoreIndex = -100;  // at::cross_entropy_loss's default
constexpr int64_t kChunkBytes = int64_t{64} << 20;

// Calls fn(first row, rows) for each chunk of n rows.
template <typename Fn>
void for_each_chunk(int64_t n, int64_t chunk, Fn fn) {
  for (int64_t r = 0; r < n; r += chunk) fn(r, std::min(chunk, n - r));
}

struct LinearCrossEntropy : public torch::autograd::Function<LinearCrossEntropy> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& hidden,
                            const at::Tensor& weight, const at::Tensor& targets, bool mean,
                            int64_t chunk) {
    const at::Tensor valid = targets.ne(kIgnoreIndex);
    const at::Tensor index = targets.masked_fill(valid.logical_not(), 0);
    const at::TensorOptions fp32 = hidden.options().dtype(at::kFloat);
    at::Tensor lse = at::empty({hidden.size(0)}, fp32), picked = at::empty({hidden.size(0)}, fp32);
    for_each_chunk(hidden.size(0), chunk, [&](int64_t r, int64_t rows) {
      const at::Tensor logits = at::matmul(hidden.narrow(0, r, rows), weight.t()).to(at::kFloat);
      lse.narrow(0, r, rows).copy_(at::logsumexp(logits, {1}));
      picked.narrow(0, r, rows)
          .copy_(logits.gather(1, index.narrow(0, r, rows).unsqueeze(1)).squeeze(1));
    });
    const at::Tensor count = mean ? valid.sum().to(at::kFloat) : at::ones({}, fp32);
    ctx->save_for_backward({hidden, weight, index, valid, lse, count});
    ctx->saved_data["chunk"] = chunk;
    return ((lse - picked) * valid).sum() / count;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &hidden = saved[0], &weight = saved[1], &index = saved[2], &lse = saved[4];
    const at::Tensor scale = (grads[0] / saved[5] * saved[3]).unsqueeze(1);  // 0 where ignored
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    at::Tensor grad_hidden = at::empty_like(hidden);
    at::Tensor grad_weight = at::zeros(weight.sizes(), weight.options().dtype(at::kFloat));
    for_each_chunk(hidden.size(0), chunk, [&](int64_t r, int64_t rows) {
      const at::Tensor h = hidden.narrow(0, r, rows);
      at::Tensor g = at::matmul(h, weight.t()).to(at::kFloat);
      g.sub_(lse.narrow(0, r, rows).unsqueeze(1)).exp_();  // softmax, from the saved log-sum-exp
      g.scatter_add_(1, index.narrow(0, r, rows).unsqueeze(1),
                     at::full({rows, 1}, -1.0, g.options()));
      g.mul_(scale.narrow(0, r, rows));
      const at::Tensor rounded = g.to(hidden.scalar_type());  // as the unfused logits' gradient
      grad_hidden.narrow(0, r, rows).copy_(at::matmul(rounded, weight));
      grad_weight.add_(at::matmul(rounded.t(), h));
    });
    return {grad_hidden, grad_weight.to(weight.scalar_type()), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

int64_t linear_cross_entropy_chunk_rows(int64_t vocab_size) {
  return std::max<int64_t>(1, kChunkBytes / (std::max<int64_t>(1, vocab_size) * 4));
}

at::Tensor linear_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight,
                                const at::Tensor& targets, bool mean, int64_t chunk_rows) {
  if (hidden.dim() != 2 || weight.dim() != 2 || hidden.size(1) != weight.size(1) ||
      targets.dim() != 1 || targets.size(0) != hidden.size(0)) {
    throw std::invalid_argument(
        "linear_cross_entropy: expects hidden [N, C], weight [V, C] and targets [N]; got " +
        std::to_string(hidden.dim()) + "-D, " + std::to_string(weight.dim()) + "-D and " +
        std::to_string(targets.dim()) + "-D");
  }
  const int64_t chunk =
      chunk_rows > 0 ? chunk_rows : linear_cross_entropy_chunk_rows(weight.size(0));
  return LinearCrossEntropy::apply(hidden, weight, targets, mean, chunk);
}

}  // namespace fsdp
