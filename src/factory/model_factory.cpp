// Model construction for the trainer and the planner: ModelConfig -> GPT-2 or Llama, with seeded
// initialisation.
#include "factory/model_factory.h"

#include <fnmatch.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <unordered_set>

#include "fsdp/hooks.h"
#include "fsdp/models/gpt2.h"
#include "fsdp/models/llama.h"
#include "fsdp/models/lora.h"

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
  return {
      model.ptr(),
      [model](const at::Tensor& idx) mutable { return fsdp::forward(model, idx); },
      c.n_positions,
      gpt2_param_init(c, static_cast<uint64_t>(config.train.seed)),
      [model](const at::Tensor& idx, const SequenceLayout& layout) mutable {
        return fsdp::forward(model, idx, layout);
      },
      [model](const at::Tensor& idx, const SequenceLayout& layout,
              const LossTargets& loss) mutable { return fsdp::forward(model, idx, layout, loss); }};
}

RopeScaling rope_scaling(const ModelConfig& m) {
  RopeScaling r;
  r.type = m.rope_scaling == "linear"     ? RopeScalingType::kLinear
           : m.rope_scaling == "llama3"   ? RopeScalingType::kLlama3
           : m.rope_scaling == "longrope" ? RopeScalingType::kLongRope
                                          : RopeScalingType::kNone;
  r.short_factor = m.rope_short_factor;
  r.long_factor = m.rope_long_factor;
  r.attention_factor = m.rope_attention_factor;
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
  c.qk_norm = m.qk_norm;
  c.fused_projections = m.fused_projections;
  c.norm_offset = m.norm_offset;
  c.sandwich_norms = m.sandwich_norms;
  c.embedding_scale = m.embedding_scale;
  c.gelu_tanh = m.activation == "gelu_tanh";
  c.attention_scale = m.attention_scale;
  c.sliding_layers = m.sliding_layers;
  c.sliding_window = m.sliding_window;
  c.local_rope_theta = m.local_rope_theta;
  c.partial_rotary_factor = m.partial_rotary_factor;
  c.nope_layers = m.nope_layers;
  c.fused_ops = m.fused_ops;
  c.deferred = true;
  Llama model(c);
  return {
      model.ptr(),
      [model](const at::Tensor& idx) mutable { return fsdp::forward(model, idx); },
      c.max_position_embeddings,
      llama_param_init(static_cast<uint64_t>(config.train.seed), m.norm_offset),
      [model](const at::Tensor& idx, const SequenceLayout& layout) mutable {
        return fsdp::forward(model, idx, layout);
      },
      [model](const at::Tensor& idx, const SequenceLayout& layout,
              const LossTargets& loss) mutable { return fsdp::forward(model, idx, layout, loss); }};
}

}  // namespace

CausalLM build_model(const TrainConfig& config) {
  CausalLM lm;
  switch (config.model.type) {
    case ModelType::kGPT2:
      lm = build_gpt2(config);
      break;
    case ModelType::kLlama:
      lm = build_llama(config);
      break;
    default:
      throw std::invalid_argument("model.type: unknown model type");
  }
  if (config.lora.enabled()) add_adapters(*lm.module, config);
  freeze_parameters(*lm.module, config.train.freeze);
  return lm;
}

void add_adapters(torch::nn::Module& module, const TrainConfig& config) {
  const LoraConfig& l = config.lora;
  LoraSettings settings;
  settings.options.r = l.r;
  settings.options.alpha = l.alpha;
  settings.options.dropout = l.dropout;
  settings.options.rslora = l.use_rslora;
  settings.target_modules = l.target_modules;
  settings.modules_to_save = l.modules_to_save;
  settings.seed = static_cast<uint64_t>(config.train.seed);
  try {
    add_lora(module, settings);
  } catch (const std::invalid_argument& e) {
    // add_lora names the setting its message is about first ("lora.r ...").
    const std::string what = e.what();
    const std::string key = what.substr(0, what.find_first_of(": "));
    throw ConfigError("", 0, key.rfind("lora.", 0) == 0 ? key : "lora.target_modules", what);
  }
}

void freeze_parameters(torch::nn::Module& module, const std::vector<std::string>& patterns) {
  if (patterns.empty()) return;
  const auto params = module.named_parameters(/*recurse=*/true);
  std::vector<bool> used(patterns.size(), false);
  int64_t training = 0;
  for (const auto& item : params) {
    bool frozen = false;
    for (size_t i = 0; i < patterns.size(); ++i) {
      if (::fnmatch(patterns[i].c_str(), item.key().c_str(), 0) == 0) frozen = used[i] = true;
    }
    if (frozen) item.value().requires_grad_(false);
  }
  for (const auto& item : params) training += item.value().requires_grad() ? 1 : 0;
  for (size_t i = 0; i < patterns.size(); ++i) {
    if (used[i]) continue;
    std::string names;
    for (size_t k = 0; k < params.size() && k < 6; ++k) {
      names += (k ? ", " : "") + params[k].key();
    }
    if (params.size() > 6) names += ", ... (" + std::to_string(params.size()) + " in all)";
    throw ConfigError("", 0, "train.freeze",
                      "'" + patterns[i] + "' matches no parameter of the model (" + names +
                          "; `*` matches any run of characters, dots included)");
  }
  if (training == 0) {
    throw ConfigError("", 0, "train.freeze",
                      "the patterns freeze every parameter of the model: nothing would train");
  }
}

