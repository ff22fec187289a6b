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
// A chunk's fp32 logits at most: on the CPU 64 MiB (its matmuls are compute-bound from about a
// hundred rows; fewer bytes, a lower peak). On a GPU 512 MiB: each chunk's weight-gradient GEMM
// reads and writes the whole V x C gradient, so at 128 rows it is memory-bound (an H200, 128,256
// tokens: 172 TFLOP/s, 25 of a 233 ms step); about 1,000 rows make it compute-bound.
constexpr int64_t kCpuChunkBytes = int64_t{64} << 20;
constexpr int64_t kGpuChunkBytes = int64_t{512} << 20;
// A chunk of at least this many rows is a multiple of it: a GPU's matmul computes rows in tiles
// of 64 or 128, and 130 rows (64 MiB at 128,256 tokens) would run a second, nearly empty tile.
constexpr int64_t kRowTile = 128;

// Calls fn(first row, rows) for each chunk of n rows.
template <typename Fn>
void for_each_chunk(int64_t n, int64_t chunk, Fn fn) {
  for (int64_t r = 0; r < n; r += chunk) fn(r, std::min(chunk, n - r));
}

// What the loss's gradient needs of a forward: the rows' clamped targets, which count, and their
// log-sum-exp; `scale` is d loss / d (each row's loss): 0 where ignored, 1 / count for a mean.
struct Rows {
  at::Tensor hidden, weight, index, lse, scale;
};

// The gradients of hidden and weight, accumulated chunk by chunk: each chunk's softmax times its
// rows' scale, minus the scale at the targets, is the logits' gradient, rounded once to the inputs'
// dtype as the unfused one is, then its two matmuls; the weight's gradient summed into one tensor
// of its own dtype (addmm with beta 1: below fp32 one rounding a chunk, as Liger Kernel's fused
// loss does; an fp32 sum would hold a second V x h tensor, twice the size, at the step's peak).
struct Gradients {
  at::Tensor hidden, weight;
};
Gradients zero_gradients(const Rows& rows) {
  return {at::empty_like(rows.hidden), at::zeros_like(rows.weight)};
}
// `scaled_softmax` (fp32, the chunk's own: made in place) and `scale` [n, 1] as above.
void add_chunk_gradient(const Rows& rows, int64_t r, int64_t n, at::Tensor scaled_softmax,
                        const at::Tensor& scale, Gradients& into) {
  at::Tensor& g = scaled_softmax;
  g.scatter_add_(1, rows.index.narrow(0, r, n).unsqueeze(1), scale.neg());
  const at::Tensor h = rows.hidden.narrow(0, r, n);
  const at::Tensor rounded = g.to(rows.hidden.scalar_type());
  into.hidden.narrow(0, r, n).copy_(at::matmul(rounded, rows.weight));
  into.weight.addmm_(rounded.t(), h);
}

// The chunk's logits in fp32 (the matmul in the inputs' dtype, as the unfused head's).
at::Tensor chunk_logits(const Rows& rows, int64_t r, int64_t n) {
  return at::matmul(rows.hidden.narrow(0, r, n), rows.weight.t()).to(at::kFloat);
}

// [Note: gradients in forward] The head is the model's last operation and its backward the first,
// so the loss's gradient taken in forward, from the logits forward has in hand, costs no memory at
// the step's peak that backward would not hold then anyway (the weight's gradient and the hidden
// states'), and saves the head's matmul a recomputation (a third of its FLOPs; for GPT-2
// 124M, about a tenth of the step's). Backward then only scales them by the upstream gradient.
// Not in fp16: its loss scaling must multiply the logits' gradient before it is rounded to fp16,
// or the small entries flush to zero; there backward recomputes each chunk with the upstream
// gradient in hand.
bool gradients_in_forward(const at::Tensor& hidden) { return hidden.scalar_type() != at::kHalf; }

