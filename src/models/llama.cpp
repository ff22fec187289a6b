// Llama: configuration checks, the modules' forward passes and the deterministic initialisation.
// Meant to be read in one sitting, transcribing HF's modeling_llama (rotary embeddings default,
// linear or llama3-scaled; the optional biases of Llama, Qwen2 and Mistral shapes; Qwen3's q/k
// norms; SmolLM3's layers without rotary embeddings; Phi-3's fused projections and partial,
// longrope rotary embeddings; Gemma 3's offset and sandwich norms, scaled embeddings, GELU and
// sliding-window layers);
// attention through causal_attention (fused on LibTorch 2.x, HF's eager path written out on
// 1.13 or on request); no dropout, no KV cache.
//
// Shape legend (as in llm.c):
//   B   batch size              T   time (sequence length, <= max_position_embeddings)
//   C   channels (dim)          V   vocabulary size
//   nh  query heads (n_head)    nkv key/value heads (kv_heads()), dividing nh
//   hs  head size (head_dim)    F   feed-forward channels (intermediate_size)
#include "fsdp/models/llama.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <tuple>

#include "fsdp/hooks.h"
#include "fsdp/init.h"
#include "fsdp/models/fused_loss.h"
#include "fsdp/models/fused_ops.h"
#include "fsdp/models/gpt2.h"  // parameter_seed, gpt2_loss

namespace fsdp {

// --- configuration ------------------------------------------------------------------------------

namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument("LlamaConfig." + message);
}

void require_positive_size(const char* field, int64_t value) {
  require(value > 0, std::string(field) + " must be positive, got " + std::to_string(value));
}

}  // namespace

void LlamaConfig::validate() const {
  require_positive_size("vocab_size", vocab_size);
  require_positive_size("max_position_embeddings", max_position_embeddings);
  require_positive_size("dim", dim);
  require_positive_size("n_layer", n_layer);
  require_positive_size("n_head", n_head);
  require(n_kv_head >= 0,
          "n_kv_head must be positive, or 0 for n_head, got " + std::to_string(n_kv_head));
  require_positive_size("intermediate_size", intermediate_size);
  require(head_dim_override >= 0,
          "head_dim_override must be positive, or 0 for dim / n_head, got " +
              std::to_string(head_dim_override));
  require(head_dim_override > 0 || dim % n_head == 0,
          "dim (" + std::to_string(dim) + ") must be divisible by n_head (" +
              std::to_string(n_head) + ") unless head_dim_override is set");
  require(n_head % kv_heads() == 0, "n_head (" + std::to_string(n_head) +
                                        ") must be divisible by n_kv_head (" +
                                        std::to_string(kv_heads()) + ")");
  require(partial_rotary_factor > 0 && partial_rotary_factor <= 1,
          "partial_rotary_factor must be in (0, 1], got " + std::to_string(partial_rotary_factor));
  require(rotary_dim() % 2 == 0 && rotary_dim() > 0,
          "the rotated channels of a head (" + std::to_string(rotary_dim()) +
              ") must be even and positive: rotary embeddings rotate pairs of channels");
  if (rope_scaling.type != RopeScalingType::kNone) {
    require(rope_scaling.factor > 0,
            "rope_scaling.factor must be positive, got " + std::to_string(rope_scaling.factor));
  }
  if (rope_scaling.type == RopeScalingType::kLlama3) {
    require(rope_scaling.low_freq_factor > 0 &&
                rope_scaling.high_freq_factor > rope_scaling.low_freq_factor,
            "rope_scaling needs 0 < low_freq_factor < high_freq_factor, got " +
                std::to_string(rope_scaling.low_freq_factor) + " and " +
                std::to_string(rope_scaling.high_freq_factor));
    require(rope_scaling.original_max_position_embeddings > 0,
            "rope_scaling.original_max_position_embeddings must be positive");
  }
  if (rope_scaling.type == RopeScalingType::kLongRope) {
    const size_t pairs = static_cast<size_t>(rotary_dim() / 2);
    require(
        rope_scaling.short_factor.size() == pairs && rope_scaling.long_factor.size() == pairs,
        "longrope needs short_factor and long_factor of rotary_dim / 2 = " + std::to_string(pairs) +
            " values each, got " + std::to_string(rope_scaling.short_factor.size()) + " and " +
            std::to_string(rope_scaling.long_factor.size()));
    require(rope_scaling.original_max_position_embeddings > 0,
            "rope_scaling.original_max_position_embeddings must be positive");
  }
  require(!sliding_layers.empty() == (sliding_window > 0),
          "sliding_layers and a positive sliding_window go together, got " +
              std::to_string(sliding_layers.size()) + " layers and a window of " +
              std::to_string(sliding_window));
  for (int64_t layer : sliding_layers) {
    require(layer >= 0 && layer < n_layer, "sliding_layers names layer " + std::to_string(layer) +
                                               " of a model with " + std::to_string(n_layer));
  }
  require(local_rope_theta > 0, "local_rope_theta must be positive");
  require(embedding_scale >= 0 && attention_scale >= 0,
          "embedding_scale and attention_scale must not be negative");
  for (int64_t layer : nope_layers) {
    require(layer >= 0 && layer < n_layer, "nope_layers names layer " + std::to_string(layer) +
                                               " of a model with " + std::to_string(n_layer));
  }
  require(rope_theta > 0, "rope_theta must be positive, got " + std::to_string(rope_theta));
  require(norm_eps > 0, "norm_eps must be positive, got " + std::to_string(norm_eps));
  check_attention_kernel(attention, "LlamaConfig.attention");
}

