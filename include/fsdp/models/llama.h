// Llama as plain LibTorch modules, with Hugging Face's parameter names and layouts.
//
// The module tree mirrors transformers' LlamaForCausalLM, so that a state dict converts by name
// alone: "model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", ...,
// "model.norm.weight", "lm_head.weight". Projections are fsdp::Projection, nn.Linear's layout
// (weight stored (out_features, in_features), as in HF), which can carry a LoRA adapter
// (fsdp/models/lora.h); the head is a torch::nn::Linear. With tie_embeddings there is no lm_head
// module: logits use embed_tokens.weight, and parameters() lists it once, as HF's
// named_parameters() does. Rotary position tables are neither parameters nor buffers (HF registers
// them non-persistent), so they appear in no state dict and are never sharded.
//
// Sharding: LlamaImpl::forward calls every block through fsdp::forward (fsdp/hooks.h), which is a
// plain call until a sharding runtime registers hooks on the blocks (wrap by type
// "LlamaDecoderLayer"). The model itself knows nothing of FSDP.
//
// Initialisation is deterministic per (seed, parameter name) and independent of the world size or
// of the other parameters (fsdp::parameter_seed, shared with GPT-2).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "fsdp/models/attention.h"
#include "fsdp/models/fused_loss.h"
#include "fsdp/models/lora.h"
#include "fsdp/options.h"

namespace fsdp {

// Rotary frequency scaling (HF's rope_scaling / rope_parameters "rope_type"): kNone is the plain
// theta^(-2i/hs); kLinear divides every frequency by `factor` (position interpolation); kLlama3 is
// Llama 3.1's: wavelengths above original_max_position_embeddings / low_freq_factor divided by
// `factor`, those below original / high_freq_factor kept, the band between blended; kLongRope is
// Phi-3's: frequency i divided by short_factor[i], or by long_factor[i] in a forward longer than
// original_max_position_embeddings, and cos and sin scaled by attention_factor.
enum class RopeScalingType { kNone, kLinear, kLlama3, kLongRope };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;  // kLongRope: the model's context over the original (its attention factor)
  double low_freq_factor = 1.0;                     // kLlama3 only
  double high_freq_factor = 4.0;                    // kLlama3 only
  int64_t original_max_position_embeddings = 8192;  // kLlama3 and kLongRope
  std::vector<double> short_factor, long_factor;    // kLongRope: one per rotated channel pair
  // kLongRope: cos and sin are multiplied by it; 0 (default): sqrt(1 + ln factor / ln original)
  // when factor > 1, else 1, as transformers derives it.
  double attention_factor = 0;
};