struct LinearCrossEntropy : public torch::autograd::Function<LinearCrossEntropy> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& hidden,
                            const at::Tensor& weight, const at::Tensor& targets, bool mean,
                            int64_t chunk, bool wants_grad) {
    const at::Tensor valid = targets.ne(kIgnoreIndex);
    const at::TensorOptions fp32 = hidden.options().dtype(at::kFloat);
    const at::Tensor count = mean ? valid.sum().to(at::kFloat) : at::ones({}, fp32);
    Rows rows{hidden, weight, targets.masked_fill(valid.logical_not(), 0),
              at::empty({hidden.size(0)}, fp32), valid.to(at::kFloat) / count};
    at::Tensor picked = at::empty({hidden.size(0)}, fp32);
    const bool eager = wants_grad && gradients_in_forward(hidden);
    Gradients grads;
    if (eager) grads = zero_gradients(rows);
    for_each_chunk(hidden.size(0), chunk, [&](int64_t r, int64_t n) {
      at::Tensor logits = chunk_logits(rows, r, n);
      picked.narrow(0, r, n).copy_(
          logits.gather(1, rows.index.narrow(0, r, n).unsqueeze(1)).squeeze(1));
      // The log-sum-exp from exp(logits - max) made in place, which is also the softmax's
      // numerator: one exp over the chunk serves the loss and its gradient.
      // amax, not max: max also finds each row's index (one CPU thread: 11 against 1.8 ms a
      // 256 x 50,257 chunk).
      const at::Tensor row_max = at::amax(logits, 1, /*keepdim=*/true);
      at::Tensor& shifted = logits.sub_(row_max).exp_();
      const at::Tensor sum = shifted.sum(1, /*keepdim=*/true);
      rows.lse.narrow(0, r, n).copy_((row_max + sum.log()).squeeze(1));
      if (!eager) return;
      const at::Tensor scale = rows.scale.narrow(0, r, n).unsqueeze(1);
      add_chunk_gradient(rows, r, n, shifted.mul_(scale / sum), scale, grads);
    });
    if (wants_grad) {
      // Views of tensors that live on anyway, and [N] vectors: what a recomputation needs.
      ctx->save_for_backward({hidden, weight, rows.index, rows.lse, rows.scale});
      ctx->saved_data["chunk"] = chunk;
    }
    if (eager) {
      // Not saved variables: backward takes them over and scales them in place, so that no
      // second V x C tensor exists at the step's peak.
      ctx->saved_data["grad_hidden"] = grads.hidden;
      ctx->saved_data["grad_weight"] = grads.weight;
    }
    return ((rows.lse - picked) * valid).sum() / count;  // the unfused loss's grouping
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list upstream) {
    const auto saved = ctx->get_saved_variables();
    const Rows rows{saved[0], saved[1], saved[2], saved[3], saved[4]};
    Gradients grads;
    auto& data = ctx->saved_data;
    if (data.count("grad_weight")) {  // taken in forward; a second backward recomputes
      grads = {data["grad_hidden"].toTensor(), data["grad_weight"].toTensor()};
      data.erase("grad_hidden");
      data.erase("grad_weight");
      grads.hidden.mul_(upstream[0]);
      grads.weight.mul_(upstream[0]);
    } else {
      grads = zero_gradients(rows);
      for_each_chunk(rows.hidden.size(0), data["chunk"].toInt(), [&](int64_t r, int64_t n) {
        const at::Tensor scale = rows.scale.narrow(0, r, n).unsqueeze(1) * upstream[0];
        at::Tensor g = chunk_logits(rows, r, n);
        g.sub_(rows.lse.narrow(0, r, n).unsqueeze(1)).exp_().mul_(scale);
        add_chunk_gradient(rows, r, n, std::move(g), scale, grads);
      });
    }
    return {grads.hidden, grads.weight, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

int64_t linear_cross_entropy_chunk_rows(int64_t vocab_size, int64_t rows, bool gpu) {
  const int64_t budget = gpu ? kGpuChunkBytes : kCpuChunkBytes;
  int64_t most = std::max<int64_t>(1, budget / (std::max<int64_t>(1, vocab_size) * 4));
  if (most >= kRowTile) most -= most % kRowTile;
  const int64_t n = std::max<int64_t>(1, rows);
  const int64_t chunks = (n + most - 1) / most;
  return (n + chunks - 1) / chunks;
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
  const int64_t chunk = chunk_rows > 0 ? chunk_rows
                                       : linear_cross_entropy_chunk_rows(
                                             weight.size(0), hidden.size(0), hidden.is_cuda());
  const bool wants_grad =
      at::GradMode::is_enabled() && (hidden.requires_grad() || weight.requires_grad());
  return LinearCrossEntropy::apply(hidden, weight, targets, mean, chunk, wants_grad);
}

}  // namespace fsdp
