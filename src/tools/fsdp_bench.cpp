// fsdp-bench (first version): GPT-2 training step time and per-rank peak memory, NO_SHARD against
// FULL_SHARD, in one run on the same ranks so the two are comparable as a ratio.
//
// Usage: mpirun -np 2 build/bin/fsdp-bench [--model 124m|tiny] [--seq 256] [--batch 1]
//                                          [--steps 3] [--dtype fp32|bf16] [--checkpoint DIR]
// --checkpoint DIR: after the FULL_SHARD steps, also times a sharded checkpoint's save and load and
// a full safetensors file's save and load (under DIR, which it empties first), each with the
// largest growth of any rank's peak resident set above what it held before.
// Started without mpirun it re-launches itself under `mpirun -np 2`. Per-rank peak memory is the
// process's peak resident set (VmHWM, reset between strategies) next to the runtime's own
// accounting; model state is compared with the 16*P/N bytes theory of fp32 AdamW.
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "fsdp/checkpoint/checkpoint.h"
#include "fsdp/checkpoint/full_state.h"
#include "fsdp/fsdp.h"
#include "tools/tool_util.h"

namespace {

struct Args {
  std::string model = "124m";
  int64_t seq = 256;
  int64_t batch = 1;
  int steps = 3;
  std::string dtype = "fp32";
  int nproc = 2;
  std::string checkpoint_dir;  // empty: no checkpoint timings
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument("missing value after " + k);
      return argv[++i];
    };
    if (k == "--model")
      a.model = value();
    else if (k == "--seq")
      a.seq = std::stoll(value());
    else if (k == "--batch")
      a.batch = std::stoll(value());
    else if (k == "--steps")
      a.steps = std::stoi(value());
    else if (k == "--dtype")
      a.dtype = value();
    else if (k == "--nproc")
      a.nproc = std::stoi(value());
    else if (k == "--checkpoint")
      a.checkpoint_dir = value();
    else
      throw std::invalid_argument(
          "unknown option " + k +
          " (known: --model --seq --batch --steps --dtype --nproc --checkpoint)");
  }
  if (a.model != "124m" && a.model != "tiny") throw std::invalid_argument("--model: 124m or tiny");
  if (a.dtype != "fp32" && a.dtype != "bf16") throw std::invalid_argument("--dtype: fp32 or bf16");
  return a;
}

int64_t read_status_kib(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(std::strlen(key)));
  }
  return -1;
}

// Returns freed heap to the OS, then restarts the peak-RSS counter from the current RSS.
void reset_peak_rss() {
  malloc_trim(0);
  std::ofstream("/proc/self/clear_refs") << "5";
}

struct Result {
  double step_seconds = 0;
  double setup_peak_rss_mib = 0;  // building the full model, then sharding it
  double peak_rss_mib = 0;        // training steps, after sharding
  double model_state_mib = 0;     // sharded params + grads + AdamW m, v
  double peak_gathered_mib = 0;
  double peak_grad_buffers_mib = 0;
  double loss = 0;
};

// One timed checkpoint operation: wall seconds (slowest rank) and the largest peak-RSS growth over
// the ranks, in MiB.
struct IoResult {
  std::string what;
  double seconds = 0;
  double peak_growth_mib = 0;
};