at::Tensor next_token_loss(const CausalLM& lm, const at::Tensor& inputs, const at::Tensor& targets,
                           bool fused, const SequenceLayout& layout, bool mean) {
  if (fused) return lm.loss(inputs, layout, LossTargets{targets, mean});
  const at::Tensor logits =
      layout.positions.defined() ? lm.forward_packed(inputs, layout) : lm.forward(inputs);
  return mean ? gpt2_loss(logits, targets) : token_loss_sum(logits, targets);
}

namespace {

int64_t saturating_mul(int64_t a, int64_t b) {
  if (a < 0 || b < 0) return -1;
  if (a != 0 && b > INT64_MAX / a) return INT64_MAX;
  return a * b;
}

int64_t saturating_add(int64_t a, int64_t b) { return b > INT64_MAX - a ? INT64_MAX : a + b; }

ModelShapes gpt2_shapes(const TrainConfig& config) {
  const ModelConfig& m = config.model;
  const int64_t d = m.n_embd;
  const std::string positions = m.n_positions > 0 ? "model.n_positions" : "data.seq_len";
  const std::vector<std::string> width = {"model.n_embd"};
  ModelShapes s;
  s.outer = {{"transformer.wte.weight", {m.vocab_size, d}, {"model.vocab_size", "model.n_embd"}},
             {"transformer.wpe.weight", {config.context_length(), d}, {positions, "model.n_embd"}},
             {"transformer.ln_f.weight", {d}, width},
             {"transformer.ln_f.bias", {d}, width}};
  const std::string b = "transformer.h.{}.";
  s.block = {{b + "ln_1.weight", {d}, width},
             {b + "ln_1.bias", {d}, width},
             {b + "attn.c_attn.weight", {d, saturating_mul(3, d)}, width},
             {b + "attn.c_attn.bias", {saturating_mul(3, d)}, width},
             {b + "attn.c_proj.weight", {d, d}, width},
             {b + "attn.c_proj.bias", {d}, width},
             {b + "ln_2.weight", {d}, width},
             {b + "ln_2.bias", {d}, width},
             {b + "mlp.c_fc.weight", {d, saturating_mul(4, d)}, width},
             {b + "mlp.c_fc.bias", {saturating_mul(4, d)}, width},
             {b + "mlp.c_proj.weight", {saturating_mul(4, d), d}, width},
             {b + "mlp.c_proj.bias", {d}, width}};
  s.blocks = m.n_layer;
  s.blocks_key = "model.n_layer";
  return s;
}

const char* const kBlock = "model.layers.{}.";

// The end every Llama-shaped block shares: down_proj and the two norms, and the block count.
void finish_block(const ModelConfig& m, ModelShapes& s) {
  const int64_t d = m.dim, f = m.intermediate_size;
  const std::string b = kBlock;
  s.block.push_back({b + "mlp.down_proj.weight", {d, f}, {"model.intermediate_size", "model.dim"}});
  if (m.mlp_bias) s.block.push_back({b + "mlp.down_proj.bias", {d}, {"model.dim"}});
  s.block.push_back({b + "input_layernorm.weight", {d}, {"model.dim"}});
  s.block.push_back({b + "post_attention_layernorm.weight", {d}, {"model.dim"}});
  if (m.sandwich_norms) {
    s.block.push_back({b + "pre_feedforward_layernorm.weight", {d}, {"model.dim"}});
    s.block.push_back({b + "post_feedforward_layernorm.weight", {d}, {"model.dim"}});
  }
  s.blocks = m.n_layer;
  s.blocks_key = "model.n_layer";
}

// Qwen3's and Gemma 3's q_norm and k_norm, over a head's channels.
void add_qk_norms(const ModelConfig& m, ModelShapes& s) {
  if (!m.qk_norm) return;
  const int64_t head_dim = m.head_dim > 0 ? m.head_dim : (m.n_head > 0 ? m.dim / m.n_head : 0);
  const std::vector<std::string> hs_keys = {"model.head_dim", "model.dim", "model.n_head"};
  const std::string b = kBlock;
  s.block.push_back({b + "self_attn.q_norm.weight", {head_dim}, hs_keys});
  s.block.push_back({b + "self_attn.k_norm.weight", {head_dim}, hs_keys});
}

// Phi-3's block: o_proj, qkv_proj, gate_up_proj, then the shared end, in its order.
ModelShapes fused_shapes(const ModelConfig& m, ModelShapes s, int64_t q, int64_t kv,
                         const std::vector<std::string>& q_keys) {
  const int64_t d = m.dim, f2 = saturating_mul(2, m.intermediate_size);
  const std::string b = kBlock;
  const std::vector<std::string> qkv_keys = {"model.n_head", "model.n_kv_head", "model.head_dim",
                                             "model.dim"};
  const std::vector<std::string> mlp_keys = {"model.intermediate_size", "model.dim"};
  const int64_t qkv = saturating_add(q, saturating_mul(2, kv));
  s.block = {{b + "self_attn.o_proj.weight", {d, q}, q_keys}};
  if (m.o_bias) s.block.push_back({b + "self_attn.o_proj.bias", {d}, {"model.dim"}});
  s.block.push_back({b + "self_attn.qkv_proj.weight", {qkv, d}, qkv_keys});
  if (m.qkv_bias) s.block.push_back({b + "self_attn.qkv_proj.bias", {qkv}, qkv_keys});
  add_qk_norms(m, s);
  s.block.push_back({b + "mlp.gate_up_proj.weight", {f2, d}, mlp_keys});
  if (m.mlp_bias) s.block.push_back({b + "mlp.gate_up_proj.bias", {f2}, mlp_keys});
  finish_block(m, s);
  return s;
}

ModelShapes llama_shapes(const TrainConfig& config) {
  const ModelConfig& m = config.model;
  const int64_t d = m.dim, f = m.intermediate_size;
  const int64_t kv_heads = m.n_kv_head > 0 ? m.n_kv_head : m.n_head;
  const int64_t head_dim = m.head_dim > 0 ? m.head_dim : (m.n_head > 0 ? d / m.n_head : 0);
  const int64_t q = saturating_mul(m.n_head, head_dim), kv = saturating_mul(kv_heads, head_dim);
  const std::vector<std::string> q_keys = {"model.n_head", "model.head_dim", "model.dim"};
  const std::vector<std::string> kv_keys = {"model.n_kv_head", "model.head_dim", "model.dim"};
  const std::vector<std::string> mlp_keys = {"model.intermediate_size", "model.dim"};
  ModelShapes s;
  s.outer = {{"model.embed_tokens.weight", {m.vocab_size, d}, {"model.vocab_size", "model.dim"}},
             {"model.norm.weight", {d}, {"model.dim"}}};
  if (!m.tie_embeddings) {
    s.outer.push_back({"lm_head.weight", {m.vocab_size, d}, {"model.vocab_size", "model.dim"}});
  }
  const std::string b = kBlock;
  if (m.fused_projections) return fused_shapes(m, s, q, kv, q_keys);
  s.block = {{b + "self_attn.q_proj.weight", {q, d}, q_keys}};
  if (m.qkv_bias) s.block.push_back({b + "self_attn.q_proj.bias", {q}, q_keys});
  s.block.push_back({b + "self_attn.k_proj.weight", {kv, d}, kv_keys});
  if (m.qkv_bias) s.block.push_back({b + "self_attn.k_proj.bias", {kv}, kv_keys});
  s.block.push_back({b + "self_attn.v_proj.weight", {kv, d}, kv_keys});
  if (m.qkv_bias) s.block.push_back({b + "self_attn.v_proj.bias", {kv}, kv_keys});
  s.block.push_back({b + "self_attn.o_proj.weight", {d, q}, q_keys});
  if (m.o_bias) s.block.push_back({b + "self_attn.o_proj.bias", {d}, {"model.dim"}});
  add_qk_norms(m, s);
  for (const char* proj : {"gate_proj", "up_proj"}) {
    s.block.push_back({b + "mlp." + proj + ".weight", {f, d}, mlp_keys});
    if (m.mlp_bias) s.block.push_back({b + "mlp." + proj + ".bias", {f}, mlp_keys});
  }
  finish_block(m, s);
  return s;
}

}  // namespace

