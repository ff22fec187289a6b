// The root's gradient reduction in two parts (docs/design.md, [Note: split root reduction]): the
// autograd graph walk that finds where a tied parameter's gradient is final early, and the
// reduction of a gradient buffer that is mostly zero as its nonzero rows.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "fsdp/comm.h"

namespace torch {
namespace autograd {
struct Node;
}
}  // namespace torch

namespace fsdp {

// Adds a gradient into its parameter's gradient buffer; false when the parameter has none.
using GradSink = std::function<bool(const at::Tensor& grad)>;

// The backward nodes, reachable from `outputs` without passing a node for which `boundary` is
// true, that send a gradient to one of `accumulators` (a parameter's gradient accumulator, mapped
// to where its gradients go) while the same accumulator also gets a gradient from a node beyond
// such a boundary: the early uses of a parameter used on both sides (the output projection of tied
// embeddings, whose other use is the lookup at the bottom of the model). A hook on each puts the
// early gradient into the parameter's buffer itself and sends none on, so that what the
// accumulator sums at the end is the late use's alone. Call it once forward is done.
void intercept_early_uses(
    const std::vector<at::Tensor>& outputs,
    const std::unordered_map<const torch::autograd::Node*, GradSink>& accumulators,
    const std::function<bool(const torch::autograd::Node*)>& boundary);

// A sum over `comm`'s ranks of a flat gradient `grad` (padded_numel elements, the same on every
// rank) of which this rank needs elements [begin, begin + count), sent as its nonzero rows of
// `row` elements. Each rank's nonzero rows are all-gathered with their indices and the rows that
// meet [begin, begin + count) are added, in fp32, into `out` (fp32, `count` elements) after
// dividing by `divisor`. Returns false, having sent only the row counts, when the rows would be
// more traffic than `dense_bytes`: the caller then reduces `grad` whole.
bool reduce_nonzero_rows(Comm& comm, const at::Tensor& grad, int64_t row, int64_t begin,
                         int64_t count, double divisor, double dense_bytes, const at::Tensor& out);

}  // namespace fsdp
