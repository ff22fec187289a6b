// The trainer's and the planner's view of a model: a root module and how to call it, built from
// ModelConfig. This is the one place that knows which model types exist; the loop, the sampler and
// the planner see only CausalLM.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fsdp/config/config.h"
#include "fsdp/models/attention.h"
#include "fsdp/models/fused_loss.h"
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
  // forward for packed rows: each sequence at its own positions, attending within itself
  // (fsdp/models/attention.h's packed_layout).
  std::function<at::Tensor(const at::Tensor&, const SequenceLayout&)> forward_packed;
  // The loss of idx [B, T] against targets through the fused head and cross entropy
  // (fsdp/models/fused_loss.h): the logits never whole. `layout` may be empty.
  std::function<at::Tensor(const at::Tensor&, const SequenceLayout&, const LossTargets&)> loss;
};

// Builds the model `config.model` describes with context config.context_length(), its parameters
// deferred (fsdp/init.h): shapes without values, so that no rank ever holds the whole model;
// fully_shard materialises each rank's shard with `param_init`, the values every rank (and a
// single process) would draw. Throws std::invalid_argument for sizes the model rejects.
// config.lora's adapters added (add_adapters), then config.train.freeze applied
// (freeze_parameters).
CausalLM build_model(const TrainConfig& config);

// LoRA adapters on `module` as config.lora says (fsdp/models/lora.h, add_lora): their A values
// from config.train.seed and each layer's name; everything but the adapters and the modules to
// save frozen. Throws ConfigError naming the lora.* key at fault.
void add_adapters(torch::nn::Module& module, const TrainConfig& config);

// Sets requires_grad false on the parameters of `module` whose names match one of `patterns`
// (globs, fnmatch(3) without flags: `*` also matches dots). Throws ConfigError naming
// train.freeze for a pattern that matches nothing and for patterns that freeze everything.
void freeze_parameters(torch::nn::Module& module, const std::vector<std::string>& patterns);

// The next-token loss of inputs [B, T] against targets [B, T] (-100: ignored), their mean
// (`mean`) or their sum, for rows laid out as `layout` (empty: one sequence a row): through the
// fused head and cross entropy when `fused` (train.fused_loss), else the logits and gpt2_loss /
// token_loss_sum. What the trainer, its evaluation and the tools that time a step train on.
at::Tensor next_token_loss(const CausalLM& lm, const at::Tensor& inputs, const at::Tensor& targets,
                           bool fused, const SequenceLayout& layout = {}, bool mean = true);

// Parameters in the model (tied ones once).
int64_t count_parameters(const torch::nn::Module& module);
// Of those, the ones that train (requires_grad).
int64_t count_trainable_parameters(const torch::nn::Module& module);

// A parameter of the model a config describes, known without building it: the name the module
// registers it under (transformers' names, GPT-2's with "transformer."), its shape, and the config
// keys its sizes come from (for an error that names the setting at fault).
struct ParameterShape {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<std::string> keys;  // "model.vocab_size", "model.n_embd"
  int64_t numel() const;          // saturates at INT64_MAX
};

// The model's parameters from its config alone (nothing is built or allocated, so that sizes far
// beyond memory are cheap to reason about): those outside the blocks, and one block's, whose
// names hold "{}" for the block's index. build_model's named_parameters are exactly these, each
// block's with its index (tests/test_plan.cpp checks it for every family).
struct ModelShapes {
  std::vector<ParameterShape> outer;
  std::vector<ParameterShape> block;
  int64_t blocks = 0;
  std::string blocks_key;  // the config key of the block count: "model.n_layer"
  // Every parameter counted once, tied ones once; saturates at INT64_MAX.
  int64_t parameters() const;
};
ModelShapes model_shapes(const TrainConfig& config);
// `shape.name` with the block index in place of "{}".
std::string block_parameter_name(const ParameterShape& shape, int64_t block);

}  // namespace fsdp
