// Deferred initialisation: building a model whose parameters have their shapes but no bytes, so
// that fully_shard can materialise only this rank's shard of each. The sharding runtime's answer to
// PyTorch's meta device (`torch.device("meta")` plus `param_init_fn`), shaped by LibTorch: a meta
// tensor cannot later become a CPU tensor in place (set_data refuses the change of device), and a
// C++ module keeps its parameters in typed members that must keep their identity. So a deferred
// parameter is a CPU tensor with its full shape whose storage holds no bytes; fully_shard points
// it at its unit's gathered buffer as it does every parameter.
//
//   GPT2Config c = ...; c.deferred = true;          // each submodule released as soon as built
//   GPT2 model(c);                                   // no rank holds the whole model
//   auto sharded = fully_shard(model.ptr(), world, ShardingOptions()
//       .param_init(gpt2_param_init(c, seed)));      // fills each shard, values as if eager
//
// A deferred parameter must not be read or written before fully_shard materialises it: its data
// pointer is null. [Note: deferred parameters] in docs/design.md.
#pragma once

#include <ATen/core/Tensor.h>

#include "fsdp/options.h"

namespace torch {
namespace nn {
class Module;
}
}  // namespace torch

namespace fsdp {

// Gives every parameter of `module` (recursively) up its bytes, keeping its shape, dtype and
// identity. Parameters already deferred are left as they are.
void defer_parameters(torch::nn::Module& module);

// True when `t` has elements but its storage holds fewer bytes than they need.
bool is_deferred(const at::Tensor& t);

// ParamInit (fsdp/options.h) fills `full` (contiguous fp32, the parameter's whole shape) with the
// initial values of the parameter named `name` (its qualified name from the root module, as
// named_parameters() gives it). It must depend on the name alone, not on the rank or on other
// parameters, so that every rank computes the same values for the slice it keeps.

}  // namespace fsdp
