// Helpers the single-process model tests share (GPT-2, Llama): token batches, parameters by name,
// and hooks that stand in for a sharding runtime at the fsdp::forward seam. Header-only, so that a
// model test needs no comm layer.
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>

#include <map>
#include <string>
#include <vector>

#include "fsdp/hooks.h"

namespace fsdp {
namespace test {

// Token ids [B, T] uniform in [0, V), drawn from `seed`.
inline at::Tensor random_tokens(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randint(V, {B, T}, gen, at::kLong);
}

// The module's parameters by qualified name (handles, not copies).
inline std::map<std::string, at::Tensor> params_by_name(const torch::nn::Module& model) {
  std::map<std::string, at::Tensor> out;
  for (const auto& item : model.named_parameters()) out[item.key()] = item.value();
  return out;
}

// Counts calls and scales the block's output, as a sharding runtime would intercept it.
class ScalingHooks : public ModuleHooks {
 public:
  explicit ScalingHooks(double scale) : scale_(scale) {}
  void pre_forward() override { ++pre; }
  std::vector<at::Tensor> post_forward(std::vector<at::Tensor> outputs) override {
    ++post;
    for (auto& t : outputs) t = t * scale_;
    return outputs;
  }
  int pre = 0, post = 0;

 private:
  double scale_;
};

}  // namespace test
}  // namespace fsdp
