// LoRA adapters on the families' linear layers (fsdp/models/lora.h): the branch A, B and its
// scaling, the Projection layer that carries one, and add_lora's walk over a model, which follows
// PEFT's rules for target_modules and modules_to_save (peft/tuners/tuners_utils.py,
// check_target_module_exists; peft/utils/other.py, _set_trainable).
#include "fsdp/models/lora.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/functional/dropout.h>

#include <cmath>
#include <set>
#include <stdexcept>

#include "fsdp/models/matmul.h"

namespace fsdp {

double LoraOptions::scaling() const {
  return rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r);
}

void LoraBranch::attach(torch::nn::Module& owner, int64_t in_features, int64_t out_features,
                        const LoraOptions& o, uint64_t seed) {
  options = o;
  A = owner.register_module(
      "lora_A", torch::nn::Linear(torch::nn::LinearOptions(in_features, o.r).bias(false)));
  B = owner.register_module(
      "lora_B", torch::nn::Linear(torch::nn::LinearOptions(o.r, out_features).bias(false)));
  at::NoGradGuard no_grad;
  // kaiming_uniform_(a = sqrt(5)) on [r, in]: gain sqrt(2 / (1 + 5)), bound gain * sqrt(3 / in),
  // which is 1 / sqrt(in); drawn from a generator of the adapter's own, so that the values depend
  // on the seed and the layer alone.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  A->weight.uniform_(-bound, bound, gen);
  B->weight.zero_();
}

at::Tensor LoraBranch::forward(const at::Tensor& x, bool training) const {
  const at::Tensor in = options.dropout > 0 ? at::dropout(x, options.dropout, training) : x;
  return fsdp::linear(fsdp::linear(in, A->weight), B->weight) * options.scaling();
}

at::Tensor LoraBranch::delta() const {
  return at::matmul(B->weight, A->weight) * options.scaling();
}

ProjectionImpl::ProjectionImpl(int64_t in_features, int64_t out_features, bool with_bias) {
  // Zeros until the family's initialisation draws the values.
  weight = register_parameter("weight", at::zeros({out_features, in_features}));
  if (with_bias) bias = register_parameter("bias", at::zeros({out_features}));
}

at::Tensor ProjectionImpl::forward(const at::Tensor& x) {
  at::Tensor y = fsdp::linear(x, weight, bias);
  if (lora_.attached()) y = y + lora_.forward(x, is_training());
  return y;
}

bool lora_name_matches(const std::string& name, const std::string& pattern) {
  if (name == pattern) return true;
  const std::string tail = "." + pattern;
  return name.size() > tail.size() &&
         name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
}

bool is_lora_parameter(const std::string& name) {
  return name.find(".lora_A.") != std::string::npos || name.find(".lora_B.") != std::string::npos;
}

bool saves_module(const std::string& module, const std::string& entry) {
  return module.size() >= entry.size() &&
         module.compare(module.size() - entry.size(), entry.size(), entry) == 0;
}

bool in_saved_module(const std::string& name, const std::vector<std::string>& modules_to_save) {
  // Every dot-prefix of a parameter's name is a module holding it.
  for (size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', dot + 1)) {
    const std::string module = name.substr(0, dot);
    for (const auto& entry : modules_to_save) {
      if (saves_module(module, entry)) return true;
    }
  }
  return false;
}

namespace {

std::string listing(const std::set<std::string>& names) {
  std::string s;
  size_t shown = 0;
  for (const auto& n : names) {
    if (shown++ == 12) {
      s += ", ... (" + std::to_string(names.size()) + " in all)";
      break;
    }
    s += (s.empty() ? "" : ", ") + n;
  }
  return s;
}

// The last component of a qualified module name ("q_proj" of "model.layers.0.self_attn.q_proj").
std::string last_part(const std::string& name) {
  const auto dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

// A seed per adapted layer: the settings' seed and the layer's name (FNV-1a, the same with every
// standard library), so that a layer's adapter is the same whatever else the model holds.
uint64_t layer_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 14695981039346656037ull ^ seed;
  for (const unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

void check_settings(const LoraSettings& s) {
  if (s.options.r < 1) {
    throw std::invalid_argument("lora.r must be at least 1, got " + std::to_string(s.options.r));
  }
  if (s.options.dropout < 0 || s.options.dropout >= 1) {
    throw std::invalid_argument("lora.dropout must be in [0, 1), got " +
                                std::to_string(s.options.dropout));
  }
  if (s.target_modules.empty()) {
    throw std::invalid_argument("lora.target_modules is empty: name the layers to adapt");
  }
}

}  // namespace

std::vector<std::string> add_lora(torch::nn::Module& root, const LoraSettings& settings) {
  check_settings(settings);
  const bool all_linear =
      settings.target_modules.size() == 1 && settings.target_modules.front() == "all-linear";
  std::set<std::string> targets;  // every LoraTarget's last name part, for the error
  std::vector<std::pair<std::string, LoraTarget*>> chosen;
  std::vector<bool> used(settings.target_modules.size(), false);
  for (const auto& item : root.named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    auto* target = dynamic_cast<LoraTarget*>(item.value().get());
    if (target == nullptr) continue;
    targets.insert(last_part(item.key()));
    bool match = all_linear;
    for (size_t i = 0; !all_linear && i < settings.target_modules.size(); ++i) {
      if (lora_name_matches(item.key(), settings.target_modules[i])) match = used[i] = true;
    }
    if (match) chosen.emplace_back(item.key(), target);
  }
  for (size_t i = 0; !all_linear && i < used.size(); ++i) {
    if (used[i]) continue;
    throw std::invalid_argument("lora.target_modules: '" + settings.target_modules[i] +
                                "' matches no linear layer of the model; its layers are " +
                                listing(targets) + " (or all-linear)");
  }
  std::vector<std::string> adapted;
  for (auto& [name, target] : chosen) {
    if (target->lora().attached()) {
      throw std::invalid_argument("lora: layer '" + name + "' already has an adapter");
    }
    auto* module = dynamic_cast<torch::nn::Module*>(target);
    target->lora().attach(*module, target->in_features(), target->out_features(), settings.options,
                          layer_seed(settings.seed, name));
    adapted.push_back(name);
  }
  // Only the adapters and the modules to save train.
  std::vector<bool> saved_used(settings.modules_to_save.size(), false);
  std::set<std::string> module_names;
  for (const auto& item : root.named_modules("", /*include_self=*/false)) {
    module_names.insert(last_part(item.key()));
    for (size_t i = 0; i < settings.modules_to_save.size(); ++i) {
      saved_used[i] = saved_used[i] || saves_module(item.key(), settings.modules_to_save[i]);
    }
  }
  for (size_t i = 0; i < saved_used.size(); ++i) {
    if (saved_used[i]) continue;
    throw std::invalid_argument("lora.modules_to_save: '" + settings.modules_to_save[i] +
                                "' matches no module of the model; its modules are " +
                                listing(module_names));
  }
  for (auto& item : root.named_parameters(/*recurse=*/true)) {
    item.value().requires_grad_(is_lora_parameter(item.key()) ||
                                in_saved_module(item.key(), settings.modules_to_save));
  }
  return adapted;
}

}  // namespace fsdp
