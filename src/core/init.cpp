// Deferred parameters: releasing their bytes while keeping the TensorImpl the model holds.
// The storage object stays (empty), as in [Note: storage resize]; set_data later replaces it.
#include "fsdp/init.h"

#include <torch/nn/module.h>

namespace fsdp {

bool is_deferred(const at::Tensor& t) {
  return t.defined() && t.numel() > 0 &&
         t.storage().nbytes() < static_cast<size_t>(t.numel()) * t.element_size();
}

void defer_parameters(torch::nn::Module& module) {
  for (auto& p : module.parameters()) {
    if (is_deferred(p)) continue;
    // An empty storage with the parameter's sizes: set_data keeps p's identity and autograd
    // metadata, and the sizes still tell fully_shard the shape to lay out.
    at::Tensor empty = at::empty({0}, p.options().requires_grad(false));
    empty.unsafeGetTensorImpl()->set_sizes_contiguous(p.sizes());
    p.set_data(empty);
  }
}

}  // namespace fsdp
