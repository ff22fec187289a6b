// The time model's measured compute (fsdp/plan/step_time.h, measure_compute_profile): the
// configured model trained on this machine as one rank of a world of one, so that every
// collective is a no-op and what is left is the compute, the casts and the copies a rank does.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <stdexcept>
#include <vector>

#include "core/streams.h"
#include "factory/model_factory.h"
#include "fsdp/fsdp.h"
#include "fsdp/models/gpt2.h"
#include "fsdp/plan/step_time.h"

namespace fsdp {
namespace {

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace

ComputeProfile measure_compute_profile(const TrainConfig& config, int steps) {
  if (steps < 1) throw std::invalid_argument("a compute profile needs at least one timed step");
  using Clock = std::chrono::steady_clock;
  TrainConfig c = config;
  c.fsdp.offload_params = false;  // compute only: offload's copies are not the model's
  CausalLM lm = build_model(c);
  auto model =
      fully_shard(lm.module, make_local_comm(), c.sharding_options().param_init(lm.param_init));
  const c10::Device device = model->device();
  AdamW opt(sharded_params(*model), AdamWOptions());
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  const int64_t b = c.train.micro_batch_size, s = c.data.seq_len;
  const at::Tensor tokens = at::randint(c.model.vocab_size, {b, s + 1}, gen, at::kLong).to(device);
  std::vector<double> forward, backward, optimizer, cpu;
  // std::clock is the process's CPU time, every thread's (CLOCK_PROCESS_CPUTIME_ID on Linux).
  const auto cpu_seconds = [] { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; };
  const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  for (int i = 0; i <= steps; ++i) {  // the first is a warm-up: buffers faulted in, AdamW state
    synchronize_current_stream(device);
    const double cpu0 = cpu_seconds();
    const auto t0 = Clock::now();
    opt.zero_grad();
    at::Tensor loss =
        next_token_loss(lm, tokens.narrow(1, 0, s), tokens.narrow(1, 1, s), c.train.fused_loss);
    synchronize_current_stream(device);
    const auto t1 = Clock::now();
    loss.backward();
    synchronize_current_stream(device);
    const auto t2 = Clock::now();
    opt.step();
    synchronize_current_stream(device);
    const auto t3 = Clock::now();
    const double cpu3 = cpu_seconds();
    if (i == 0) continue;
    cpu.push_back(cpu3 - cpu0);
    forward.push_back(seconds(t1 - t0));
    backward.push_back(seconds(t2 - t1));
    optimizer.push_back(seconds(t3 - t2));
  }
  ComputeProfile p;
  p.forward = median(forward);
  p.backward = median(backward);
  p.optimizer = median(optimizer);
  p.cpu = median(cpu);
  p.source = "measured here, one rank, median of " + std::to_string(steps) + " steps";
  return p;
}

}  // namespace fsdp
