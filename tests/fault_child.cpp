// A small FSDP training program that misbehaves on request, for the fault tests (tests/faults.sh):
//   --kill-rank R --at-step S   rank R kills itself with SIGKILL at step S, mid-step
//   --stall-rank R --at-step S  rank R skips step S's backward (its collectives) and sleeps
// The other ranks must not hang: the launcher notices a dead rank; a stalled rank's peers time
// out in their next collective (--timeout-ms) and exit non-zero with the collective's name.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "fsdp/fsdp.h"

namespace {

struct Args {
  int kill_rank = -1, stall_rank = -1, at_step = 2, steps = 5;
  int timeout_ms = 3000;
  std::string backend = "auto";
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const std::string v = argv[i + 1];
    if (k == "--kill-rank")
      a.kill_rank = std::stoi(v);
    else if (k == "--stall-rank")
      a.stall_rank = std::stoi(v);
    else if (k == "--at-step")
      a.at_step = std::stoi(v);
    else if (k == "--steps")
      a.steps = std::stoi(v);
    else if (k == "--timeout-ms")
      a.timeout_ms = std::stoi(v);
    else if (k == "--backend")
      a.backend = v;
    else
      throw std::invalid_argument("unknown option " + k);
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    fsdp::CommOptions options;
    options.backend = a.backend;
    options.timeout = std::chrono::milliseconds(a.timeout_ms);
    fsdp::CommPtr world = fsdp::init_comm(options);
    at::set_num_threads(1);
    fsdp::GPT2 model(fsdp::GPT2Config::tiny());
    auto sharded = fsdp::fully_shard(
        model.ptr(), world, fsdp::ShardingOptions().wrap(fsdp::WrapPolicy::by_type({"GPT2Block"})));
    fsdp::AdamW opt(fsdp::sharded_params(*sharded));
    auto gen = at::make_generator<at::CPUGeneratorImpl>(world->rank());
    const int64_t T = fsdp::GPT2Config::tiny().n_positions;
    for (int step = 0; step < a.steps; ++step) {
      at::Tensor tokens = at::randint(256, {2, T + 1}, gen, at::kLong);
      at::Tensor loss =
          fsdp::gpt2_loss(fsdp::forward(model, tokens.narrow(1, 0, T)), tokens.narrow(1, 1, T));
      if (step == a.at_step && world->rank() == a.kill_rank) raise(SIGKILL);
      if (step == a.at_step && world->rank() == a.stall_rank) {
        std::fprintf(stderr, "rank %d: skipping backward at step %d\n", world->rank(), step);
        sleep(120);
      }
      loss.backward();
      opt.step();
      opt.zero_grad();
    }
    std::printf("rank %d: done\n", world->rank());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fault_child: %s\n", e.what());
    return 1;
  }
}
