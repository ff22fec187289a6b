// AdamW over shards: torch::optim::AdamW's step (LibTorch 1.13, amsgrad off), with the decoupled
// weight decay applied only where the shard's decay mask is 1. Owns the choice of path per shard
// (AdamWImpl), the op-by-op path and the GPU's fused path (ATen's multi-tensor kernel over a
// shard's decayed and undecayed runs); the CPU's fused kernel is in adamw_fused.cpp.
#include <torch/torch.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "compat.h"
#include "fsdp/optim.h"
#include "optim/adamw_fused.h"

namespace fsdp {
namespace {

void check_options(const AdamWOptions& o) {
  auto require = [](bool ok, const char* field, double value) {
    if (!ok) {
      throw std::invalid_argument(std::string("AdamWOptions.") + field +
                                  " out of range: " + std::to_string(value));
    }
  };
  require(o.beta1 >= 0 && o.beta1 < 1, "beta1", o.beta1);
  require(o.beta2 >= 0 && o.beta2 < 1, "beta2", o.beta2);
  require(o.eps >= 0, "eps", o.eps);
  require(o.weight_decay >= 0, "weight_decay", o.weight_decay);
}

// What a fused kernel needs (fp32 and contiguity the base class has already checked, but a
// kernel reading raw pointers should not rely on a check made elsewhere): fsdp's on the CPU,
// ATen's on a CUDA GPU where the LibTorch has it.
bool fusable(const ShardedParam& s) {
  auto ok = [&](const at::Tensor& t) {
    const bool device = t.device().is_cpu() || (t.is_cuda() && compat::kHasFusedAdamW);
    return device && t.device() == s.param.device() && t.scalar_type() == at::kFloat &&
           t.is_contiguous();
  };
  return ok(s.param) && ok(s.grad);
}

std::string describe(const at::Tensor& t) {
  return std::string(c10::toString(t.scalar_type())) + " on " + t.device().str() +
         (t.is_contiguous() ? "" : ", not contiguous");
}

bool use_fused(AdamWImpl impl, size_t i, const ShardedParam& s) {
  if (impl == AdamWImpl::kReference) return false;
  if (impl == AdamWImpl::kAuto) return fusable(s) && s.param.is_cpu();  // AdamWImpl::kAuto says why
  if (fusable(s)) return true;
  throw std::invalid_argument(
      std::string("AdamW: impl kFused needs contiguous fp32 shards on the CPU") +
      (compat::kHasFusedAdamW ? " or a CUDA GPU" : "") + ", but shard " + std::to_string(i) +
      " has param " + describe(s.param) + " and grad " + describe(s.grad) +
      " (kAuto steps it op by op)");
}

}  // namespace

AdamW::AdamW(std::vector<ShardedParam> params, AdamWOptions options)
    : ShardedOptimizer(std::move(params), options.lr, "AdamW"), options_(options) {
  check_options(options_);
  for (size_t i = 0; i < params_.size(); ++i) {
    const ShardedParam& s = params_[i];
    fused_.push_back(use_fused(options_.impl, i, s));
    exp_avg_.push_back(at::zeros_like(s.param, at::MemoryFormat::Contiguous));
    exp_avg_sq_.push_back(at::zeros_like(s.param, at::MemoryFormat::Contiguous));
    device_step_.push_back(fused_.back() && !s.param.is_cpu()
                               ? at::zeros({}, s.param.options().dtype(at::kFloat))
                               : at::Tensor());
  }
}

void AdamW::step() {
  at::NoGradGuard no_grad;
  wait_writable();
  ++step_count_;
  // torch computes these in double from the per-parameter step count; all shards step together.
  const double bias_correction1 = 1 - std::pow(options_.beta1, static_cast<double>(step_count_));
  const double bias_correction2 = 1 - std::pow(options_.beta2, static_cast<double>(step_count_));
  step_each([&](size_t i) {
    if (device_step_[i].defined()) {
      step_fused_device(i);
    } else if (fused_[i]) {
      step_fused(i, bias_correction1, bias_correction2);
    } else {
      step_reference(i, bias_correction1, bias_correction2);
    }
  });
}

void AdamW::step_fused(size_t i, double bias_correction1, double bias_correction2) {
  const ShardedParam& s = params_[i];
  const auto scalars =
      detail::adamw_step_scalars(options_, lr_, bias_correction1, bias_correction2);
  detail::adamw_fused_step(s.param.data_ptr<float>(), s.grad.data_ptr<float>(),
                           exp_avg_[i].data_ptr<float>(), exp_avg_sq_[i].data_ptr<float>(),
                           s.param.numel(), decay_[i], options_.weight_decay != 0, scalars,
                           detail::adamw_kernel().segment);
}

// ATen's kernel decays every element it is given, so the shard goes in as two lists of views:
// its decayed runs with the weight decay, the rest without (a mask too fragmented for runs is
// applied op by op first, then all of it goes without). The kernel takes the bias corrections
// from device_step_, so the step needs nothing from the host but the count it fills in.
void AdamW::step_fused_device(size_t i) {
  const ShardedParam& s = params_[i];
  const detail::DecayRegions& regions = decay_[i];
  const int64_t n = s.param.numel();
  device_step_[i].fill_(static_cast<double>(step_count_));
  const bool decays = options_.weight_decay != 0;
  if (decays && regions.dense.defined()) {
    const double keep = 1 - lr_ * options_.weight_decay;
    on_decayed(i, s.param, [keep](at::Tensor& region, int64_t, int64_t) { region.mul_(keep); });
  }
  std::vector<std::pair<int64_t, int64_t>> decayed, kept;
  if (decays && !regions.dense.defined()) {
    int64_t at = 0;
    for (const auto& [begin, end] : regions.runs) {
      if (begin > at) kept.emplace_back(at, begin);
      decayed.emplace_back(begin, end);
      at = end;
    }
    if (at < n) kept.emplace_back(at, n);
  } else if (n > 0) {
    kept.emplace_back(0, n);
  }
  auto launch = [&](const std::vector<std::pair<int64_t, int64_t>>& runs, double weight_decay) {
    if (runs.empty()) return;
    std::vector<at::Tensor> p, g, m, v, steps;
    const at::Tensor flat[] = {s.param.view(-1), s.grad.view(-1), exp_avg_[i].view(-1),
                               exp_avg_sq_[i].view(-1)};
    for (const auto& [begin, end] : runs) {
      p.push_back(flat[0].narrow(0, begin, end - begin));
      g.push_back(flat[1].narrow(0, begin, end - begin));
      m.push_back(flat[2].narrow(0, begin, end - begin));
      v.push_back(flat[3].narrow(0, begin, end - begin));
      steps.push_back(device_step_[i]);
    }
    compat::fused_adamw(p, g, m, v, steps, lr_, options_.beta1, options_.beta2, weight_decay,
                        options_.eps);
  };
  launch(decayed, options_.weight_decay);
  launch(kept, 0.0);
}

void AdamW::step_reference(size_t i, double bias_correction1, double bias_correction2) {
  at::Tensor& p = params_[i].param;
  const at::Tensor& grad = params_[i].grad;
  // Decoupled weight decay: torch's p.mul_(1 - lr * wd), on the decayed elements only, with the
  // same double scalar (so the same float factor and rounding).
  if (options_.weight_decay != 0) {
    const double keep = 1 - lr_ * options_.weight_decay;
    on_decayed(i, p, [keep](at::Tensor& region, int64_t, int64_t) { region.mul_(keep); });
  }
  // The rest is elementwise: done in chunks, with one chunk-sized temporary for the denominator
  // instead of two shard-sized ones; each element sees torch's operations in torch's order, so
  // the results are the same. On the CPU a chunk stays in cache; on a GPU, where each operation
  // is a kernel launch, chunks are large enough that launches cost nothing beside the work.
  const int64_t chunk = p.is_cpu() ? int64_t{1} << 16 : int64_t{1} << 24;
  const at::Tensor flat_p = p.view(-1), flat_grad = grad.view(-1);
  const at::Tensor exp_avg = exp_avg_[i].view(-1), exp_avg_sq = exp_avg_sq_[i].view(-1);
  const int64_t n = flat_p.numel();
  const at::Tensor denom = at::empty({std::min(n, chunk)}, p.options());
  const double step_size = lr_ / bias_correction1;
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t len = std::min(chunk, n - begin);
    const at::Tensor g = flat_grad.narrow(0, begin, len);
    at::Tensor m = exp_avg.narrow(0, begin, len), v = exp_avg_sq.narrow(0, begin, len);
    at::Tensor d = denom.narrow(0, 0, len);
    m.mul_(options_.beta1).add_(g, 1 - options_.beta1);
    v.mul_(options_.beta2).addcmul_(g, g, 1 - options_.beta2);
    at::sqrt_out(d, v).div_(std::sqrt(bias_correction2)).add_(options_.eps);
    flat_p.narrow(0, begin, len).addcdiv_(m, d, -step_size);
  }
}

std::vector<std::pair<std::string, at::Tensor>> AdamW::state(size_t i) const {
  return {{"exp_avg", exp_avg_.at(i)}, {"exp_avg_sq", exp_avg_sq_.at(i)}};
}

int64_t AdamW::state_bytes() const {
  int64_t bytes = 0;
  for (size_t i = 0; i < exp_avg_.size(); ++i) {
    bytes += exp_avg_[i].nbytes() + exp_avg_sq_[i].nbytes();
  }
  return bytes;
}

}  // namespace fsdp
