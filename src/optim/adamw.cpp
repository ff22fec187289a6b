// AdamW over shards: torch::optim::AdamW's step (LibTorch 1.13, amsgrad off), with the decoupled
// weight decay applied only where the shard's decay mask is 1. Owns the choice of path per shard
// (AdamWImpl) and the op-by-op path; the fused kernel is in adamw_fused.cpp.
#include <torch/torch.h>

#include <cmath>
#include <stdexcept>
#include <string>

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

// What the fused kernel needs (fp32 and contiguity the base class has already checked, but a
// kernel reading raw pointers should not rely on a check made elsewhere).
bool fusable(const ShardedParam& s) {
  auto ok = [](const at::Tensor& t) {
    return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous();
  };
  return ok(s.param) && ok(s.grad);
}

std::string describe(const at::Tensor& t) {
  return std::string(c10::toString(t.scalar_type())) + " on " + t.device().str() +
         (t.is_contiguous() ? "" : ", not contiguous");
}

bool use_fused(AdamWImpl impl, size_t i, const ShardedParam& s) {
  if (impl == AdamWImpl::kReference) return false;
  if (fusable(s)) return true;
  if (impl == AdamWImpl::kAuto) return false;
  throw std::invalid_argument("AdamW: impl kFused needs CPU, contiguous fp32 shards, but shard " +
                              std::to_string(i) + " has param " + describe(s.param) + " and grad " +
                              describe(s.grad) + " (kAuto steps it op by op)");
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
    if (fused_[i]) {
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