bool LlamaConfig::rotates(int64_t layer) const {
  return std::find(nope_layers.begin(), nope_layers.end(), layer) == nope_layers.end();
}

bool LlamaConfig::slides(int64_t layer) const {
  return std::find(sliding_layers.begin(), sliding_layers.end(), layer) != sliding_layers.end();
}

LlamaConfig LlamaConfig::tiny() {
  LlamaConfig c;
  c.vocab_size = 256;
  c.max_position_embeddings = 64;
  c.dim = 64;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.intermediate_size = 176;
  return c;
}

// --- modules ------------------------------------------------------------------------------------

LlamaRMSNormImpl::LlamaRMSNormImpl(int64_t dim, double eps, bool offset, bool fused)
    : eps(eps), offset(offset), fused(fused) {
  weight = register_parameter("weight", offset ? at::zeros({dim}) : at::ones({dim}));
}

at::Tensor LlamaRMSNormImpl::forward(const at::Tensor& x) {
  return rms_norm(x, weight, eps, offset, fused);
}

namespace {

// HF's _compute_llama3_parameters, op for op in fp32 (the Python scalars stay doubles, as there).
at::Tensor llama3_inv_freq(const at::Tensor& inv_freq, const RopeScaling& r) {
  const double old_context = static_cast<double>(r.original_max_position_embeddings);
  const double low_freq_wavelen = old_context / r.low_freq_factor;
  const double high_freq_wavelen = old_context / r.high_freq_factor;
  const at::Tensor wavelen = 2 * M_PI / inv_freq;
  at::Tensor scaled = at::where(wavelen > low_freq_wavelen, inv_freq / r.factor, inv_freq);
  const at::Tensor smooth =
      (old_context / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
  const at::Tensor smoothed = (1 - smooth) * scaled / r.factor + smooth * scaled;
  const at::Tensor medium =
      (wavelen < high_freq_wavelen).logical_not() * (wavelen > low_freq_wavelen).logical_not();
  return at::where(medium, smoothed, scaled);
}

at::Tensor scaled_inv_freq(const at::Tensor& inv_freq, const RopeScaling& r) {
  switch (r.type) {
    case RopeScalingType::kNone:
    case RopeScalingType::kLongRope:  // its factors divide inside the power (longrope_inv_freq)
      return inv_freq;
    case RopeScalingType::kLinear:
      return inv_freq / r.factor;
    case RopeScalingType::kLlama3:
      return llama3_inv_freq(inv_freq, r);
  }
  return inv_freq;
}

// HF's _compute_longrope_parameters: 1 / (factor_i * theta^(2i / rd)), in fp32.
at::Tensor longrope_inv_freq(const at::Tensor& exponent, double theta,
                             const std::vector<double>& factors) {
  const at::Tensor ext = at::tensor(factors, at::kDouble).to(at::kFloat);
  return 1.0 / (ext * at::pow(theta, exponent));
}

// transformers' default for the longrope attention factor.
double longrope_attention_factor(const RopeScaling& r) {
  if (r.attention_factor > 0) return r.attention_factor;
  if (r.factor <= 1.0) return 1.0;
  return std::sqrt(1 + std::log(r.factor) /
                           std::log(static_cast<double>(r.original_max_position_embeddings)));
}

// cos and sin of position * inv_freq, each frequency repeated for both halves of the rotated
// channels, times `scale` in fp32 (longrope's attention factor; 1 otherwise).
std::pair<at::Tensor, at::Tensor> rope_tables(int64_t positions, const at::Tensor& inv_freq,
                                              double scale) {
  at::Tensor t = at::arange(positions, at::TensorOptions().dtype(at::kFloat));
  at::Tensor freqs = at::outer(t, inv_freq);     // [positions, rd / 2]
  at::Tensor emb = at::cat({freqs, freqs}, -1);  // [positions, rd]
  if (scale == 1.0) return {emb.cos(), emb.sin()};
  return {emb.cos() * scale, emb.sin() * scale};
}

}  // namespace

LlamaRotaryEmbedding::LlamaRotaryEmbedding(const LlamaConfig& config) {
  const int64_t rd = config.rotary_dim();
  const RopeScaling& r = config.rope_scaling;
  // inv_freq[i] = 1 / theta^(2i / rd), in fp32 as HF computes it, then scaled.
  at::Tensor exponent = at::arange(0, rd, 2, at::kLong).to(at::kFloat) / static_cast<double>(rd);
  if (r.type != RopeScalingType::kLongRope) {
    at::Tensor inv_freq = scaled_inv_freq(1.0 / at::pow(config.rope_theta, exponent), r);
    std::tie(cos_, sin_) = rope_tables(config.max_position_embeddings, inv_freq, 1.0);
    return;
  }
  const double scale = longrope_attention_factor(r);
  std::tie(cos_, sin_) =
      rope_tables(config.max_position_embeddings,
                  longrope_inv_freq(exponent, config.rope_theta, r.short_factor), scale);
  std::tie(long_cos_, long_sin_) =
      rope_tables(config.max_position_embeddings,
                  longrope_inv_freq(exponent, config.rope_theta, r.long_factor), scale);
  long_after_ = r.original_max_position_embeddings;
}

std::pair<at::Tensor, at::Tensor> LlamaRotaryEmbedding::tables(int64_t T,
                                                               const at::Tensor& like) const {
  // transformers' longrope picks its factors by the forward's length (dynamic_rope_update).
  const bool long_tables = long_cos_.defined() && T > long_after_;
  const at::Tensor& cos = long_tables ? long_cos_ : cos_;
  const at::Tensor& sin = long_tables ? long_sin_ : sin_;
  // A no-op conversion for fp32 on the CPU; otherwise rounded to the compute dtype, as HF does.
  return {cos.narrow(0, 0, T).unsqueeze(0).to(like.options()),
          sin.narrow(0, 0, T).unsqueeze(0).to(like.options())};
}

std::pair<at::Tensor, at::Tensor> LlamaRotaryEmbedding::tables_at(const at::Tensor& positions,
                                                                  const at::Tensor& like) const {
  // check_layout has held the positions to [0, max_position_embeddings).
  const int64_t top = positions.numel() == 0 ? 0 : positions.max().item<int64_t>();
  const bool long_tables = long_cos_.defined() && top + 1 > long_after_;
  const at::Tensor& cos = long_tables ? long_cos_ : cos_;
  const at::Tensor& sin = long_tables ? long_sin_ : sin_;
  const at::Tensor rows = positions.reshape({-1});
  auto gather = [&](const at::Tensor& table) {
    return table.index_select(0, rows)
        .view({positions.size(0), positions.size(1), table.size(1)})
        .to(like.options());
  };
  return {gather(cos), gather(sin)};
}

namespace {

Projection linear(int64_t in_features, int64_t out_features, bool bias = false) {
  return Projection(in_features, out_features, bias);
}

// [B, nkv, T, hs] -> [B, nkv * n_rep, T, hs]: key/value head j serves query heads
// j * n_rep ... (j + 1) * n_rep - 1 (HF's repeat_kv).
at::Tensor repeat_kv(const at::Tensor& x, int64_t n_rep) {
  if (n_rep == 1) return x;
  const int64_t B = x.size(0), nkv = x.size(1), T = x.size(2), hs = x.size(3);
  return x.unsqueeze(2).expand({B, nkv, n_rep, T, hs}).reshape({B, nkv * n_rep, T, hs});
}

}  // namespace

LlamaAttentionImpl::LlamaAttentionImpl(const LlamaConfig& config,
                                       std::shared_ptr<const LlamaRotaryEmbedding> rope)
    : n_head(config.n_head),
      n_kv_head(config.kv_heads()),
      head_dim(config.head_dim()),
      attention(config.attention),
      scale(config.attention_scale),
      fused(config.fused_ops),
      rope_(std::move(rope)) {
  if (config.fused_projections) {  // Phi-3 registers o_proj first
    o_proj = register_module("o_proj", linear(n_head * head_dim, config.dim, config.o_bias));
    qkv_proj = register_module(
        "qkv_proj", linear(config.dim, (n_head + 2 * n_kv_head) * head_dim, config.qkv_bias));
  } else {
    q_proj = register_module("q_proj", linear(config.dim, n_head * head_dim, config.qkv_bias));
    k_proj = register_module("k_proj", linear(config.dim, n_kv_head * head_dim, config.qkv_bias));
    v_proj = register_module("v_proj", linear(config.dim, n_kv_head * head_dim, config.qkv_bias));
    o_proj = register_module("o_proj", linear(n_head * head_dim, config.dim, config.o_bias));
  }
  if (config.qk_norm) {
    q_norm = register_module(
        "q_norm", LlamaRMSNorm(head_dim, config.norm_eps, config.norm_offset, config.fused_ops));
    k_norm = register_module(
        "k_norm", LlamaRMSNorm(head_dim, config.norm_eps, config.norm_offset, config.fused_ops));
  }
}

at::Tensor LlamaAttentionImpl::forward(const at::Tensor& x, const SequenceLayout& layout) {
  const int64_t B = x.size(0), T = x.size(1), hs = head_dim;
  at::Tensor q_rows, k_rows, v_rows;
  if (qkv_proj) {  // Phi-3: one projection, rows of the queries, then keys, then values
    const at::Tensor qkv = qkv_proj->forward(x);
    q_rows = qkv.narrow(-1, 0, n_head * hs);
    k_rows = qkv.narrow(-1, n_head * hs, n_kv_head * hs);
    v_rows = qkv.narrow(-1, (n_head + n_kv_head) * hs, n_kv_head * hs);
  } else {
    q_rows = q_proj->forward(x);
    k_rows = k_proj->forward(x);
    v_rows = v_proj->forward(x);
  }
  // [B, T, n, hs]: Qwen3's norms act on each head's channels, then the rotary embedding turns
  // queries and keys by their position (cos and sin [B or 1, T, rd], shared by the heads; a
  // partial one turns the first rd channels), before the heads move to dimension 1.
  at::Tensor q = q_rows.reshape({B, T, n_head, hs});
  at::Tensor k = k_rows.reshape({B, T, n_kv_head, hs});
  if (q_norm) {
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }
  if (rope_) {
    const auto [cos, sin] =
        layout.positions.defined() ? rope_->tables_at(layout.positions, x) : rope_->tables(T, x);
    q = rotary_embedding(q, cos, sin, fused);
    k = rotary_embedding(k, cos, sin, fused);
  }
  q = q.transpose(1, 2);  // [B, nh, T, hs]
  k = repeat_kv(k.transpose(1, 2), n_head / n_kv_head);
  at::Tensor v =
      repeat_kv(v_rows.reshape({B, T, n_kv_head, hs}).transpose(1, 2), n_head / n_kv_head);
  // [B, nh, T, hs] -> [B, T, nh * hs]; the explicit softmax in fp32, as HF's eager path.
  const AttentionOptions options{scale, window, layout.same_sequence};
  at::Tensor y = causal_attention(q, k, v, attention, /*softmax_in_fp32=*/true, options)
                     .transpose(1, 2)
                     .contiguous()
                     .view({B, T, n_head * hs});
  return o_proj->forward(y);
}

LlamaMLPImpl::LlamaMLPImpl(const LlamaConfig& config)
    : gelu_tanh(config.gelu_tanh), fused(config.fused_ops) {
  const int64_t C = config.dim, F = config.intermediate_size;
  if (config.fused_projections) {
    gate_up_proj = register_module("gate_up_proj", linear(C, 2 * F, config.mlp_bias));
  } else {
    gate_proj = register_module("gate_proj", linear(C, F, config.mlp_bias));
    up_proj = register_module("up_proj", linear(C, F, config.mlp_bias));
  }
  down_proj = register_module("down_proj", linear(F, C, config.mlp_bias));
}

at::Tensor LlamaMLPImpl::forward(const at::Tensor& x) {
  const GateActivation act = gelu_tanh ? GateActivation::kGeluTanh : GateActivation::kSilu;
  if (gate_up_proj) {  // Phi-3: gate then up in one projection
    return down_proj->forward(gated_activation(gate_up_proj->forward(x), act, fused));
  }
  return down_proj->forward(
      gated_activation(gate_proj->forward(x), up_proj->forward(x), act, fused));
}

LlamaDecoderLayerImpl::LlamaDecoderLayerImpl(const LlamaConfig& config,
                                             std::shared_ptr<const LlamaRotaryEmbedding> rope) {
  self_attn = register_module("self_attn", LlamaAttention(config, std::move(rope)));
  mlp = register_module("mlp", LlamaMLP(config));
  auto norm = [&](const char* name) {
    return register_module(
        name, LlamaRMSNorm(config.dim, config.norm_eps, config.norm_offset, config.fused_ops));
  };
  input_layernorm = norm("input_layernorm");
  post_attention_layernorm = norm("post_attention_layernorm");
  if (config.sandwich_norms) {
    pre_feedforward_layernorm = norm("pre_feedforward_layernorm");
    post_feedforward_layernorm = norm("post_feedforward_layernorm");
  }
}

at::Tensor LlamaDecoderLayerImpl::forward(const at::Tensor& x, const SequenceLayout& layout) {
  if (pre_feedforward_layernorm) {  // Gemma 3: each sublayer's output normalised too
    at::Tensor h = x + post_attention_layernorm->forward(
                           self_attn->forward(input_layernorm->forward(x), layout));
    return h +
           post_feedforward_layernorm->forward(mlp->forward(pre_feedforward_layernorm->forward(h)));
  }
  at::Tensor h = x + self_attn->forward(input_layernorm->forward(x), layout);
  return h + mlp->forward(post_attention_layernorm->forward(h));
}

namespace {
// With config.deferred, a submodule gives its parameters' bytes up as soon as it is built, so that
// building the model never holds more than its largest submodule (fsdp/init.h).
template <typename M>
M built(M module, const LlamaConfig& config) {
  if (config.deferred) fsdp::defer_parameters(*module);
  return module;
}
}  // namespace

LlamaModelImpl::LlamaModelImpl(const LlamaConfig& config) {
  embed_tokens = register_module(
      "embed_tokens", built(torch::nn::Embedding(config.vocab_size, config.dim), config));
  layers = register_module("layers", torch::nn::ModuleList());
  auto rope = std::make_shared<const LlamaRotaryEmbedding>(config);
  // Gemma 3's sliding-window layers: their own RoPE base, without the global layers' scaling.
  LlamaConfig local = config;
  local.rope_theta = config.local_rope_theta;
  local.rope_scaling = RopeScaling{};
  auto local_rope =
      config.sliding_layers.empty() ? nullptr : std::make_shared<const LlamaRotaryEmbedding>(local);
  for (int64_t i = 0; i < config.n_layer; ++i) {
    const bool slides = config.slides(i);
    LlamaDecoderLayer layer(config, !config.rotates(i) ? nullptr : slides ? local_rope : rope);
    if (slides) layer->self_attn->window = config.sliding_window;
    layers->push_back(built(layer, config));
  }
  norm = register_module(
      "norm", built(LlamaRMSNorm(config.dim, config.norm_eps, config.norm_offset, config.fused_ops),
                    config));
}

LlamaImpl::LlamaImpl(LlamaConfig config) : config_(config) {
  config_.validate();
  model_ = register_module("model", LlamaModel(config_));
  if (!config_.tie_embeddings) {
    lm_head_ = register_module(
        "lm_head", built(torch::nn::Linear(
                             torch::nn::LinearOptions(config_.dim, config_.vocab_size).bias(false)),
                         config_));
  }
  for (const auto& layer : *model_->layers) {
    blocks_.emplace_back(std::dynamic_pointer_cast<LlamaDecoderLayerImpl>(layer));
  }
  if (!config_.deferred) init_llama_weights(*this, 0);
  if (config_.embedding_scale > 0) {
    // Gemma's Gemma3TextScaledWordEmbedding: the scale as an fp32 tensor, cast to the weights'
    // dtype at each forward.
    embedding_scale_ = at::scalar_tensor(config_.embedding_scale, at::kFloat);
  }
}

at::Tensor LlamaImpl::hidden_states(const at::Tensor& idx, const SequenceLayout& layout) {
  if (idx.dim() != 2 || idx.scalar_type() != at::kLong) {
    throw std::invalid_argument("Llama::forward expects token ids [B, T] of type int64, got " +
                                std::to_string(idx.dim()) + "-D " +
                                std::string(c10::toString(idx.scalar_type())));
  }
  const int64_t T = idx.size(1);
  if (T > config_.max_position_embeddings) {
    throw std::invalid_argument(
        "Llama::forward: sequence length " + std::to_string(T) +
        " exceeds max_position_embeddings = " + std::to_string(config_.max_position_embeddings));
  }
  check_layout(layout, idx, config_.max_position_embeddings, "Llama::forward");
  at::Tensor x = model_->embed_tokens->forward(idx);  // [B, T, C]
  if (embedding_scale_.defined()) {
    x = x * embedding_scale_.to(x.device()).to(model_->embed_tokens->weight.scalar_type());
  }
  for (auto& block : blocks_) {
    x = fsdp::forward(block, x, layout);  // the runtime's interception point
  }
  return model_->norm->forward(x);
}

const at::Tensor& LlamaImpl::head_weight() const {
  return config_.tie_embeddings ? model_->embed_tokens->weight : lm_head_->weight;
}

at::Tensor LlamaImpl::forward(const at::Tensor& idx, const SequenceLayout& layout) {
  // The blocks first, then the head's transpose: autograd runs later-made nodes first, so the
  // head's gradient is ready before the blocks' (the split root reduction sends it early).
  const at::Tensor x = hidden_states(idx, layout);
  return at::matmul(x, head_weight().t());  // [B, T, V]
}

at::Tensor LlamaImpl::forward(const at::Tensor& idx, const SequenceLayout& layout,
                              const LossTargets& loss) {
  const at::Tensor x = hidden_states(idx, layout);
  return linear_cross_entropy(x.reshape({-1, x.size(-1)}), head_weight(),
                              loss.targets.reshape({-1}), loss.mean);
}

at::Tensor causal_lm_loss(const at::Tensor& logits, const at::Tensor& targets) {
  return gpt2_loss(logits, targets);
}

// --- initialisation -----------------------------------------------------------------------------

namespace {

// input_layernorm, post_attention_layernorm, q_norm, k_norm and model.norm: every RMSNorm weight,
// nothing else.
bool is_norm_weight(const std::string& name) {
  const std::string suffix = "norm.weight";
  return name.size() >= suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_bias(const std::string& name) {
  const std::string suffix = ".bias";
  return name.size() >= suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

void init_llama_parameter(const std::string& name, at::Tensor& p, uint64_t seed, bool norm_offset) {
  torch::NoGradGuard no_grad;
  if (is_norm_weight(name)) {
    p.fill_(norm_offset ? 0.0 : 1.0);  // Gemma's (1 + weight) starts at one too
    return;
  }
  if (is_bias(name)) {  // HF zeroes every Linear's bias
    p.zero_();
    return;
  }
  // Drawn in fp32 from the parameter's own generator whatever its dtype, so that a bf16 model
  // gets the rounded fp32 values.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(parameter_seed(name, seed));
  at::Tensor values = at::empty(p.sizes(), at::TensorOptions().dtype(at::kFloat));
  values.normal_(0.0, 0.02, gen);
  p.copy_(values);
}

void init_llama_weights(LlamaImpl& model, uint64_t seed) {
  const bool offset = model.config().norm_offset;
  for (auto& item : model.named_parameters()) {
    init_llama_parameter(item.key(), item.value(), seed, offset);
  }
}

ParamInit llama_param_init(uint64_t seed, bool norm_offset) {
  return [seed, norm_offset](const std::string& name, at::Tensor& full) {
    init_llama_parameter(name, full, seed, norm_offset);
  };
}

}  // namespace fsdp
