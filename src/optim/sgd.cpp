// SGD over shards: torch::optim::SGD's step (LibTorch 1.13), operation by operation, with the
// coupled weight decay (g + wd * p) applied only where the shard's decay mask is 1.
#include <torch/torch.h>

#include <stdexcept>
#include <string>

#include "fsdp/optim.h"

namespace fsdp {
namespace {

void check_options(const SGDOptions& o) {
  auto require = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument("SGDOptions: " + what);
  };
  require(o.momentum >= 0, "momentum must be >= 0, got " + std::to_string(o.momentum));
  require(o.weight_decay >= 0, "weight_decay must be >= 0, got " + std::to_string(o.weight_decay));
  require(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
          "nesterov momentum requires a momentum and zero dampening");
}

}  // namespace

SGD::SGD(std::vector<ShardedParam> params, SGDOptions options)
    : ShardedOptimizer(std::move(params), options.lr, "SGD"), options_(options) {
  check_options(options_);
  for (const auto& s : params_) {
    momentum_buffer_.push_back(options_.momentum != 0 ? at::zeros_like(s.param) : at::Tensor());
  }
}

void SGD::step() {
  wait_writable();
  at::NoGradGuard no_grad;
  step_each([this](size_t i) { step_shard(i); });
  ++step_count_;
}

void SGD::step_shard(size_t i) {
  at::Tensor& p = params_[i].param;
  at::Tensor d_p = params_[i].grad;
  if (options_.weight_decay != 0) {
    // torch: d_p = d_p.add(p, wd), a new tensor; here only the decayed regions change.
    d_p = d_p.clone();
    const double wd = options_.weight_decay;
    at::Tensor flat_p = p.view({-1});
    on_decayed(i, d_p, [&](at::Tensor& region, int64_t begin, int64_t length) {
      region.add_(flat_p.narrow(0, begin, length), wd);
    });
  }
  if (options_.momentum != 0) {
    at::Tensor& buf = momentum_buffer_[i];
    if (step_count_ == 0) {
      buf.copy_(d_p);  // torch: buf = clone(d_p) on the first step, no dampening
    } else {
      buf.mul_(options_.momentum).add_(d_p, 1 - options_.dampening);
    }
    d_p = options_.nesterov ? d_p.add(buf, options_.momentum) : buf;
  }
  p.add_(d_p, -1 * lr_);
}

std::vector<std::pair<std::string, at::Tensor>> SGD::state(size_t i) const {
  if (!momentum_buffer_.at(i).defined()) return {};
  return {{"momentum_buffer", momentum_buffer_[i]}};
}

int64_t SGD::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& b : momentum_buffer_) bytes += b.defined() ? b.nbytes() : 0;
  return bytes;
}

}  // namespace fsdp