// Shapes default to HF's LlamaConfig (Llama 2 7B); vocabulary and norm epsilon do not (see there).
// The same module tree serves the Llama-shaped families, each a difference of a field or two, as
// transformers' modular files derive them from Llama: Mistral (no sliding window), Qwen2 (biases on
// the q/k/v projections), Qwen3 (q/k norms), SmolLM3 (layers without rotary embeddings), Phi-3
// (fused projections, partial and longrope rotary embeddings), Gemma 3 (offset and sandwich norms,
// scaled embeddings, GELU, sliding-window layers with their own RoPE base).
struct LlamaConfig {
  int64_t vocab_size = 50257;              // GPT-2's BPE, the tokenizer of this project (HF: 32000)
  int64_t max_position_embeddings = 2048;  // context length: the longest sequence forward accepts
  int64_t dim = 4096;                      // hidden_size: channels of the residual stream
  int64_t n_layer = 32;                    // num_hidden_layers: decoder layers
  int64_t n_head = 32;                     // num_attention_heads (query heads); must divide dim
  int64_t n_kv_head = 0;                   // num_key_value_heads; 0 means n_head (no grouping)
  int64_t intermediate_size = 11008;       // channels of the SwiGLU feed-forward
  double rope_theta = 10000.0;             // base of the rotary frequencies
  double norm_eps = 1e-5;                  // rms_norm_eps, as Llama 2's checkpoints (HF: 1e-6)
  bool tie_embeddings = false;             // tie_word_embeddings: logits use embed_tokens.weight
  // head_dim: channels per attention head; 0 (default) means dim / n_head. Set when the heads'
  // width differs from dim / n_head (some Mistral and Qwen shapes).
  int64_t head_dim_override = 0;
  bool qkv_bias = false;  // biases on q_proj, k_proj, v_proj (Qwen2; Llama's attention_bias)
  bool o_bias = false;    // a bias on o_proj (Llama's attention_bias)
  bool mlp_bias = false;  // biases on gate_proj, up_proj, down_proj (Llama's mlp_bias)
  RopeScaling rope_scaling;
  // Qwen3's RMSNorm of each query and key head over its head_dim channels ("q_norm", "k_norm"),
  // before the rotary embedding. Default false.
  bool qk_norm = false;
  // Layers whose attention rotates neither queries nor keys (SmolLM3's NoPE layers, config.json's
  // no_rope_layers[i] == 0), by index. Default none.
  std::vector<int64_t> nope_layers;
  // Phi-3's fused projections: one "qkv_proj" for queries, keys and values (their rows in that
  // order) and one "gate_up_proj" for the feed-forward's gate and up halves. Default false.
  bool fused_projections = false;
  // The fraction of each head's channels the rotary embedding turns (the first ones; Phi-4-mini's
  // 0.75), the rest passing unrotated. Default 1.
  double partial_rotary_factor = 1.0;
  // Gemma 3. norm_offset: every RMSNorm scales by (1 + weight), its weights starting at zero, in
  // fp32 before the cast back; sandwich_norms: a block normalises the attention's and the
  // feed-forward's outputs too (post_attention_layernorm, then pre_feedforward_layernorm and
  // post_feedforward_layernorm around the feed-forward); embedding_scale: the embeddings are
  // multiplied by it (Gemma: sqrt(dim)), 0 for none; gelu_tanh: the feed-forward's gate takes the
  // tanh-approximated GELU instead of SiLU; attention_scale: scores are multiplied by it
  // (query_pre_attn_scalar^-0.5), 0 for 1/sqrt(head_dim). Defaults: off.
  bool norm_offset = false;
  bool sandwich_norms = false;
  double embedding_scale = 0;
  bool gelu_tanh = false;
  double attention_scale = 0;
  // Layers whose attention sees only the last sliding_window positions (t - s < window), by index,
  // and the RoPE base of those layers (Gemma 3's rope_local_base_freq; rope_scaling applies to the
  // others only). Default none.
  std::vector<int64_t> sliding_layers;
  int64_t sliding_window = 0;
  double local_rope_theta = 10000.0;
  // The attention kernel (fsdp/models/attention.h). Default kAuto: fused on LibTorch 2.x.
  AttentionKernel attention = AttentionKernel::kAuto;
  // RMSNorm, the gated activation and the rotary embedding each one autograd node with a written
  // backward and, on a GPU, its own kernels (fsdp/models/fused_ops.h); false: ATen's composite
  // ops, HF's modules written out (the reference). Default true.
  bool fused_ops = true;
  // Build the parameters deferred (fsdp/init.h), for fully_shard with
  // param_init(llama_param_init(seed)) to materialise each rank's shard. Default false: built and
  // initialised with init_llama_weights(seed 0).
  bool deferred = false;

  // Throws std::invalid_argument naming the first bad field: sizes must be positive (n_kv_head
  // and head_dim_override may be 0), n_head must divide dim unless head_dim_override is set, the
  // key/value heads must divide n_head, the head size must be even (rotary embeddings rotate pairs
  // of channels), a rope scaling's factors must be positive (llama3: high > low), and every NoPE
  // layer must be one of the n_layer.
  void validate() const;

  int64_t kv_heads() const { return n_kv_head == 0 ? n_head : n_kv_head; }
  int64_t head_dim() const { return head_dim_override > 0 ? head_dim_override : dim / n_head; }
  bool rotates(int64_t layer) const;  // false for a NoPE layer
  bool slides(int64_t layer) const;   // true for a sliding-window layer
  // Channels of a head the rotary embedding turns: head_dim() * partial_rotary_factor, truncated.
  int64_t rotary_dim() const {
    return static_cast<int64_t>(static_cast<double>(head_dim()) * partial_rotary_factor);
  }

  // A small model for tests and examples: vocab 256, context 64, 64 channels, 2 layers, 4 query
  // heads sharing 2 key/value heads, feed-forward 176, untied.
  static LlamaConfig tiny();
};

