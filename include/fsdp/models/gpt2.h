// GPT-2 as plain LibTorch modules, with Hugging Face's parameter names and layouts.
//
// The module tree mirrors transformers' GPT2LMHeadModel, so that a state dict converts by name
// alone: "transformer.wte.weight", "transformer.h.0.attn.c_attn.weight", ... The attention and MLP
// projections are HF's Conv1D (weight stored (in_features, out_features), y = x W + b). There is
// no separate lm_head parameter: logits use wte.weight transposed (tied embeddings), so
// parameters() lists wte.weight once.
//
// Sharding: GPT2Impl::forward calls every block through fsdp::forward (fsdp/hooks.h), which is a
// plain call until a sharding runtime registers hooks on the blocks (wrap by type "GPT2Block").
// The model itself knows nothing of FSDP.
//
// Initialisation is deterministic per (seed, parameter name) and independent of the world size or
// of the other parameters, so every rank (and every model depth) derives the same values.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/models/attention.h"
#include "fsdp/models/fused_loss.h"
#include "fsdp/models/lora.h"
#include "fsdp/options.h"

namespace fsdp {

struct GPT2Config {
  int64_t vocab_size = 50257;    // tokens in the vocabulary (GPT-2's BPE: 50257)
  int64_t n_positions = 1024;    // context length: the longest sequence forward accepts
  int64_t n_embd = 768;          // channels of the residual stream
  int64_t n_layer = 12;          // transformer blocks
  int64_t n_head = 12;           // attention heads; must divide n_embd
  double layer_norm_eps = 1e-5;  // epsilon of every LayerNorm
  // The attention kernel (fsdp/models/attention.h). Default kAuto: fused on LibTorch 2.x.
  AttentionKernel attention = AttentionKernel::kAuto;
  // Build the parameters deferred (fsdp/init.h): shapes without bytes, each submodule released as
  // soon as it is built, for fully_shard with param_init(gpt2_param_init(...)) to materialise only
  // each rank's shard. Default false: built and initialised with init_gpt2_weights(seed 0).
  bool deferred = false;

  // Throws std::invalid_argument naming the first bad field.
  void validate() const;

  // GPT-2 small, 124M parameters (the defaults above).
  static GPT2Config gpt2_124m();
  // A small model for tests and examples: vocab 256, context 64, 64 channels, 2 layers, 4 heads.
  static GPT2Config tiny();
};

// HF's Conv1D: a linear layer whose weight is stored transposed, (in_features, out_features). It
// can carry a LoRA adapter (fsdp/models/lora.h), whose A and B keep nn.Linear's layout as PEFT's
// do on a Conv1D (fan_in_fan_out: only a merge transposes).
class Conv1DImpl : public torch::nn::Module, public LoraTarget {
 public:
  Conv1DImpl(int64_t in_features, int64_t out_features);
  // x [..., in_features] -> [..., out_features]
  at::Tensor forward(const at::Tensor& x);
  int64_t in_features() const override { return weight.size(0); }
  int64_t out_features() const override { return weight.size(1); }
  LoraBranch& lora() override { return lora_; }

  at::Tensor weight;  // (in_features, out_features)
  at::Tensor bias;    // (out_features)

 private:
  LoraBranch lora_;
};
TORCH_MODULE(Conv1D);

// Causal multi-head self-attention ("attn"), written out without fused kernels.
class GPT2AttentionImpl : public torch::nn::Module {
 public:
  explicit GPT2AttentionImpl(const GPT2Config& config);
  // [B, T, C] -> [B, T, C]; `layout`: packed sequences (fsdp/models/attention.h)
  at::Tensor forward(const at::Tensor& x, const SequenceLayout& layout = {});

  Conv1D c_attn{nullptr};  // C -> 3C: queries, keys, values
  Conv1D c_proj{nullptr};  // C -> C
  int64_t n_head = 0;
  AttentionKernel attention = AttentionKernel::kAuto;
};
TORCH_MODULE(GPT2Attention);

// Feed-forward ("mlp"): C -> 4C, GELU (tanh approximation, HF's "gelu_new"), 4C -> C.
class GPT2MLPImpl : public torch::nn::Module {
 public:
  explicit GPT2MLPImpl(const GPT2Config& config);
  at::Tensor forward(const at::Tensor& x);  // [B, T, C] -> [B, T, C]

