// Model construction for the trainer and the planner: ModelConfig -> GPT-2 or Llama, with seeded
// initialisation.
#include "factory/model_factory.h"

#include <torch/nn/module.h>

#include <unordered_set>

#include "fsdp/hooks.h"
#include "fsdp/models/gpt2.h"
#include "fsdp/models/llama.h"

namespace fsdp {

namespace {

CausalLM build_gpt2(const TrainConfig& config) {
  const ModelConfig& m = config.model;
  GPT2Config c;
  c.vocab_size = m.vocab_size;
  c.n_positions = config.context_length();
  c.n_embd = m.n_embd;
  c.n_layer = m.n_layer;
  c.n_head = m.n_head;
  c.layer_norm_eps = m.norm_eps;
  c.attention = m.attention;
  c.deferred = true;
  GPT2 model(c);
  return {model.ptr(), [model](const at::Tensor& idx) mutable { return fsdp::forward(model, idx); },
          c.n_positions, gpt2_param_init(c, static_cast<uint64_t>(config.train.seed))};
}

RopeScaling rope_scaling(const ModelConfig& m) {
  RopeScaling r;
  r.type = m.rope_scaling == "linear"   ? RopeScalingType::kLinear
           : m.rope_scaling == "llama3" ? RopeScalingType::kLlama3
                                        : RopeScalingType::kNone;
  r.factor = m.rope_factor;
  r.low_freq_factor = m.rope_low_freq_factor;
  r.high_freq_factor = m.rope_high_freq_factor;
  r.original_max_position_embeddings = m.rope_original_max_positions;
  return r;
}

CausalLM build_llama(const TrainConfig& config) {
  const ModelConfig& m = config.model;
  LlamaConfig c;
  c.vocab_size = m.vocab_size;
  c.max_position_embeddings = config.context_length();
  c.dim = m.dim;
  c.n_layer = m.n_layer;
  c.n_head = m.n_head;
  c.n_kv_head = m.n_kv_head;
  c.intermediate_size = m.intermediate_size;
  c.rope_theta = m.rope_theta;
  c.norm_eps = m.norm_eps;
  c.attention = m.attention;
  c.tie_embeddings = m.tie_embeddings;
  c.head_dim_override = m.head_dim;
  c.qkv_bias = m.qkv_bias;
  c.o_bias = m.o_bias;
  c.mlp_bias = m.mlp_bias;
  c.rope_scaling = rope_scaling(m);
  c.deferred = true;
  Llama model(c);
  return {model.ptr(), [model](const at::Tensor& idx) mutable { return fsdp::forward(model, idx); },
          c.max_position_embeddings, llama_param_init(static_cast<uint64_t>(config.train.seed))};
}

}  // namespace

CausalLM build_model(const TrainConfig& config) {
  switch (config.model.type) {
    case ModelType::kGPT2:
      return build_gpt2(config);
    case ModelType::kLlama:
      return build_llama(config);
  }
  throw std::invalid_argument("model.type: unknown model type");
}

int64_t count_parameters(const torch::nn::Module& module) {
  std::unordered_set<const void*> seen;
  int64_t n = 0;
  for (const auto& p : module.parameters()) {
    if (seen.insert(p.unsafeGetTensorImpl()).second) n += p.numel();
  }
  return n;
}

}  // namespace fsdp
