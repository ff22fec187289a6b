// The two halves of the split root reduction (core/split_reduce.h): intercepting a tied
// parameter's early gradient in the autograd graph, and reducing a mostly-zero gradient as rows.
#include "core/split_reduce.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>

#include <algorithm>
#include <unordered_set>
#include <utility>

#include "core/check.h"
#include "core/collectives.h"

namespace fsdp {
namespace {

using torch::autograd::Node;
using torch::autograd::variable_list;

// On an early use's node: its gradients for the listed outputs go into their parameters' buffer
// here (where the accumulator would have put them), and on to the accumulator as nothing.
// Adding into the buffer the unit holds when the node runs keeps the sum right in any order the
// engine picks; a parameter without a buffer (not expected: the unit's pre-backward attached it)
// is left to autograd.
struct EarlyUseHook : public torch::autograd::FunctionPostHook {
  explicit EarlyUseHook(std::vector<std::pair<size_t, GradSink>> uses) : uses_(std::move(uses)) {}
  variable_list operator()(const variable_list& outputs, const variable_list& /*inputs*/) override {
    variable_list out = outputs;
    at::NoGradGuard no_grad;
    for (auto& [index, sink] : uses_) {
      if (index >= out.size() || !out[index].defined()) continue;
      if (sink(out[index])) out[index] = at::Tensor();
    }
    return out;
  }
  std::vector<std::pair<size_t, GradSink>> uses_;
};

// Indices of the rows of `body` with an element that is not zero (NaN and inf included, for the
// loss scaler to see). A row's sum of absolute values is zero exactly when every element is: no
// term is negative, so nothing cancels, and the rounded sum is at least the largest term. NaN and
// inf stay in it. A plain sum runs about four times as fast as `ne(0).any(1)`
// (33 against 8 ms for GPT-2's 156 MB embedding on one Zen 5 core, LibTorch 1.13), whose boolean
// reduction is not vectorised, and this scan is on the compute thread every step. A block of rows
// at a time keeps the scratch small next to the gradient.
at::Tensor nonzero_rows(const at::Tensor& body) {
  constexpr int64_t kBlockElements = int64_t{1} << 20;
  const int64_t rows = body.size(0), block = std::max<int64_t>(1, kBlockElements / body.size(1));
  std::vector<at::Tensor> found;
  for (int64_t r = 0; r < rows; r += block) {
    const int64_t n = std::min(block, rows - r);
    found.push_back(body.narrow(0, r, n).abs().sum(1).ne(0).nonzero().view({-1}) + r);
  }
  return found.empty() ? at::empty({0}, body.options().dtype(at::kLong)) : at::cat(found);
}

// One rank's rows (index -1: padding) added, divided by `divisor`, into `out`, elements
// [begin, begin + out.numel()) of the flat gradient. A rank's indices are distinct, so each
// index_add_ writes every element at most once: the same sums in the same order on every device.
// Rows inside the range go through a view of `out` as whole rows; the at most two that straddle
// its ends, one at a time.
void add_rows(const at::Tensor& index, const at::Tensor& rows, int64_t row, int64_t begin,
              double divisor, const at::Tensor& out) {
  const int64_t end = begin + out.numel();
  const int64_t inner_first = (begin + row - 1) / row, inner_last = end / row;  // [first, last)
  const at::Tensor inner =
      index.ge(inner_first).logical_and(index.lt(inner_last)).nonzero().view({-1});
  if (inner.numel() > 0 && inner_last > inner_first) {
    out.narrow(0, inner_first * row - begin, (inner_last - inner_first) * row)
        .view({-1, row})
        .index_add_(0, index.index_select(0, inner) - inner_first,
                    rows.index_select(0, inner).to(at::kFloat).div_(divisor));
  }
  // The rows holding `begin` and `end`, when they are not whole inside: one row when the range
  // lies within it.
  const int64_t before = inner_first - 1;
  for (const int64_t edge : {before, inner_last}) {
    const bool straddles = edge >= 0 && edge * row < end && edge * row + row > begin &&
                           (edge * row < begin || edge * row + row > end);
    if (!straddles || (edge == inner_last && inner_last == before)) continue;
    const at::Tensor at_edge = index.eq(edge).nonzero().view({-1});
    if (at_edge.numel() == 0) continue;
    const int64_t lo = std::max(begin, edge * row), hi = std::min(end, edge * row + row);
    const at::Tensor part =
        rows.select(0, at_edge.item<int64_t>()).narrow(0, lo - edge * row, hi - lo);
    out.narrow(0, lo - begin, hi - lo).add_(part.to(at::kFloat).div(divisor));
  }
}

template <typename Visit>
void walk(std::vector<Node*> stack, std::unordered_set<Node*>& seen, Visit visit) {
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    if (!seen.insert(node).second) continue;
    for (const auto& edge : node->next_edges()) {
      Node* next = edge.function.get();
      if (next != nullptr && visit(next)) stack.push_back(next);
    }
  }
}

}  // namespace

