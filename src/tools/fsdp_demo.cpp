// fsdp-demo: a small GPT-2 trained with FULL_SHARD on synthetic data, to see fsdp.cpp work end to
// end before the real trainer (fsdp-train) exists.
//
// Usage: fsdp-demo [--steps 200] [--nproc 2] [--strategy FULL_SHARD]
// The data is a copy task: each sequence repeats a random 8-token pattern, so after the first
// period every next token is predictable: the loss falls from ln(256) = 5.5 to about 0.7, the
// cost of the 8 unpredictable tokens that open each 64-token sequence (8/64 * 5.5). Each rank
// draws different sequences (data parallel); the printed loss is the average over ranks.
#include <chrono>
#include <cstdio>

#include "fsdp/fsdp.h"
#include "tools/tool_util.h"
#include "util/number_flag.h"

namespace {

struct Args {
  int steps = 200;
  int nproc = 2;
  fsdp::ShardingStrategy strategy = fsdp::ShardingStrategy::kFullShard;
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument("missing value after " + k);
    std::string v = argv[++i];
    if (k == "--steps")
      a.steps = static_cast<int>(fsdp::flags::parse_int(k, v, 1, 1000000));
    else if (k == "--nproc")
      a.nproc = static_cast<int>(fsdp::flags::parse_int(k, v, 1, 4096));
    else if (k == "--strategy")
      a.strategy = fsdp::parse_sharding_strategy(v);
    else
      throw std::invalid_argument("unknown option " + k + " (known: --steps --nproc --strategy)");
  }
  return a;
}

at::Tensor copy_task_batch(int64_t batch, int64_t seq, int64_t vocab, at::Generator& gen) {
  constexpr int64_t kPeriod = 8;
  at::Tensor pattern = at::randint(vocab, {batch, kPeriod}, gen, at::kLong);
  return pattern.repeat({1, (seq + 1 + kPeriod - 1) / kPeriod}).narrow(1, 0, seq + 1);
}

}  // namespace

int main(int argc, char** argv) {
  fsdp::tools::write_whole_lines();
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::puts(
          "usage: fsdp-demo [--steps 200] [--nproc 2] [--strategy FULL_SHARD]\n"
          "A small GPT-2 trained on a copy task with the strategy given, on --nproc ranks.");
      return 0;
    }
  }
  try {
    const Args a = parse_args(argc, argv);
    fsdp::CommPtr world = fsdp::tools::start_ranks(argc, argv, a.nproc);

    fsdp::GPT2Config cfg;
    cfg.vocab_size = 256;
    cfg.n_positions = 64;
    cfg.n_embd = 128;
    cfg.n_layer = 4;
    cfg.n_head = 4;
    fsdp::GPT2 model(cfg);
    fsdp::init_gpt2_weights(*model, 42);
    auto sharded = fsdp::fully_shard(model.ptr(), world,
                                     fsdp::ShardingOptions()
                                         .strategy(a.strategy)
                                         .wrap(fsdp::WrapPolicy::by_type({"GPT2Block"})));
    std::vector<fsdp::ShardedParam> params = fsdp::sharded_params(*sharded);
    fsdp::AdamWOptions adam;
    adam.lr = 3e-3;
    fsdp::AdamW opt(params, adam);

    if (world->rank() == 0) {
      std::printf("fsdp-demo: GPT-2 (%lld layers, %lld dim) on %d ranks (%s), %s, %zu units\n",
                  static_cast<long long>(cfg.n_layer), static_cast<long long>(cfg.n_embd),
                  world->size(), world->backend().c_str(), fsdp::to_string(a.strategy),
                  sharded->units().size());
    }
    auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 + world->rank());
    const auto t0 = std::chrono::steady_clock::now();
    for (int step = 1; step <= a.steps; ++step) {
      at::Tensor tokens = copy_task_batch(8, cfg.n_positions, cfg.vocab_size, gen);
      opt.zero_grad();
      at::Tensor loss = fsdp::gpt2_loss(fsdp::forward(model, tokens.narrow(1, 0, cfg.n_positions)),
                                        tokens.narrow(1, 1, cfg.n_positions));
      loss.backward();
      const double norm = fsdp::clip_grad_norm(params, 1.0, sharded->shard_group());
      opt.step();
      float avg = loss.item<float>();
      world->all_reduce(&avg, 1, fsdp::DType::kFloat32, fsdp::ReduceOp::kAvg);
      if (world->rank() == 0 && (step == 1 || step % 10 == 0)) {
        const auto m = sharded->memory();
        std::printf(
            "step %4d  loss %.4f  grad_norm %.3f  %.1fs  shard %.2f MiB  peak gathered %.2f MiB\n",
            step, avg, norm,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
            m.sharded_param_bytes / 1048576.0, m.peak_gathered_param_bytes / 1048576.0);
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-demo: %s\n", e.what());
    return 1;
  }
}
