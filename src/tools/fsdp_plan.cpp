// fsdp-plan: what a training config will need per rank, before running it. Takes fsdp-train's
// arguments (a config file and --KEY VALUE overrides); the job's shape comes from num_processes
// (the world size) and num_machines (ranks per node = num_processes / num_machines).
//
//   build/bin/fsdp-plan --config configs/gpt2-124m.yaml --num_processes 2
//
// Prints the configured strategy's breakdown (fsdp/train/plan.h), then every strategy's total
// against this machine's memory per rank on a node (MemTotal / ranks per node).
// Exit codes: 0 done, 2 a bad command line or config.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "fsdp/train/config.h"
#include "fsdp/train/plan.h"

namespace {

int64_t mem_total_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  while (f >> key >> kib) {
    if (key == "MemTotal:") return kib * 1024;
    f.ignore(256, '\n');
  }
  return 0;
}

void compare_strategies(fsdp::TrainConfig config, int world, int local,
                        const std::vector<fsdp::UnitSize>& units) {
  const int64_t per_rank = mem_total_bytes() / local;
  std::printf("\nevery strategy (MiB per rank; this machine: %.0f MiB per rank for %d ranks)\n",
              per_rank / 1048576.0, local);
  std::printf("%-20s %12s %12s %12s %12s %6s\n", "strategy", "model_state", "gathered",
              "activations", "total", "fits");
  using S = fsdp::ShardingStrategy;
  for (S s : {S::kNoShard, S::kShardGradOp, S::kFullShard, S::kHybridShard, S::kHybridShardZero2}) {
    config.fsdp.sharding_strategy = s;
    if (!fsdp::is_hybrid(s)) config.fsdp.shard_group_size = 0;
    try {
      const fsdp::Plan p = fsdp::plan_training(config, world, local, units);
      const auto& m = p.memory;
      std::printf("%-20s %12.1f %12.1f %12.1f %12.1f %6s\n", fsdp::to_string(s),
                  m.model_state() / 1048576.0, m.gathered / 1048576.0, m.activations / 1048576.0,
                  m.total() / 1048576.0, m.total() <= per_rank ? "yes" : "no");
    } catch (const std::invalid_argument& e) {
      std::printf("%-20s %s\n", fsdp::to_string(s), e.what());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  fsdp::ParsedArgs args;
  try {
    args = fsdp::parse_train_args(argc, argv);
  } catch (const fsdp::ConfigError& e) {
    std::cerr << "fsdp-plan: " << e.what() << "\n(fsdp-plan takes fsdp-train's options)\n";
    return 2;
  }
  if (args.help) {
    std::cout << "fsdp-plan: per-rank memory and communication of a training config.\n"
                 "Takes fsdp-train's options; num_processes is the world size and num_machines\n"
                 "the node count.\n\n"
              << fsdp::train_usage(args.command);
    return 0;
  }
  const fsdp::TrainConfig& c = args.config;
  if (c.num_processes < 1) {
    std::cerr << "fsdp-plan: num_processes is not set: give the world size (--num_processes N)\n";
    return 2;
  }
  const int local = c.num_processes / std::max(1, c.num_machines);  // the config checked it divides
  try {
    const std::vector<fsdp::UnitSize> units = fsdp::plan_units(c);
    std::cout << fsdp::format_plan(fsdp::plan_training(c, c.num_processes, local, units));
    compare_strategies(c, c.num_processes, local, units);
  } catch (const std::exception& e) {
    std::cerr << "fsdp-plan: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
