// fsdp-plan: what a training config will need per rank, before running it. Takes fsdp-train's
// arguments (a config file and --KEY VALUE overrides); the job's shape comes from num_processes
// (the world size) and num_machines (ranks per node = num_processes / num_machines).
//
//   build/bin/fsdp-plan --config configs/gpt2-124m.yaml --num_processes 2
//   build/bin/fsdp-plan --config configs/gpt2-124m.yaml --num_processes 8 --device cuda
//       --gpu-memory 80          (one command; fsdp-plan's own flag: one GPU's memory, in GiB)
//   build/bin/fsdp-plan --config configs/gpt2-124m.yaml --num_processes 4 --num_machines 2
//       --profile 3 --inter-gbit 10      (and the step time, from compute measured here)
//
// Prints the configured strategy's breakdown (fsdp/plan/plan.h), then every strategy's total
// against what a rank has: this machine's memory per rank on a node (MemTotal, or the memory
// cgroup's limit where lower, over the ranks per node), and for a config that trains on cuda, a
// GPU's memory for what lives on the device (its own
// flag, --gpu-memory GIB, else what the first GPU visible here reports) with host memory for what
// offload keeps there. A GPU job may be planned from a machine without one: train.device cuda is
// not checked against this machine.
// With a compute figure (--profile STEPS: the model measured here as one rank; or --tflops T, a
// rate per rank) it adds the time model (fsdp/plan/step_time.h, docs/plan.md): step time, the
// communication compute does not hide (and where the replay waited for it), the CPU bound on the
// CPU, and tokens/s, for each strategy too. Its links and the CPU bound's rates have defaults
// (TimeFlags below) that the --intra-*/--inter-*/--cores-per-rank flags replace.
// Exit codes: 0 done, 2 a bad command line or config.
#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "core/device_memory.h"
#include "fsdp/config/config.h"
#include "fsdp/plan/fits.h"
#include "fsdp/plan/plan.h"
#include "fsdp/plan/step_time.h"
#include "hf/folder.h"
#include "tools/tool_util.h"
#include "util/number_flag.h"

