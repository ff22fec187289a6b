// The trainer's and the planner's view of a model: a root module and how to call it, built from
// ModelConfig. This is the one place that knows which model types exist; the loop, the sampler and
// the planner see only CausalLM.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "fsdp/config/config.h"
#include "fsdp/options.h"

namespace torch {
namespace nn {
class Module;
}
}  // namespace torch

namespace fsdp {

struct CausalLM {
  std::shared_ptr<torch::nn::Module> module;  // the root, for fully_shard
  // idx [B, T] int64 -> logits [B, T, V], through fsdp::forward so that units run their hooks.
  std::function<at::Tensor(const at::Tensor&)> forward;
  int64_t context_length = 0;  // the longest T forward accepts
  // The parameters' initial values by name, from (config.train.seed, the name) alone: give it to
  // fully_shard (ShardingOptions::param_init) to materialise the deferred parameters.
  ParamInit param_init;
};

// Builds the model `config.model` describes with context config.context_length(), its parameters
// deferred (fsdp/init.h): shapes without values, so that no rank ever holds the whole model;
// fully_shard materialises each rank's shard with `param_init`, the values every rank (and a
// single process) would draw. Throws std::invalid_argument for sizes the model rejects.
CausalLM build_model(const TrainConfig& config);

// Parameters in the model (tied ones once).
int64_t count_parameters(const torch::nn::Module& module);

}  // namespace fsdp