IoResult timed_io(const std::string& what, fsdp::Comm& world, const std::function<void()>& fn) {
  reset_peak_rss();
  const int64_t before = read_status_kib("VmRSS:");
  world.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  world.barrier();
  IoResult r{what, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
  std::vector<int64_t> growth(static_cast<size_t>(world.size()));
  const int64_t mine = read_status_kib("VmHWM:") - before;
  world.all_gather(&mine, growth.data(), 1, fsdp::DType::kInt64);
  r.peak_growth_mib = *std::max_element(growth.begin(), growth.end()) / 1024.0;
  return r;
}

std::vector<IoResult> checkpoint_io(fsdp::FullyShardedModel& model, fsdp::AdamW& opt,
                                    const std::string& dir, fsdp::Comm& world) {
  if (world.rank() == 0) std::filesystem::remove_all(dir);
  world.barrier();
  const std::string st = dir + "/model.safetensors";
  std::string saved;
  return {timed_io("sharded save", world,
                   [&] { saved = fsdp::save_checkpoint(dir, 1, model, &opt, "{}"); }),
          timed_io("sharded load", world, [&] { fsdp::load_checkpoint(saved, model, &opt); }),
          timed_io("full save", world, [&] { fsdp::save_full_safetensors(model, st); }),
          timed_io("full load", world, [&] { fsdp::load_full_safetensors(model, st); })};
}

Result run(fsdp::ShardingStrategy strategy, const Args& a, fsdp::CommPtr world,
           std::vector<IoResult>* io = nullptr) {
  reset_peak_rss();
  fsdp::GPT2Config cfg =
      a.model == "124m" ? fsdp::GPT2Config::gpt2_124m() : fsdp::GPT2Config::tiny();
  fsdp::GPT2 model(cfg);
  auto sharded = fsdp::fully_shard(
      model.ptr(), world,
      fsdp::ShardingOptions()
          .strategy(strategy)
          .wrap(fsdp::WrapPolicy::by_type({"GPT2Block"}))
          .param_dtype(a.dtype == "bf16" ? fsdp::DType::kBFloat16 : fsdp::DType::kFloat32));
  std::vector<fsdp::ShardedParam> params = fsdp::sharded_params(*sharded);
  fsdp::AdamW opt(params, fsdp::AdamWOptions());
  Result r;
  r.setup_peak_rss_mib = read_status_kib("VmHWM:") / 1024.0;
  reset_peak_rss();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(world->rank() + 1);
  at::Tensor tokens = at::randint(cfg.vocab_size, {a.batch, a.seq + 1}, gen, at::kLong);
  auto step = [&] {
    opt.zero_grad();
    at::Tensor loss = fsdp::gpt2_loss(fsdp::forward(model, tokens.narrow(1, 0, a.seq)),
                                      tokens.narrow(1, 1, a.seq));
    loss.backward();
    opt.step();
    return loss.item<double>();
  };
  step();  // warm-up: first-touch page faults and lazy initialisation
  world->barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < a.steps; ++i) r.loss = step();
  world->barrier();
  r.step_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / a.steps;
  const auto m = sharded->memory();
  const double mib = 1024.0 * 1024.0;
  r.peak_rss_mib = read_status_kib("VmHWM:") / 1024.0;
  r.model_state_mib = (m.sharded_param_bytes + m.sharded_grad_bytes + opt.state_bytes()) / mib;
  r.peak_gathered_mib = m.peak_gathered_param_bytes / mib;
  r.peak_grad_buffers_mib = m.peak_grad_buffer_bytes / mib;
  if (io) *io = checkpoint_io(*sharded, opt, a.checkpoint_dir, *world);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse_args(argc, argv);
    fsdp::CommPtr world = fsdp::tools::start_ranks(argc, argv, a.nproc);
    const int n = world->size();
    if (world->rank() == 0) {
      std::printf(
          "fsdp-bench: GPT-2 %s, world size %d (%s), batch %lld x seq %lld per rank, %s, "
          "1 thread per rank, %d timed steps\n",
          a.model.c_str(), n, world->backend().c_str(), static_cast<long long>(a.batch),
          static_cast<long long>(a.seq), a.dtype.c_str(), a.steps);
    }
    std::vector<std::pair<fsdp::ShardingStrategy, Result>> results;
    std::vector<IoResult> io;
    for (auto s : {fsdp::ShardingStrategy::kNoShard, fsdp::ShardingStrategy::kFullShard}) {
      const bool with_io = s == fsdp::ShardingStrategy::kFullShard && !a.checkpoint_dir.empty();
      results.emplace_back(s, run(s, a, world, with_io ? &io : nullptr));
    }
    if (world->rank() == 0) {
      std::printf("%-10s %8s %9s %10s %10s %11s %12s %11s\n", "strategy", "step_s", "tokens/s",
                  "setup_MiB", "train_MiB", "model_state", "gathered_pk", "gradbuf_pk");
      for (const auto& [s, r] : results) {
        std::printf("%-10s %8.3f %9.1f %10.1f %10.1f %11.1f %12.1f %11.1f\n", fsdp::to_string(s),
                    r.step_seconds, n * a.batch * a.seq / r.step_seconds, r.setup_peak_rss_mib,
                    r.peak_rss_mib, r.model_state_mib, r.peak_gathered_mib,
                    r.peak_grad_buffers_mib);
      }
      std::printf(
          "(MiB per rank; setup/train: peak resident set while building and sharding the "
          "model / while training; model_state: fp32 shards of params, grads, Adam m and v; "
          "gathered_pk, gradbuf_pk: the runtime's peaks)\n");
      const Result& ns = results[0].second;
      const Result& fs = results[1].second;
      std::printf(
          "FULL_SHARD / NO_SHARD: throughput %.3f, training peak RSS %.3f, model state "
          "%.3f (theory 1/%d = %.3f)\n",
          ns.step_seconds / fs.step_seconds, fs.peak_rss_mib / ns.peak_rss_mib,
          fs.model_state_mib / ns.model_state_mib, n, 1.0 / n);
      for (const auto& r : io) {
        std::printf(
            "checkpoint (FULL_SHARD): %-12s %7.2f s, peak RSS growth %7.1f MiB per rank (max)\n",
            r.what.c_str(), r.seconds, r.peak_growth_mib);
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-bench: %s\n", e.what());
    return 1;
  }
}