void intercept_early_uses(const std::vector<at::Tensor>& outputs,
                          const std::unordered_map<const Node*, GradSink>& accumulators,
                          const std::function<bool(const Node*)>& boundary) {
  // The nodes reachable from the outputs without crossing a boundary, and the boundaries met.
  std::vector<Node*> roots, boundaries;
  for (const auto& t : outputs) {
    if (t.defined() && t.grad_fn()) roots.push_back(t.grad_fn().get());
  }
  std::unordered_set<Node*> before;
  walk(roots, before, [&](Node* next) {
    if (accumulators.count(next)) return false;
    if (boundary(next)) {
      boundaries.push_back(next);
      return false;
    }
    return true;
  });
  if (boundaries.empty()) return;
  // Everything beyond a boundary runs after it; a node also reachable from the outputs directly
  // (a skip connection around the units) is one of them, since it waits for all its inputs.
  std::unordered_set<Node*> beyond;
  std::unordered_set<const Node*> late;  // accumulators a node beyond a boundary sends to
  walk(boundaries, beyond, [&](Node* next) {
    if (!accumulators.count(next)) return true;
    late.insert(next);
    return false;
  });
  for (Node* node : before) {
    if (beyond.count(node)) continue;
    std::vector<std::pair<size_t, GradSink>> uses;
    const auto& edges = node->next_edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      const Node* next = edges[i].function.get();
      if (late.count(next)) uses.emplace_back(i, accumulators.at(next));
    }
    if (!uses.empty()) node->add_post_hook(std::make_unique<EarlyUseHook>(std::move(uses)));
  }
}

bool reduce_nonzero_rows(Comm& comm, const at::Tensor& grad, int64_t row, int64_t begin,
                         int64_t count, double divisor, double dense_bytes, const at::Tensor& out) {
  FSDP_CHECK(row > 0 && grad.dim() == 1 && out.scalar_type() == at::kFloat,
             "reduce_nonzero_rows: a flat gradient, positive row length and an fp32 output");
  at::NoGradGuard no_grad;
  const int64_t n = grad.numel(), full_rows = n / row, tail = n - full_rows * row;
  const at::Tensor body = grad.narrow(0, 0, full_rows * row).view({full_rows, row});
  at::Tensor index = nonzero_rows(body);
  at::Tensor rows = body.index_select(0, index);
  if (tail > 0 && grad.narrow(0, full_rows * row, tail).ne(0).any().item<bool>()) {
    at::Tensor last = at::zeros({1, row}, grad.options());
    last.narrow(1, 0, tail).copy_(grad.narrow(0, full_rows * row, tail));
    rows = at::cat({rows, last});
    index = at::cat({index, at::full({1}, full_rows, index.options())});
  }
  const int world = comm.size();
  const at::TensorOptions long_opts = index.options();
  at::Tensor counts = at::empty({world}, long_opts);
  all_gather(comm, at::full({1}, rows.size(0), long_opts), counts)->wait();
  const int64_t most = counts.max().item<int64_t>();
  const double row_bytes = static_cast<double>(row) * static_cast<double>(grad.element_size()) + 8;
  if (static_cast<double>(world) * static_cast<double>(most) * row_bytes > dense_bytes)
    return false;
  if (most == 0) return true;
  // Padded to the longest list; padding rows carry index -1 and are dropped below.
  at::Tensor my_rows = at::zeros({most, row}, grad.options());
  at::Tensor my_index = at::full({most}, -1, long_opts);
  my_rows.narrow(0, 0, rows.size(0)).copy_(rows);
  my_index.narrow(0, 0, index.size(0)).copy_(index);
  at::Tensor all_rows = at::empty({world * most, row}, grad.options());
  at::Tensor all_index = at::empty({world * most}, long_opts);
  WorkPtr gathered = all_gather(comm, my_index, all_index);
  all_gather(comm, my_rows, all_rows)->wait();
  gathered->wait();
  for (int r = 0; r < world; ++r) {
    add_rows(all_index.narrow(0, r * most, most), all_rows.narrow(0, r * most, most), row, begin,
             divisor, out);
  }
  return true;
}

}  // namespace fsdp
