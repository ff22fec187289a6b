// The base of the shard optimizers: checking the shards handed in, turning each decay mask into
// the regions that get weight decay, zero_grad and the learning rate.
#include <torch/torch.h>

#include <stdexcept>
#include <string>

#include "fsdp/optim.h"

namespace fsdp {
namespace {

// Above this many runs a mask is applied through where() instead of one narrow() per run.
constexpr size_t kMaxDecayRuns = 256;

std::string describe_tensor(const at::Tensor& t) {
  if (!t.defined()) return "undefined";
  return std::string(c10::toString(t.scalar_type())) + " with " + std::to_string(t.numel()) +
         " elements";
}

[[noreturn]] void bad_shard(const char* who, size_t i, const std::string& what,
                            const ShardedParam& s) {
  throw std::invalid_argument(std::string(who) + ": shard " + std::to_string(i) + " " + what +
                              " (param " + describe_tensor(s.param) + ", grad " +
                              describe_tensor(s.grad) + ", decay_mask " +
                              describe_tensor(s.decay_mask) + ")");
}

void check_shard(const char* who, size_t i, const ShardedParam& s) {
  if (!s.param.defined() || !s.grad.defined()) bad_shard(who, i, "lacks a param or grad", s);
  if (s.param.scalar_type() != at::kFloat || s.grad.scalar_type() != at::kFloat) {
    bad_shard(who, i, "is not fp32", s);
  }
  if (s.grad.numel() != s.param.numel()) bad_shard(who, i, "has a grad of another size", s);
  if (!s.param.is_contiguous() || !s.grad.is_contiguous())
    bad_shard(who, i, "is not contiguous", s);
  if (s.decay_mask.defined() &&
      (s.decay_mask.scalar_type() != at::kFloat || s.decay_mask.numel() != s.param.numel())) {
    bad_shard(who, i, "has a decay mask that is not fp32 of the param's size", s);
  }
}

detail::DecayRegions decay_regions(const char* who, size_t i, const ShardedParam& s) {
  detail::DecayRegions r;
  const int64_t n = s.param.numel();
  if (!s.decay_mask.defined()) {
    if (n > 0) r.runs.emplace_back(0, n);
    return r;
  }
  const at::Tensor on_device = s.decay_mask.reshape({-1}).ne(0);
  if (!s.decay_mask.reshape({-1}).eq(1).eq(on_device).all().item<bool>()) {
    bad_shard(who, i, "has a decay mask with values other than 0 and 1", s);
  }
  const at::Tensor on = on_device.to(at::kCPU).contiguous();  // read here, once
  const bool* m = on.data_ptr<bool>();
  for (int64_t k = 0; k < n;) {
    if (!m[k]) {
      ++k;
      continue;
    }
    const int64_t begin = k;
    while (k < n && m[k]) ++k;
    r.runs.emplace_back(begin, k);
  }
  if (r.runs.size() > kMaxDecayRuns) {
    r.runs.clear();
    r.dense = on_device;
  }
  return r;
}

}  // namespace

ShardedOptimizer::ShardedOptimizer(std::vector<ShardedParam> params, double lr, const char* name)
    : params_(std::move(params)), lr_(lr) {
  set_lr(lr);
  for (size_t i = 0; i < params_.size(); ++i) {
    check_shard(name, i, params_[i]);
    decay_.push_back(decay_regions(name, i, params_[i]));
    // The regions replace the mask: an fp32 mask is as large as the shard itself (a quarter of
    // the rank's model state next to param, grad, m and v), too much to keep for nothing.
    params_[i].decay_mask = at::Tensor();
  }
}

void ShardedOptimizer::zero_grad() {
  for (auto& s : params_) s.grad.zero_();
}

void ShardedOptimizer::set_lr(double lr) {
  if (!(lr >= 0))
    throw std::invalid_argument("learning rate must be >= 0, got " + std::to_string(lr));
  lr_ = lr;
}

void ShardedOptimizer::set_step_count(int64_t steps) {
  if (steps < 0)
    throw std::invalid_argument("step count must be >= 0, got " + std::to_string(steps));
  step_count_ = steps;
}

void ShardedOptimizer::on_decayed(size_t i, const at::Tensor& t, const RegionFn& fn) const {
  const detail::DecayRegions& r = decay_[i];
  at::Tensor flat = t.view({-1});
  if (r.dense.defined()) {
    at::Tensor changed = flat.clone();
    fn(changed, 0, flat.numel());
    flat.copy_(at::where(r.dense, changed, flat));
    return;
  }
  for (const auto& [begin, end] : r.runs) {
    at::Tensor region = flat.narrow(0, begin, end - begin);
    fn(region, begin, end - begin);
  }
}

void ShardedOptimizer::wait_writable() const {
  if (!params_.empty() && params_.front().before_step) params_.front().before_step();
  for (const ShardedParam& s : params_) {
    if (s.wait_writable) s.wait_writable();
  }
}

void ShardedOptimizer::step_each(const std::function<void(size_t)>& step_shard) {
  for (size_t i = params_.size(); i-- > 0;) {
    step_shard(i);
    if (params_[i].stepped) params_[i].stepped();
  }
}

}  // namespace fsdp