int64_t ParameterShape::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n = saturating_mul(n, d);
  return n;
}

int64_t ModelShapes::parameters() const {
  int64_t per_block = 0, n = 0;
  for (const auto& p : block) per_block = saturating_add(per_block, p.numel());
  for (const auto& p : outer) n = saturating_add(n, p.numel());
  return saturating_add(n, saturating_mul(per_block, blocks));
}

ModelShapes model_shapes(const TrainConfig& config) {
  return config.model.type == ModelType::kGPT2 ? gpt2_shapes(config) : llama_shapes(config);
}

std::string block_parameter_name(const ParameterShape& shape, int64_t block) {
  std::string name = shape.name;
  const size_t at = name.find("{}");
  if (at != std::string::npos) name.replace(at, 2, std::to_string(block));
  return name;
}

namespace {
int64_t count(const torch::nn::Module& module, bool trainable_only) {
  std::unordered_set<const void*> seen;
  int64_t n = 0;
  for (const auto& p : module.parameters()) {
    if (trainable_only && !p.requires_grad()) continue;
    if (seen.insert(p.unsafeGetTensorImpl()).second) n += p.numel();
  }
  return n;
}
}  // namespace

int64_t count_parameters(const torch::nn::Module& module) { return count(module, false); }

int64_t count_trainable_parameters(const torch::nn::Module& module) { return count(module, true); }

}  // namespace fsdp
