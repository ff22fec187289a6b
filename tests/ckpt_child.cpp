// A deterministic training run that saves and resumes sharded checkpoints, for
// tests/checkpoint_resume.sh: a tiny GPT-2, FULL_SHARD, AdamW, the global batch of step s a
// function of s alone (rows split across ranks), so that a run resumed from a checkpoint must print
// the same losses as one that never stopped.
//
//   ckpt_child --root DIR --steps N [--save-every K] [--resume] [--kill-rank R --kill-at POINT]
//
// Rank 0 prints "step <s> loss <hexfloat> <decimal>" per step (hex: exact, for bitwise comparison)
// and "resumed from step <s>" when it loaded a checkpoint. --kill-at names a save's fault point
// ("shard_partial", "shard_written", "before_commit") at which rank R SIGKILLs itself during the
// first save of this run.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fsdp/checkpoint/checkpoint.h"
#include "fsdp/fsdp.h"

namespace {

using namespace fsdp;

struct Args {
  std::string root;
  int steps = 20;
  int save_every = 0;
  bool resume = false;
  int kill_rank = -1;
  std::string kill_at;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "";
    if (k == "--resume") {
      a.resume = true;
      continue;
    }
    if (k == "--root")
      a.root = v;
    else if (k == "--steps")
      a.steps = std::atoi(v);
    else if (k == "--save-every")
      a.save_every = std::atoi(v);
    else if (k == "--kill-rank")
      a.kill_rank = std::atoi(v);
    else if (k == "--kill-at")
      a.kill_at = v;
    else {
      std::fprintf(stderr, "ckpt_child: unknown argument %s\n", k.c_str());
      std::exit(2);
    }
    ++i;
  }
  return a;
}

GPT2Config config() {
  GPT2Config c;
  c.vocab_size = 65;
  c.n_positions = 16;
  c.n_embd = 32;
  c.n_layer = 2;
  c.n_head = 4;
  return c;
}

constexpr int64_t kBatch = 12;  // divisible by world sizes 1-4

at::Tensor batch(int step) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(500 + static_cast<uint64_t>(step));
  at::Tensor t = at::empty({kBatch, config().n_positions + 1}, at::kLong);
  t.select(1, 0).copy_(at::randint(config().vocab_size, {kBatch}, gen, at::kLong));
  for (int64_t i = 1; i <= config().n_positions; ++i) {
    t.select(1, i).copy_((t.select(1, i - 1) * 5 + 3).remainder(config().vocab_size));
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  CommPtr world = init_comm();
  GPT2 model(config());
  init_gpt2_weights(*model, 42);
  auto sharded =
      fully_shard(model.ptr(), world, ShardingOptions().wrap(WrapPolicy::by_type({"GPT2Block"})));
  AdamWOptions o;
  o.lr = 1e-2;
  AdamW opt(sharded_params(*sharded), o);

  int start = 0;
  if (args.resume && latest_checkpoint(args.root)) {
    start = static_cast<int>(load_checkpoint(args.root, *sharded, &opt).step);
    if (world->rank() == 0) std::printf("resumed from step %d\n", start);
  }
  CheckpointOptions ckpt;
  bool killed_once = false;
  ckpt.fault_point = [&](const std::string& point) {
    if (world->rank() == args.kill_rank && point == args.kill_at && !killed_once) {
      std::raise(SIGKILL);
    }
  };
  const int n = world->size(), T = static_cast<int>(config().n_positions);
  const int64_t rows = kBatch / n;
  for (int step = start; step < args.steps; ++step) {
    at::Tensor mine = batch(step).narrow(0, world->rank() * rows, rows);
    opt.zero_grad();
    at::Tensor loss = gpt2_loss(fsdp::forward(model, mine.narrow(1, 0, T)), mine.narrow(1, 1, T));
    loss.backward();
    clip_grad_norm(opt.params(), 1.0, sharded->shard_group());
    opt.step();
    float global = loss.item<float>();
    world->all_reduce(&global, 1, DType::kFloat32, ReduceOp::kAvg);
    if (world->rank() == 0) std::printf("step %d loss %a %.9g\n", step, global, global);
    std::fflush(stdout);
    if (args.save_every > 0 && (step + 1) % args.save_every == 0) {
      save_checkpoint(args.root, step + 1, *sharded, &opt, "{}", ckpt);
      killed_once = true;
    }
  }
  return 0;
}
