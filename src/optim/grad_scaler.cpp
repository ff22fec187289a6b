// ShardedGradScaler: unscaling each rank's gradient shards, agreeing across ranks on whether any
// held an inf or NaN, and the scale's backoff and growth in fp32, as torch's _amp_update_scale_.
#include "fsdp/grad_scaler.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "fsdp/optim.h"

namespace fsdp {
namespace {

// Elements checked at a time: bounds the temporary bool tensor of the finiteness test (1 MiB)
// whatever the shard's size.
constexpr int64_t kScanChunk = int64_t{1} << 20;

void check_options(const GradScalerOptions& o) {
  auto require = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument("GradScalerOptions: " + what);
  };
  require(std::isfinite(o.init_scale) && o.init_scale > 0 &&
              o.init_scale <= std::numeric_limits<float>::max(),
          "init_scale must be a positive fp32 value, got " + std::to_string(o.init_scale));
  require(std::isfinite(o.growth_factor) && o.growth_factor > 1,
          "growth_factor must be > 1, got " + std::to_string(o.growth_factor));
  require(o.backoff_factor > 0 && o.backoff_factor < 1,
          "backoff_factor must be in (0, 1), got " + std::to_string(o.backoff_factor));
  require(o.growth_interval >= 1,
          "growth_interval must be >= 1, got " + std::to_string(o.growth_interval));
  require(std::isfinite(o.min_scale) && o.min_scale > 0 && o.min_scale <= o.init_scale,
          "min_scale must be in (0, init_scale], got " + std::to_string(o.min_scale));
}

// g *= inv_scale in place, in chunks; `found` (a bool scalar) is set where g holds an inf or NaN.
void unscale_and_check(const at::Tensor& g, float inv_scale, at::Tensor& found) {
  const at::Tensor flat = g.reshape({-1});
  for (int64_t begin = 0; begin < flat.numel(); begin += kScanChunk) {
    at::Tensor chunk = flat.narrow(0, begin, std::min(kScanChunk, flat.numel() - begin));
    chunk.mul_(inv_scale);
    found.logical_or_(at::isfinite(chunk).logical_not().any());
  }
}

// Unscales every gradient in place and says whether one holds an inf or NaN, reading the device
// once. On a GPU torch's fused kernel (the one GradScaler uses) does both in one pass over all
// of them; LibTorch 1.13 has it only for CUDA, so host gradients (the CPU, offloaded shards) go
// through the chunked loop above.
bool unscale_all(const std::vector<at::Tensor>& grads, float inv_scale) {
  if (grads.empty()) return false;
  const at::TensorOptions on = grads.front().options();
  if (on.device().is_cuda()) {
    at::Tensor found = at::zeros({1}, on.dtype(at::kFloat));
    at::Tensor inv = at::full({1}, inv_scale, on.dtype(at::kFloat));
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found, inv);
    return found.item<float>() != 0;
  }
  at::Tensor found = at::zeros({}, on.dtype(at::kBool));
  for (const auto& g : grads) unscale_and_check(g, inv_scale, found);
  return found.item<bool>();
}

std::string format_scale(double scale) {
  std::ostringstream s;
  s << scale;
  return s.str();
}

}  // namespace

ShardedGradScaler::ShardedGradScaler(GradScalerOptions options) : options_(options) {
  check_options(options_);
  state_.scale = static_cast<float>(options_.init_scale);
}

at::Tensor ShardedGradScaler::scale(const at::Tensor& loss) const {
  return loss * static_cast<double>(state_.scale);
}

bool ShardedGradScaler::unscale(const ShardedOptimizer& opt, Comm& world) {
  if (phase_ != Phase::kReady) {
    throw std::logic_error(
        "ShardedGradScaler::unscale: already called for this step (call update() after step())");
  }
  at::NoGradGuard no_grad;
  // torch computes 1/scale in double and rounds it to fp32: for a power of two, exact.
  const float inv_scale = static_cast<float>(1.0 / static_cast<double>(state_.scale));
  std::vector<at::Tensor> grads;
  for (const auto& s : opt.params()) {
    if (s.grad.numel() > 0) grads.push_back(s.grad);
  }
  float flag = unscale_all(grads, inv_scale) ? 1.0f : 0.0f;
  world.set_context("grad scaler: all_reduce of the inf/NaN flag");
  world.all_reduce(&flag, 1, DType::kFloat32, ReduceOp::kSum);
  found_inf_ = flag > 0;
  phase_ = Phase::kUnscaled;
  return found_inf_;
}

bool ShardedGradScaler::step(ShardedOptimizer& opt, Comm& world) {
  if (phase_ == Phase::kStepped) {
    throw std::logic_error("ShardedGradScaler::step: already called for this step");
  }
  if (phase_ == Phase::kReady) unscale(opt, world);
  phase_ = Phase::kStepped;
  if (found_inf_) return false;
  opt.step();
  return true;
}

void ShardedGradScaler::update() {
  if (phase_ != Phase::kStepped) {
    throw std::logic_error("ShardedGradScaler::update: no step() since the last update()");
  }
  phase_ = Phase::kReady;
  if (!found_inf_) {
    skipped_in_a_row_ = 0;
    if (++state_.growth_tracker < options_.growth_interval) return;
    state_.growth_tracker = 0;
    const float grown = state_.scale * static_cast<float>(options_.growth_factor);
    if (std::isfinite(grown)) state_.scale = grown;  // torch keeps the scale rather than reach inf
    return;
  }
  ++skipped_in_a_row_;
  state_.growth_tracker = 0;
  const float backed_off = state_.scale * static_cast<float>(options_.backoff_factor);
  if (!(backed_off >= options_.min_scale)) {
    throw LossScaleUnderflow(
        "fp16 loss scale underflow: " + std::to_string(skipped_in_a_row_) +
        " steps in a row had inf or NaN gradients and were skipped; backing off again would take "
        "the loss scale from " +
        format_scale(state_.scale) + " to " + format_scale(backed_off) +
        ", below grad_scaler.min_scale (" + format_scale(options_.min_scale) +
        "): the loss or its gradients are not finite at any scale (training diverged: lower "
        "optim.lr, or train in bf16)");
  }
  state_.scale = backed_off;
}

void ShardedGradScaler::load_state(const GradScalerState& state) {
  if (!std::isfinite(state.scale) || !(state.scale > 0) || state.growth_tracker < 0) {
    throw std::invalid_argument("ShardedGradScaler::load_state: scale " +
                                format_scale(state.scale) + " and growth_tracker " +
                                std::to_string(state.growth_tracker) +
                                " are not a scaler's state (positive scale, count >= 0)");
  }
  state_ = state;
  phase_ = Phase::kReady;
  found_inf_ = false;
  skipped_in_a_row_ = 0;
}

}  // namespace fsdp
