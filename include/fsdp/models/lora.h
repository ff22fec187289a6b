// LoRA (low-rank adaptation) as PEFT defines it, for the linear layers of the model families: a
// layer W (frozen) gains two small trainable matrices A [r, in] and B [out, r], and computes
//   y = W x + b + scaling * B (A (dropout(x))),   scaling = alpha / r   (alpha / sqrt(r): rsLoRA)
// with A drawn Kaiming-uniform (a = sqrt(5), PyTorch's nn.Linear default: U(-1/sqrt(in),
// 1/sqrt(in))) and B zero, so that training starts from the base model exactly. A and B are
// registered on the layer as submodules "lora_A" and "lora_B" holding a "weight" each, so their
// names are the layer's plus "lora_A.weight": PEFT's adapter_model.safetensors keys without its
// "base_model.model." prefix (hf/peft.h maps them).
//
// Which layers carry adapters: Projection (Llama-family projections, weight [out, in]) and GPT-2's
// Conv1D (weight [in, out], PEFT's fan_in_fan_out): both implement LoraTarget. add_lora walks a
// model and adds adapters where the target names match, as PEFT's target_modules do.
// Thread-safety: adapters are added while no forward runs.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fsdp {

struct LoraOptions {
  int64_t r = 8;        // the rank; PEFT's default 8
  double alpha = 8;     // lora_alpha; PEFT's default 8
  double dropout = 0;   // lora_dropout on the adapter's input, in training only
  bool rslora = false;  // use_rslora: scaling alpha / sqrt(r) instead of alpha / r
  double scaling() const;
};

// The adapter half of a layer: what a LoraTarget holds once add_lora has reached it.
class LoraBranch {
 public:
  // Registers lora_A (in -> r) and lora_B (r -> out) on `owner`, A drawn from `seed`, B zero.
  void attach(torch::nn::Module& owner, int64_t in_features, int64_t out_features,
              const LoraOptions& options, uint64_t seed);
  bool attached() const { return !A.is_empty(); }
  // scaling * B (A (dropout(x))); dropout only while `training`.
  at::Tensor forward(const at::Tensor& x, bool training) const;
  // scaling * B A, [out, in]: what merging adds to a [out, in] weight.
  at::Tensor delta() const;

  torch::nn::Linear A{nullptr}, B{nullptr};
  LoraOptions options;
};

// A layer add_lora can adapt.
class LoraTarget {
 public:
  virtual ~LoraTarget() = default;
  virtual int64_t in_features() const = 0;
  virtual int64_t out_features() const = 0;
  virtual LoraBranch& lora() = 0;
};

// A linear layer y = x W^T + b (weight [out, in], optional bias [out]), as torch::nn::Linear,
// that can carry a LoRA adapter. The Llama family's projections.
class ProjectionImpl : public torch::nn::Module, public LoraTarget {
 public:
  ProjectionImpl(int64_t in_features, int64_t out_features, bool bias);
  at::Tensor forward(const at::Tensor& x);
  int64_t in_features() const override { return weight.size(1); }
  int64_t out_features() const override { return weight.size(0); }
  LoraBranch& lora() override { return lora_; }

  at::Tensor weight;  // [out, in]
  at::Tensor bias;    // [out], or undefined

 private:
  LoraBranch lora_;
};
TORCH_MODULE(Projection);

// What add_lora adapts and leaves training.
struct LoraSettings {
  LoraOptions options;
  // PEFT's target_modules as a list: a layer is adapted when its qualified name equals an entry
  // or ends with "." + the entry ("q_proj" matches "model.layers.0.self_attn.q_proj").
  // "all-linear": every LoraTarget (PEFT's: every linear layer but the output head, which is no
  // LoraTarget here).
  std::vector<std::string> target_modules;
  // Modules trained in full beside the adapters (PEFT's modules_to_save), matched as above:
  // their parameters keep requires_grad.
  std::vector<std::string> modules_to_save;
  uint64_t seed = 0;  // the adapters' A values derive from it and their names
};

// Adds an adapter to every LoraTarget of `root` that settings.target_modules names, then leaves
// training only the adapters and the modules_to_save (requires_grad false on everything else).
// Returns the adapted layers' names. Throws std::invalid_argument, naming the entry and listing
// the names there are, for a target or a module to save that matches nothing, and for r < 1.
std::vector<std::string> add_lora(torch::nn::Module& root, const LoraSettings& settings);

// Whether `name` (a qualified module name) is matched by `pattern` as PEFT matches a list entry.
bool lora_name_matches(const std::string& name, const std::string& pattern);
// Whether a parameter is an adapter's (a lora_A or lora_B weight).
bool is_lora_parameter(const std::string& name);
// Whether module `module` is the modules_to_save entry `entry`, as PEFT's _set_trainable matches
// them: its name ends with the entry (a plain suffix, no dot).
bool saves_module(const std::string& module, const std::string& entry);
// Whether parameter `name` belongs to a module to save (or to one inside it): it trains in full.
bool in_saved_module(const std::string& name, const std::vector<std::string>& modules_to_save);

}  // namespace fsdp