// Root-mean-square norm (HF's LlamaRMSNorm): computed in fp32 whatever the input's dtype, then
// cast back and scaled by the weight. No bias, no mean subtraction.
class LlamaRMSNormImpl : public torch::nn::Module {
 public:
  // offset: Gemma's form, scaled by (1 + weight) in fp32 before the cast back, weight from 0;
  // fused: one autograd node (fsdp/models/fused_ops.h), else ATen's composite ops.
  LlamaRMSNormImpl(int64_t dim, double eps, bool offset = false, bool fused = true);
  at::Tensor forward(const at::Tensor& x);  // [..., dim] -> [..., dim]

  at::Tensor weight;  // (dim)
  double eps = 0;
  bool offset = false;
  bool fused = true;
};
TORCH_MODULE(LlamaRMSNorm);

// Rotary position embedding tables (HF's LlamaRotaryEmbedding, default rope type): cos and sin
// of position * theta^(-2i/head_dim), each frequency repeated for both halves of a head, computed
// once in fp32 for every position up to max_position_embeddings. Shared by all attention layers;
// not a module, so it holds no parameters or buffers.
class LlamaRotaryEmbedding {
 public:
  explicit LlamaRotaryEmbedding(const LlamaConfig& config);
  // Rows [0, T) of the tables in `like`'s dtype and device: cos and sin, each [1, T, rotary_dim]; a
  // longrope model's long tables when T exceeds original_max_position_embeddings.
  std::pair<at::Tensor, at::Tensor> tables(int64_t T, const at::Tensor& like) const;
  // The rows at `positions` [B, T] (CPU, int64), each [B, T, rotary_dim]; a longrope model's long
  // tables when the largest position reaches past original_max_position_embeddings (transformers
  // decides by max(position_ids) + 1 there).
  std::pair<at::Tensor, at::Tensor> tables_at(const at::Tensor& positions,
                                              const at::Tensor& like) const;

 private:
  at::Tensor cos_, sin_;            // [max_position_embeddings, rotary_dim], fp32, CPU
  at::Tensor long_cos_, long_sin_;  // kLongRope only
  int64_t long_after_ = 0;          // kLongRope: T above which the long tables apply
};

// Causal self-attention with rotary embeddings and grouped-query attention ("self_attn"): each
// key/value head serves n_head / kv_heads query heads. `rope` null: a NoPE layer.
class LlamaAttentionImpl : public torch::nn::Module {
 public:
  LlamaAttentionImpl(const LlamaConfig& config, std::shared_ptr<const LlamaRotaryEmbedding> rope);
  // [B, T, C] -> [B, T, C]; `layout`: packed sequences (fsdp/models/attention.h)
  at::Tensor forward(const at::Tensor& x, const SequenceLayout& layout = {});

  Projection q_proj{nullptr};    // C -> nh * hs
  Projection k_proj{nullptr};    // C -> nkv * hs
  Projection v_proj{nullptr};    // C -> nkv * hs
  Projection o_proj{nullptr};    // nh * hs -> C
  LlamaRMSNorm q_norm{nullptr};  // over hs, config.qk_norm only
  LlamaRMSNorm k_norm{nullptr};
  // config.fused_projections: C -> (nh + 2 * nkv) * hs in place of q_proj, k_proj and v_proj.
  Projection qkv_proj{nullptr};
  int64_t n_head = 0, n_kv_head = 0, head_dim = 0;
  AttentionKernel attention = AttentionKernel::kAuto;
  double scale = 0;    // 0: 1 / sqrt(head_dim)
  int64_t window = 0;  // a sliding-window layer's window; 0: every earlier position
  bool fused = true;   // the rotary embedding one node (fsdp/models/fused_ops.h)

 private:
  std::shared_ptr<const LlamaRotaryEmbedding> rope_;
};
TORCH_MODULE(LlamaAttention);

// SwiGLU feed-forward ("mlp"): down_proj(silu(gate_proj(x)) * up_proj(x)).
class LlamaMLPImpl : public torch::nn::Module {
 public:
  explicit LlamaMLPImpl(const LlamaConfig& config);
  at::Tensor forward(const at::Tensor& x);  // [B, T, C] -> [B, T, C]

  Projection gate_proj{nullptr};  // C -> intermediate_size
  Projection up_proj{nullptr};    // C -> intermediate_size
  // config.fused_projections: C -> 2 * intermediate_size (gate, then up) in place of the two.
  Projection gate_up_proj{nullptr};
  Projection down_proj{nullptr};  // intermediate_size -> C
  bool gelu_tanh = false;         // the gate's activation: GELU (tanh) instead of SiLU
  bool fused = true;              // the activation one node (fsdp/models/fused_ops.h)
};
TORCH_MODULE(LlamaMLP);