  Conv1D c_fc{nullptr};
  Conv1D c_proj{nullptr};
};
TORCH_MODULE(GPT2MLP);

// One pre-norm transformer block: x + attn(ln_1(x)), then + mlp(ln_2(x)). The unit of sharding.
class GPT2BlockImpl : public torch::nn::Module {
 public:
  explicit GPT2BlockImpl(const GPT2Config& config);
  at::Tensor forward(const at::Tensor& x, const SequenceLayout& layout = {});  // [B, T, C]

  torch::nn::LayerNorm ln_1{nullptr};
  GPT2Attention attn{nullptr};
  torch::nn::LayerNorm ln_2{nullptr};
  GPT2MLP mlp{nullptr};
};
TORCH_MODULE(GPT2Block);

// The "transformer" submodule: a holder of embeddings, blocks and the final norm (HF's GPT2Model).
// It has no forward of its own; GPT2Impl::forward runs its parts.
class GPT2TransformerImpl : public torch::nn::Module {
 public:
  explicit GPT2TransformerImpl(const GPT2Config& config);

  torch::nn::Embedding wte{nullptr};  // token embeddings, also the output projection
  torch::nn::Embedding wpe{nullptr};  // learned position embeddings
  torch::nn::ModuleList h{nullptr};   // GPT2Block, n_layer of them
  torch::nn::LayerNorm ln_f{nullptr};
};
TORCH_MODULE(GPT2Transformer);

class GPT2Impl : public torch::nn::Module {
 public:
  // Builds the modules and initialises them with init_gpt2_weights(*this, 0).
  explicit GPT2Impl(GPT2Config config = {});

  // idx [B, T] int64 token ids, T <= n_positions -> logits [B, T, vocab_size]; `layout`: packed
  // sequences, each with its own positions (fsdp/models/attention.h).
  at::Tensor forward(const at::Tensor& idx, const SequenceLayout& layout = {});
  // The loss against loss.targets, the head and the cross entropy fused so that the logits are
  // never whole (fsdp/models/fused_loss.h).
  at::Tensor forward(const at::Tensor& idx, const SequenceLayout& layout, const LossTargets& loss);

  const GPT2Config& config() const { return config_; }
  const std::vector<GPT2Block>& blocks() const { return blocks_; }
  GPT2Transformer& transformer() { return transformer_; }

 private:
  at::Tensor hidden_states(const at::Tensor& idx, const SequenceLayout& layout);  // ln_f's output
  GPT2Config config_;
  GPT2Transformer transformer_{nullptr};
  std::vector<GPT2Block> blocks_;  // the same modules as transformer_->h, typed
};
TORCH_MODULE(GPT2);

// Mean cross entropy over all positions: logits [B, T, V], targets [B, T] int64 (-100: ignored,
// as LibTorch's cross entropy). Computed in fp32 a chunk of rows at a time, whatever the logits'
// dtype, so that a bf16 forward still gets an accurate loss. For backward it keeps the logits as
// they are and makes one tensor of their size and dtype, their gradient (an fp32 cast, log_softmax
// and nll_loss held three fp32 copies at once).
at::Tensor gpt2_loss(const at::Tensor& logits, const at::Tensor& targets);

// The same cross entropy summed over the targets that count (not -100) instead of averaged: the
// loss of a micro-batch whose normaliser is the count over a whole step (instruction data, whose
// micro-batches and ranks hold different numbers of targets). 0 where no target counts.
at::Tensor token_loss_sum(const at::Tensor& logits, const at::Tensor& targets);

// Re-initialises every parameter from (seed, its full name) alone, as GPT-2 does: weights of
// projections and embeddings ~ N(0, 0.02), the residual projections "c_proj.weight" ~
// N(0, 0.02 / sqrt(2 * n_layer)), biases 0, LayerNorm weights 1.
void init_gpt2_weights(GPT2Impl& model, uint64_t seed);

// One parameter's initial values, by its qualified name, as init_gpt2_weights gives them.
void init_gpt2_parameter(const GPT2Config& config, const std::string& name, at::Tensor& p,
                         uint64_t seed);

// init_gpt2_parameter as a ShardingOptions::param_init, for a model built with config.deferred.
ParamInit gpt2_param_init(const GPT2Config& config, uint64_t seed);

// The seed of the CPU generator that fills the parameter `name`: FNV-1a 64 of the name, mixed
// with `seed` (splitmix64). Stable across runs, platforms and releases of this library.
uint64_t parameter_seed(const std::string& name, uint64_t seed);

}  // namespace fsdp