namespace {

constexpr const char* kGpuMemoryFlag = "--gpu-memory";

// One of fsdp-plan's own flags (`--NAME VALUE` or `--NAME=VALUE`), taken out of the arguments
// that fsdp-train's parser reads next. "" when not given.
std::string take_flag(std::vector<std::string>& args, const std::string& flag) {
  const std::string prefix = flag + "=";
  std::string value;
  for (size_t i = 0; i < args.size();) {
    if (args[i] == flag) {
      if (i + 1 == args.size()) throw fsdp::flags::NumberError(flag, "missing value");
      value = args[i + 1];
      args.erase(args.begin() + static_cast<std::ptrdiff_t>(i),
                 args.begin() + static_cast<std::ptrdiff_t>(i) + 2);
    } else if (args[i].compare(0, prefix.size(), prefix) == 0) {
      value = args[i].substr(prefix.size());
      args.erase(args.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  return value;
}

// A number flag in [lo, hi]; `fallback` when not given.
double take_number(std::vector<std::string>& args, const char* flag, double lo, double hi,
                   double fallback) {
  const std::string value = take_flag(args, flag);
  return value.empty() ? fallback : fsdp::flags::parse_number(flag, value, lo, hi);
}

// The time model's flags (-1: not given), with their defaults on the CPU (Gloo over TCP: within a
// host the loopback as measured on this project's 2-core machines, between hosts 10 Gbit/s
// Ethernet) and on GPUs (an 8-GPU H100 node: NVLink 4 within, eight 400 Gbit/s InfiniBand links
// between); docs/plan.md says where each figure comes from.
// This project's 2-core machines, fitted on one host (docs/plan.md): a core moves 8.6 Gbit/s
// through Gloo's loopback TCP, and compute overlapping that runs 2.5 times as long.
constexpr double kCpuCommGbit = 8.6;
constexpr double kCpuContention = 1.5;
// The CPU bound's rates on the same machines (docs/plan.md, "CPU bound"): the bytes a core moves
// through Gloo over loopback and over an emulated 1500-byte-MTU Ethernet link, the process CPU
// time of NO_SHARD steps over the compute alone's.
constexpr double kCpuLoopbackGbit = 14;
constexpr double kCpuNetworkGbit = 8.7;

struct TimeFlags {
  int profile_steps = 0;  // --profile STEPS: measure compute here
  double tflops = 0;      // --tflops T: or assume this rate per rank
  double memory_gbps = -1, intra_gbit = -1, intra_us = -1, inter_gbit = -1, inter_us = -1,
         comm_cpu_gbit = -1, contention = -1, intra_cpu_gbit = -1, inter_cpu_gbit = -1,
         cores_per_rank = -1;
  std::string backend;   // gloo, mpi or nccl: how a reduce-scatter is carried out
  bool progress = true;  // --progress off: collectives move only while waited on
  bool wanted() const { return profile_steps > 0 || tflops > 0; }

  // `local`: ranks per host, over which this machine's cores are shared by default.
  void apply_defaults(bool cuda, int local) {
    const auto set = [](double& v, double fallback) {
      if (v < 0) v = fallback;
    };
    set(memory_gbps, cuda ? 2000 : 10);
    set(intra_gbit, cuda ? 2880 : 8.6);
    set(intra_us, cuda ? 3.4 : 30);
    set(inter_gbit, cuda ? 2880 : 10);
    set(inter_us, cuda ? 9.6 : 50);
    set(comm_cpu_gbit, cuda ? 0 : kCpuCommGbit);
    set(contention, cuda ? 0 : kCpuContention);
    set(intra_cpu_gbit, cuda ? 0 : kCpuLoopbackGbit);
    set(inter_cpu_gbit, cuda ? 0 : kCpuNetworkGbit);
    set(cores_per_rank,
        cuda ? 0 : static_cast<double>(fsdp::tools::usable_cpus()) / std::max(1, local));
    if (backend.empty()) backend = cuda ? "nccl" : "gloo";
  }
};

TimeFlags take_time_flags(std::vector<std::string>& args) {
  TimeFlags t;
  t.profile_steps = static_cast<int>(take_number(args, "--profile", 1, 100, 0));
  t.tflops = take_number(args, "--tflops", 1e-6, 1e6, 0);
  t.memory_gbps = take_number(args, "--memory-gbps", 1e-3, 1e6, -1);
  t.intra_gbit = take_number(args, "--intra-gbit", 1e-3, 1e7, -1);
  t.intra_us = take_number(args, "--intra-us", 0, 1e6, -1);
  t.inter_gbit = take_number(args, "--inter-gbit", 1e-3, 1e7, -1);
  t.inter_us = take_number(args, "--inter-us", 0, 1e6, -1);
  t.comm_cpu_gbit = take_number(args, "--comm-cpu-gbit", 0, 1e7, -1);
  t.contention = take_number(args, "--contention", 0, 100, -1);
  t.intra_cpu_gbit = take_number(args, "--intra-cpu-gbit", 0, 1e7, -1);
  t.inter_cpu_gbit = take_number(args, "--inter-cpu-gbit", 0, 1e7, -1);
  t.cores_per_rank = take_number(args, "--cores-per-rank", 0, 1e4, -1);
  t.backend = take_flag(args, "--backend");
  if (!t.backend.empty() && t.backend != "gloo" && t.backend != "mpi" && t.backend != "nccl") {
    throw fsdp::flags::NumberError("--backend", "gloo, mpi or nccl, got '" + t.backend + "'");
  }
  const std::string progress = take_flag(args, "--progress");
  if (!progress.empty() && progress != "on" && progress != "off") {
    throw fsdp::flags::NumberError("--progress", "on or off, got '" + progress + "'");
  }
  t.progress = progress != "off";
  if (t.profile_steps > 0 && t.tflops > 0) {
    throw fsdp::flags::NumberError("--profile", "give --profile or --tflops, not both");
  }
  return t;
}

fsdp::TimeModelOptions time_options(const TimeFlags& f, const fsdp::TrainConfig& c, int local,
                                    int64_t parameters) {
  fsdp::TimeModelOptions o;
  o.intra = fsdp::link_from_gbit(f.intra_gbit, f.intra_us, f.intra_cpu_gbit);
  o.inter = fsdp::link_from_gbit(f.inter_gbit, f.inter_us, f.inter_cpu_gbit);
  o.cores_per_rank = f.cores_per_rank;
  o.ranks_per_host = local;
  o.comm_cpu_bandwidth = f.comm_cpu_gbit * 1e9 / 8;
  o.contention = f.contention;
  o.algorithms = fsdp::collective_algorithms(f.backend);
  o.background_progress = f.progress;
  if (f.profile_steps > 0) {
    std::cerr << "fsdp-plan: measuring compute here (" << f.profile_steps
              << " steps of the model as one rank)...\n";
    o.compute = fsdp::measure_compute_profile(c, f.profile_steps);
    // The figure to give --tflops when planning a cluster of these devices for this shape.
    char rate[64];
    std::snprintf(rate, sizeof(rate), ", %.3g TFLOP/s achieved",
                  fsdp::achieved_flops_per_second(c, parameters, o.compute) / 1e12);
    o.compute.source += rate;
  } else {
    o.compute = fsdp::profile_from_rates(c, parameters, f.tflops * 1e12, f.memory_gbps * 1e9);
  }
  return o;
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
  b.host = fsdp::host_memory_limit().bytes / local;
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

// One row, left open: the plan's parts, its total, on a GPU what of it is on the device, and the
// verdict.
void print_row(const char* strategy, const fsdp::MemoryPlan& m, const Budget& b) {
  const auto mib = [](int64_t bytes) { return bytes / 1048576.0; };
  std::printf("%-20s %12.1f %12.1f %12.1f %12.1f", strategy, mib(m.model_state()), mib(m.gathered),
              mib(m.activations), mib(m.total()));
  if (b.on_gpu) std::printf(" %12.1f", mib(m.on_device()));
  std::printf(" %6s", fits(m, b));
}

// The logits' share of the plan with the head and loss fused (train.fused_loss) and without: what
// the fusion saves at this vocabulary, batch and sequence.
void print_logits_share(fsdp::TrainConfig c, int local, const std::vector<fsdp::UnitSize>& units,
                        const fsdp::Plan& plan) {
  c.train.fused_loss = !c.train.fused_loss;
  const fsdp::Plan other = fsdp::plan_training(c, c.num_processes, local, units);
  const fsdp::Plan& fused = plan.memory.fused_loss ? plan : other;
  const fsdp::Plan& whole = plan.memory.fused_loss ? other : plan;
  const auto mib = [](int64_t bytes) { return bytes / 1048576.0; };
  std::printf(
      "logits (vocabulary %lld): %.1f MiB fused, %.1f MiB whole (train.fused_loss "
      "false), of a total %.1f and %.1f MiB\n",
      static_cast<long long>(c.model.vocab_size), mib(fused.memory.logits),
      mib(whole.memory.logits), mib(fused.memory.total()), mib(whole.memory.total()));
  std::fflush(stdout);
}

// Every strategy's memory against the budget and, with `time`, its predicted step.
void compare_strategies(fsdp::TrainConfig config, int world, int local,
                        const std::vector<fsdp::UnitSize>& units, const Budget& budget,
                        const fsdp::TimeModelOptions* time) {
  print_budget(budget, local);
  std::printf("%-20s %12s %12s %12s %12s", "strategy", "model_state", "gathered", "activations",
              "total");
  if (budget.on_gpu) std::printf(" %12s", "on_gpu");
  std::printf(" %6s", "fits");
  if (time) std::printf(" %9s %9s %10s", "step (s)", "exposed", "tokens/s");
  std::printf("\n");
  using S = fsdp::ShardingStrategy;
  for (S s : {S::kNoShard, S::kShardGradOp, S::kFullShard, S::kHybridShard, S::kHybridShardZero2}) {
    config.fsdp.sharding_strategy = s;
    if (!fsdp::is_hybrid(s)) config.fsdp.shard_group_size = 0;
    try {
      const fsdp::Plan plan = fsdp::plan_training(config, world, local, units);
      std::optional<fsdp::StepTimePlan> t;
      if (time) t = fsdp::predict_step_time(plan, config, *time);
      print_row(fsdp::to_string(s), plan.memory, budget);
      if (t) std::printf(" %9.3f %9.3f %10.0f", t->step, t->exposed, t->tokens_per_second);
      std::printf("\n");
    } catch (const std::invalid_argument& e) {
      std::printf("%-20s %s\n", fsdp::to_string(s), e.what());
    }
  }
}

const char* kUsage =
    "fsdp-plan: per-rank memory, communication and step time of a training config.\n"
    "Takes fsdp-train's options; num_processes is the world size and num_machines\n"
    "the node count. Its own flags:\n"
    "  --gpu-memory GIB   the memory of one GPU, for a config that trains on cuda\n"
    "                     (default: what the first GPU visible here reports)\n"
    "  --profile STEPS    time the model here as one rank (STEPS after a warm-up) and\n"
    "                     predict step time from it; or\n"
    "  --tflops T         predict it from a compute rate per rank (TFLOP/s), with\n"
    "  --memory-gbps G    the memory bandwidth AdamW streams at (cpu 10, cuda 2000)\n"
    "  --intra-gbit G, --intra-us U   links within a host: bandwidth a ring step gets,\n"
    "                     latency per hop (cpu 8.6 Gbit/s and 30 us, Gloo on loopback;\n"
    "                     cuda 2880 and 3.4, NVLink 4)\n"
    "  --inter-gbit G, --inter-us U   each host's network link (cpu 10 and 50,\n"
    "                     Ethernet; cuda 2880 and 9.6, eight 400 Gbit/s InfiniBand)\n"
    "  --comm-cpu-gbit G, --contention C   collectives take cores from compute: one\n"
    "                     at G Gbit/s keeps a core busy, and compute overlapping it runs\n"
    "                     1 + C x (its rate / G) times as long (cpu 8.6 and 1.5; cuda 0)\n"
    "  --intra-cpu-gbit G, --inter-cpu-gbit G, --cores-per-rank N   the CPU bound: a\n"
    "                     core moves G Gbit/s over each link, and a rank's N cores do its\n"
    "                     compute and then its collectives' CPU work (cpu 14 and 8.7,\n"
    "                     this machine's cores over the ranks per host; cuda 0: none)\n"
    "  --backend B        gloo (default on cpu) or nccl (default on cuda): rings;\n"
    "                     mpi: OpenMPI's, a reduce-scatter a reduce to one rank and a\n"
    "                     scatter, an all-reduce a reduce and a broadcast\n"
    "  --progress on|off  whether collectives move while compute runs (default on);\n"
    "                     off: only while waited on, as MPI with FSDP_MPI_PROGRESS=0,\n"
    "                     so none overlaps compute\n"
    "docs/plan.md explains the model and its error.\n\n";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> argv_rest(argv + 1, argv + argc);
  fsdp::ParsedArgs args;
  double gpu_memory_gib = 0;
  TimeFlags time_flags;
  try {
    gpu_memory_gib = take_number(argv_rest, kGpuMemoryFlag, 0.001, 1e6, 0);
    time_flags = take_time_flags(argv_rest);
    args = fsdp::parse_train_args(argv_rest, fsdp::MachineChecks{/*device_available=*/false},
                                  fsdp::hf::read_folder_settings);
  } catch (const fsdp::flags::NumberError& e) {
    std::cerr << "fsdp-plan: " << e.what() << " (fsdp-plan --help lists its flags)\n";
    return 2;
  } catch (const fsdp::ConfigError& e) {
    std::cerr << "fsdp-plan: " << e.what() << "\n(fsdp-plan takes fsdp-train's options)\n";
    return 2;
  }
  if (args.help) {
    std::cout << kUsage << fsdp::train_usage(args.command);
    return 0;
  }
  const fsdp::TrainConfig& c = args.config;
  if (c.num_processes < 1) {
    std::cerr << "fsdp-plan: num_processes is not set: give the world size (--num_processes N)\n";
    return 2;
  }
  const bool cuda = c.train.device == fsdp::TrainDevice::kCuda;
  if (gpu_memory_gib > 0 && !cuda) {
    std::cerr << "fsdp-plan: " << kGpuMemoryFlag
              << " is a GPU's memory, but the config trains on the cpu (train.device): add "
                 "--device cuda, or leave "
              << kGpuMemoryFlag << " out\n";
    return 2;
  }
  const int local = c.num_processes / std::max(1, c.num_machines);  // the config checked it divides
  time_flags.apply_defaults(cuda, local);
  if (time_flags.profile_steps > 0 && cuda && !at::globalContext().hasCUDA()) {
    std::cerr << "fsdp-plan: --profile runs the model here, but the config trains on cuda and "
                 "CUDA is not available here: give --tflops T (a GPU's compute rate) instead\n";
    return 2;
  }
  try {
    const std::vector<fsdp::UnitSize> units = fsdp::plan_units(c);
    const fsdp::Plan plan = fsdp::plan_training(c, c.num_processes, local, units);
    std::cout << fsdp::format_plan(plan);
    print_logits_share(c, local, units, plan);
    std::optional<fsdp::TimeModelOptions> time;
    if (time_flags.wanted()) {
      if (time_flags.profile_steps > 0 && c.train.num_threads > 0) {
        at::set_num_threads(c.train.num_threads);  // as fsdp-train's ranks run
      }
      time = time_options(time_flags, c, local, plan.parameters);
      std::cout << fsdp::format_step_time(fsdp::predict_step_time(plan, c, *time), *time);
    } else {
      std::cout << "time per step: give --profile STEPS or --tflops T (fsdp-plan --help)\n";
    }
    compare_strategies(c, c.num_processes, local, units, budget_of(c, local, gpu_memory_gib),
                       time ? &*time : nullptr);
  } catch (const std::exception& e) {
    std::cerr << "fsdp-plan: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