// One pre-norm decoder layer: x + self_attn(input_layernorm(x)), then
// + mlp(post_attention_layernorm(x)). The unit of sharding. Members are registered in HF's order.
// `rope` null: a layer without rotary embeddings (LlamaConfig::nope_layers).
class LlamaDecoderLayerImpl : public torch::nn::Module {
 public:
  LlamaDecoderLayerImpl(const LlamaConfig& config,
                        std::shared_ptr<const LlamaRotaryEmbedding> rope);
  at::Tensor forward(const at::Tensor& x,
                     const SequenceLayout& layout = {});  // [B, T, C] -> [B, T, C]

  LlamaAttention self_attn{nullptr};
  LlamaMLP mlp{nullptr};
  LlamaRMSNorm input_layernorm{nullptr};
  LlamaRMSNorm post_attention_layernorm{nullptr};
  LlamaRMSNorm pre_feedforward_layernorm{nullptr};   // config.sandwich_norms only
  LlamaRMSNorm post_feedforward_layernorm{nullptr};  // config.sandwich_norms only
};
TORCH_MODULE(LlamaDecoderLayer);

// The "model" submodule: a holder of embeddings, layers and the final norm (HF's LlamaModel).
// It has no forward of its own; LlamaImpl::forward runs its parts.
class LlamaModelImpl : public torch::nn::Module {
 public:
  explicit LlamaModelImpl(const LlamaConfig& config);

  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};  // LlamaDecoderLayer, n_layer of them
  LlamaRMSNorm norm{nullptr};
};
TORCH_MODULE(LlamaModel);

class LlamaImpl : public torch::nn::Module {
 public:
  // Builds the modules and initialises them with init_llama_weights(*this, 0). No default
  // config: the defaults describe a 7B model.
  explicit LlamaImpl(LlamaConfig config);

  // idx [B, T] int64 token ids, T <= max_position_embeddings -> logits [B, T, vocab_size], in
  // the parameters' dtype.
  // idx [B, T] -> logits [B, T, V]; `layout`: packed sequences (fsdp/models/attention.h).
  at::Tensor forward(const at::Tensor& idx, const SequenceLayout& layout = {});
  // The loss against loss.targets, the head and the cross entropy fused so that the logits are
  // never whole (fsdp/models/fused_loss.h).
  at::Tensor forward(const at::Tensor& idx, const SequenceLayout& layout, const LossTargets& loss);

  const LlamaConfig& config() const { return config_; }
  const std::vector<LlamaDecoderLayer>& blocks() const { return blocks_; }
  LlamaModel& model() { return model_; }
  // Null when config().tie_embeddings.
  torch::nn::Linear& lm_head() { return lm_head_; }

 private:
  // The final norm's output [B, T, C]; the head's weight [V, C] (lm_head's, or the embedding's).
  at::Tensor hidden_states(const at::Tensor& idx, const SequenceLayout& layout);
  const at::Tensor& head_weight() const;
  LlamaConfig config_;
  LlamaModel model_{nullptr};
  torch::nn::Linear lm_head_{nullptr};
  std::vector<LlamaDecoderLayer> blocks_;  // the same modules as model_->layers, typed
  at::Tensor embedding_scale_;             // config.embedding_scale as an fp32 scalar, or none
};
TORCH_MODULE(Llama);

// Mean cross entropy over all positions, in fp32: logits [B, T, V], targets [B, T] int64. The
// same function as gpt2_loss (fsdp/models/gpt2.h), under a name tied to no model.
at::Tensor causal_lm_loss(const at::Tensor& logits, const at::Tensor& targets);

// Re-initialises every parameter from (seed, its full name) alone, as HF's LlamaPreTrainedModel
// does: projection and embedding weights ~ N(0, 0.02) (no residual scaling), RMSNorm weights 1.
void init_llama_weights(LlamaImpl& model, uint64_t seed);

// One parameter's initial values, by its qualified name, as init_llama_weights gives them.
void init_llama_parameter(const std::string& name, at::Tensor& p, uint64_t seed,
                          bool norm_offset = false);

// init_llama_parameter as a ShardingOptions::param_init, for a model built with config.deferred.
// norm_offset: norm weights start at zero (LlamaConfig::norm_offset).
ParamInit llama_param_init(uint64_t seed, bool norm_offset = false);

}  // namespace fsdp
