// fsdp-bench-adamw: the AdamW step on one flat fp32 shard of N elements, three ways, with the same
// intra-op threads: fsdp's fused kernel (AdamWImpl::kFused), fsdp's op-by-op path
// (AdamWImpl::kReference) and torch::optim::AdamW on a single parameter of the same size. Each
// starts from the same values and gradients, takes warm-up steps (the first faults in its pages),
// then timed steps; prints the median ms/step of each and the ratio against torch, and how far
// each ended from torch (the op-by-op path: 0; the fused kernel: a few fp32 roundings).
//
//   build/bin/fsdp-bench-adamw [--n 100000000] [--threads T] [--steps 5] [--warmup 1]
//
// One run at a time holds its tensors (param, grad, m, v: 16 bytes an element, torch's step also
// a temporary of 4), so 100M elements need about 2 GB.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "fsdp/optim.h"
#include "optim/kernels/adamw_kernel.h"
#include "tools/tool_util.h"
#include "util/number_flag.h"

namespace {

struct Args {
  int64_t n = 100'000'000;
  int threads = at::get_num_threads();
  int steps = 5;
  int warmup = 1;
};

using Flag = fsdp::tools::FlagSpec<Args>;

// The shared checked parser (util/number_flag.h), with each flag's range.
int64_t parse_int(const std::string& flag, const std::string& s, int64_t min, int64_t max) {
  return fsdp::flags::parse_int(flag, s, min, max);
}
constexpr int64_t kMaxElements = int64_t{1} << 36, kMaxSteps = 1000000, kMaxThreads = 4096;

const std::vector<Flag>& flags() {
  static const std::vector<Flag> table = {
      {"--n", "elements in the shard (default 100000000)",
       [](Args& a, const std::string& v) { a.n = parse_int("--n", v, 1, kMaxElements); }},
      {"--threads", "intra-op threads for all three (default: LibTorch's, here all cores)",
       [](Args& a, const std::string& v) {
         a.threads = parse_int("--threads", v, 1, kMaxThreads);
       }},
      {"--steps", "timed steps; the median is reported (default 5)",
       [](Args& a, const std::string& v) { a.steps = parse_int("--steps", v, 1, kMaxSteps); }},
      {"--warmup", "untimed steps first (default 1)",
       [](Args& a, const std::string& v) { a.warmup = parse_int("--warmup", v, 0, kMaxSteps); }},
  };
  return table;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

// What a run leaves: its median step time and a sample of the final parameter to compare.
struct Timing {
  double median_ms;
  at::Tensor sample;
};

constexpr double kLr = 1e-3, kWeightDecay = 0.1;
constexpr int64_t kSampleElements = int64_t{1} << 20;

// The same starting parameter and the gradient of each step for every run.
at::Tensor initial_param(int64_t n) {
  return at::randn({n}, at::make_generator<at::CPUGeneratorImpl>(1));
}
void fill_grad(at::Tensor& g, int step) {
  g.normal_(0, 1, at::make_generator<at::CPUGeneratorImpl>(100 + step));
}

// Runs warmup + steps steps of `step`, refilling `grad` before each (untimed).
Timing time_steps(const Args& a, at::Tensor& param, at::Tensor& grad,
                  const std::function<void()>& step) {
  std::vector<double> ms;
  for (int i = 0; i < a.warmup + a.steps; ++i) {
    fill_grad(grad, i);
    const auto t0 = std::chrono::steady_clock::now();
    step();
    const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - t0;
    if (i >= a.warmup) ms.push_back(took.count());
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return {ms[ms.size() / 2], param.narrow(0, 0, std::min(param.numel(), kSampleElements)).clone()};
}

Timing run_ours(const Args& a, fsdp::AdamWImpl impl) {
  fsdp::ShardedParam s{initial_param(a.n), at::empty({a.n}), at::Tensor()};
  fsdp::AdamWOptions o;
  o.lr = kLr;
  o.weight_decay = kWeightDecay;
  o.impl = impl;
  fsdp::AdamW opt({s}, o);
  return time_steps(a, s.param, s.grad, [&] { opt.step(); });
}

Timing run_torch(const Args& a) {
  at::Tensor param = initial_param(a.n).requires_grad_(true);
  param.mutable_grad() = at::empty({a.n});
  torch::optim::AdamW opt({param}, torch::optim::AdamWOptions(kLr).weight_decay(kWeightDecay));
  at::Tensor grad = param.mutable_grad();
  Timing t = time_steps(a, param, grad, [&] { opt.step(); });
  t.sample = t.sample.detach();
  return t;
}

double max_rel_diff(const at::Tensor& got, const at::Tensor& want) {
  return ((got - want).abs() / want.abs().clamp_min(1e-12)).max().item<double>();
}

void report(const Args& a, const Timing& fused, const Timing& reference, const Timing& torch) {
  std::printf("fsdp-bench-adamw: %lld fp32 elements (%.1f MiB a tensor), %d thread(s), %s\n",
              static_cast<long long>(a.n), a.n * 4 / 1048576.0, at::get_num_threads(),
              cpu_model().c_str());
  std::printf("median of %d timed steps after %d warm-up step(s); fused kernel: %s\n", a.steps,
              a.warmup, fsdp::detail::adamw_kernel().isa);
  std::printf("%-34s %10s %10s %22s\n", "step", "ms/step", "vs torch", "max rel diff vs torch");
  auto row = [&](const char* name, const Timing& t) {
    std::printf("%-34s %10.3f %9.2fx %22.3g\n", name, t.median_ms, torch.median_ms / t.median_ms,
                max_rel_diff(t.sample, torch.sample));
  };
  row("fsdp fused (AdamWImpl::kFused)", fused);
  row("fsdp op by op (kReference)", reference);
  row("torch::optim::AdamW", torch);
  std::printf("fused vs torch: %.2fx as fast\n", torch.median_ms / fused.median_ms);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  try {
    if (!fsdp::tools::parse_flag_table(argc, argv, flags(), a)) {
      fsdp::tools::print_flag_table("usage: fsdp-bench-adamw [options]", flags());
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-bench-adamw: %s\n", e.what());
    return 2;
  }
  try {
    at::set_num_threads(a.threads);
    const Timing fused = run_ours(a, fsdp::AdamWImpl::kFused);
    const Timing reference = run_ours(a, fsdp::AdamWImpl::kReference);
    const Timing torch = run_torch(a);
    report(a, fused, reference, torch);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-bench-adamw: %s\n", e.what());
    return 1;
  }
}
