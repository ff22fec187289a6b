// fsdp-plan: what a training config will need per rank, before running it. Takes fsdp-train's
// arguments (a config file and --KEY VALUE overrides); the job's shape comes from num_processes
// (the world size) and num_machines (ranks per node = num_processes / num_machines).
//
//   build/bin/fsdp-plan --config configs/gpt2-124m.yaml --num_processes 2
//   build/bin/fsdp-plan --config configs/gpt2-124m.yaml --num_processes 8 --device cuda
//       --gpu-memory 80          (one command; fsdp-plan's own flag: one GPU's memory, in GiB)
//
// Prints the configured strategy's breakdown (fsdp/train/plan.h), then every strategy's total
// against what a rank has: this machine's memory per rank on a node (MemTotal / ranks per node),
// and for a config that trains on cuda, a GPU's memory for what lives on the device (its own
// flag, --gpu-memory GIB, else what the first GPU visible here reports) with host memory for what
// offload keeps there. A GPU job may be planned from a machine without one: train.device cuda is
// not checked against this machine.
// Exit codes: 0 done, 2 a bad command line or config.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "core/device_memory.h"
#include "fsdp/train/config.h"
#include "fsdp/train/plan.h"
#include "util/number_flag.h"

namespace {

constexpr const char* kGpuMemoryFlag = "--gpu-memory";

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

// fsdp-plan's own flag (`--gpu-memory GIB` or `--gpu-memory=GIB`), taken out of the arguments
// that fsdp-train's parser reads next. 0 when not given.
double take_gpu_memory_gib(std::vector<std::string>& args) {
  const std::string prefix = std::string(kGpuMemoryFlag) + "=";
  double gib = 0;
  for (size_t i = 0; i < args.size();) {
    std::string value;
    if (args[i] == kGpuMemoryFlag) {
      if (i + 1 == args.size()) throw fsdp::flags::NumberError(kGpuMemoryFlag, "missing value");
      value = args[i + 1];
      args.erase(args.begin() + i, args.begin() + i + 2);
    } else if (args[i].compare(0, prefix.size(), prefix) == 0) {
      value = args[i].substr(prefix.size());
      args.erase(args.begin() + i);
    } else {
      ++i;
      continue;
    }
    gib = fsdp::flags::parse_number(kGpuMemoryFlag, value, 0.001, 1e6);
  }
  return gib;
}

// What one rank may use: host memory, and on a GPU the device's (0: unknown).
struct Budget {
  bool on_gpu = false;
  int64_t host = 0;
  int64_t gpu = 0;
  std::string gpu_source;  // where `gpu` came from
};

Budget budget_of(const fsdp::TrainConfig& config, int local, double gpu_memory_gib) {
  Budget b;
  b.on_gpu = config.train.device == fsdp::TrainDevice::kCuda;
  b.host = mem_total_bytes() / local;
  if (gpu_memory_gib > 0) {
    b.gpu = static_cast<int64_t>(gpu_memory_gib * (int64_t{1} << 30));
    b.gpu_source = kGpuMemoryFlag;
  } else if (b.on_gpu) {
    b.gpu = fsdp::device_capacity_bytes(c10::Device(c10::kCUDA, 0));
    b.gpu_source = "cuda:0 here";
  }
  return b;
}

// "yes", "no", or "?" for a GPU config whose GPU memory is not known.
const char* fits(const fsdp::MemoryPlan& m, const Budget& b) {
  if (!b.on_gpu) return m.total() <= b.host ? "yes" : "no";
  if (m.host() > b.host) return "no";
  if (b.gpu <= 0) return "?";
  return m.on_device() <= b.gpu ? "yes" : "no";
}

void print_budget(const Budget& b, int local) {
  std::printf("\nevery strategy (MiB per rank; this machine: %.0f MiB per rank for %d ranks",
              b.host / 1048576.0, local);
  if (b.on_gpu && b.gpu > 0) {
    std::printf("; a GPU: %.0f MiB, from %s", b.gpu / 1048576.0, b.gpu_source.c_str());
  } else if (b.on_gpu) {
    std::printf("; a GPU: not known, none is visible here: give %s GIB", kGpuMemoryFlag);
  }
  std::printf(")\n");
}

// One row: the plan's parts, its total, on a GPU what of it is on the device, and the verdict.
void print_row(const char* strategy, const fsdp::MemoryPlan& m, const Budget& b) {
  const auto mib = [](int64_t bytes) { return bytes / 1048576.0; };
  std::printf("%-20s %12.1f %12.1f %12.1f %12.1f", strategy, mib(m.model_state()), mib(m.gathered),
              mib(m.activations), mib(m.total()));
  if (b.on_gpu) std::printf(" %12.1f", mib(m.on_device()));
  std::printf(" %6s\n", fits(m, b));
}

void compare_strategies(fsdp::TrainConfig config, int world, int local,
                        const std::vector<fsdp::UnitSize>& units, const Budget& budget) {
  print_budget(budget, local);
  std::printf("%-20s %12s %12s %12s %12s", "strategy", "model_state", "gathered", "activations",
              "total");
  if (budget.on_gpu) std::printf(" %12s", "on_gpu");
  std::printf(" %6s\n", "fits");
  using S = fsdp::ShardingStrategy;
  for (S s : {S::kNoShard, S::kShardGradOp, S::kFullShard, S::kHybridShard, S::kHybridShardZero2}) {
    config.fsdp.sharding_strategy = s;
    if (!fsdp::is_hybrid(s)) config.fsdp.shard_group_size = 0;
    try {
      print_row(fsdp::to_string(s), fsdp::plan_training(config, world, local, units).memory,
                budget);
    } catch (const std::invalid_argument& e) {
      std::printf("%-20s %s\n", fsdp::to_string(s), e.what());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> argv_rest(argv + 1, argv + argc);
  fsdp::ParsedArgs args;
  double gpu_memory_gib = 0;
  try {
    gpu_memory_gib = take_gpu_memory_gib(argv_rest);
    args = fsdp::parse_train_args(argv_rest, fsdp::MachineChecks{/*device_available=*/false});
  } catch (const fsdp::flags::NumberError& e) {
    std::cerr << "fsdp-plan: " << e.what() << " (the memory of one GPU, in GiB)\n";
    return 2;
  } catch (const fsdp::ConfigError& e) {
    std::cerr << "fsdp-plan: " << e.what() << "\n(fsdp-plan takes fsdp-train's options)\n";
    return 2;
  }
  if (args.help) {
    std::cout << "fsdp-plan: per-rank memory and communication of a training config.\n"
                 "Takes fsdp-train's options; num_processes is the world size and num_machines\n"
                 "the node count. Its own: "
              << kGpuMemoryFlag
              << " GIB, the memory of one GPU, for a config that\n"
                 "trains on cuda (default: what the first GPU visible here reports).\n\n"
              << fsdp::train_usage(args.command);
    return 0;
  }
  const fsdp::TrainConfig& c = args.config;
  if (c.num_processes < 1) {
    std::cerr << "fsdp-plan: num_processes is not set: give the world size (--num_processes N)\n";
    return 2;
  }
  if (gpu_memory_gib > 0 && c.train.device != fsdp::TrainDevice::kCuda) {
    std::cerr << "fsdp-plan: " << kGpuMemoryFlag
              << " is a GPU's memory, but the config trains on the cpu (train.device): add "
                 "--device cuda, or leave "
              << kGpuMemoryFlag << " out\n";
    return 2;
  }
  const int local = c.num_processes / std::max(1, c.num_machines);  // the config checked it divides
  try {
    const std::vector<fsdp::UnitSize> units = fsdp::plan_units(c);
    std::cout << fsdp::format_plan(fsdp::plan_training(c, c.num_processes, local, units));
    compare_strategies(c, c.num_processes, local, units, budget_of(c, local, gpu_memory_gib));
  } catch (const std::exception& e) {
    std::cerr << "fsdp-plan: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
