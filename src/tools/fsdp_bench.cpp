// fsdp-bench: GPT-2 training throughput, per-rank memory and communication for each sharding
// strategy and runtime variant (prefetch, activation checkpointing), all in one run on the same
// ranks so that they compare as ratios, each next to the planner's prediction (fsdp-plan).
//
// Usage: build/bin/fsdp-bench [--model 124m|large|tiny] [--seq 512] [--batch 1] [--steps 2]
//            [--dtype fp32|bf16] [--strategies NO_SHARD,SHARD_GRAD_OP,FULL_SHARD]
//            [--variants plain,prefetch,ac,prefetch+ac] [--json FILE] [--label TEXT]
//            [--checkpoint DIR] [--nproc 2]
// Started without a launcher it re-launches itself under `mpirun -np 2`.
//
// Per run: a warm-up step (it records the unit order prefetch follows and faults in every buffer),
// then --steps timed steps. Memory is the process's peak resident set during the timed steps above
// its resident set before the model was built (LibTorch and MPI themselves), next to the runtime's
// accounting and the plan. Communication is counted by fsdp::count_traffic. `prefetch` is forward
// prefetch with BACKWARD_PRE; `plain` has no prefetch at all. --label (bench/ scripts pass the BLAS
// kernel and allocator settings) is copied into every JSON record.
// --checkpoint DIR: after the FULL_SHARD plain run, times a sharded checkpoint's save and load and
// a full safetensors file's save and load under DIR.
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "fsdp/checkpoint/checkpoint.h"
#include "fsdp/checkpoint/full_state.h"
#include "fsdp/fsdp.h"
#include "fsdp/train/plan.h"
#include "tools/tool_util.h"
#include "train/model_factory.h"

namespace {

using fsdp::ShardingStrategy;

struct Args {
  std::string model = "124m";
  int64_t seq = 512;
  int64_t batch = 1;
  int steps = 2;
  std::string dtype = "fp32";
  std::vector<std::string> strategies = {"NO_SHARD", "SHARD_GRAD_OP", "FULL_SHARD"};
  std::vector<std::string> variants = {"plain", "prefetch", "ac", "prefetch+ac"};
  std::string json;
  std::string label;
  int nproc = 2;
  std::string checkpoint_dir;  // empty: no checkpoint timings
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument("missing value after " + k);
      return argv[++i];
    };
    if (k == "--model") {
      a.model = value();
    } else if (k == "--seq") {
      a.seq = std::stoll(value());
    } else if (k == "--batch") {
      a.batch = std::stoll(value());
    } else if (k == "--steps") {
      a.steps = std::stoi(value());
    } else if (k == "--dtype") {
      a.dtype = value();
    } else if (k == "--strategies") {
      a.strategies = split_list(value());
    } else if (k == "--variants") {
      a.variants = split_list(value());
    } else if (k == "--json") {
      a.json = value();
    } else if (k == "--label") {
      a.label = value();
    } else if (k == "--nproc") {
      a.nproc = std::stoi(value());
    } else if (k == "--checkpoint") {
      a.checkpoint_dir = value();
    } else {
      throw std::invalid_argument(
          "unknown option " + k +
          " (known: --model --seq --batch --steps --dtype --strategies --variants --json --label "
          "--nproc --checkpoint)");
    }
  }
  if (a.model != "124m" && a.model != "large" && a.model != "tiny") {
    throw std::invalid_argument("--model: 124m, large or tiny");
  }
  if (a.dtype != "fp32" && a.dtype != "bf16") throw std::invalid_argument("--dtype: fp32 or bf16");
  for (const auto& v : a.variants) {
    if (v != "plain" && v != "prefetch" && v != "ac" && v != "prefetch+ac") {
      throw std::invalid_argument("--variants: plain, prefetch, ac, prefetch+ac; got " + v);
    }
  }
  for (const auto& s : a.strategies) fsdp::parse_sharding_strategy(s);  // throws on a bad name
  if (a.steps < 1) throw std::invalid_argument("--steps must be at least 1");
  return a;
}

// The trainer's config for this benchmark: GPT-2 at its real context length (1024 positions), so
// the parameter counts are the published ones.
fsdp::TrainConfig bench_config(const Args& a, const std::string& strategy,
                               const std::string& variant) {
  fsdp::TrainConfig c;
  c.model.type = fsdp::ModelType::kGPT2;
  c.model.n_positions = 1024;
  if (a.model == "124m") {
    c.model.n_layer = 12, c.model.n_head = 12, c.model.n_embd = 768;
  } else if (a.model == "large") {
    c.model.n_layer = 36, c.model.n_head = 20, c.model.n_embd = 1280;
  } else {
    c.model.n_layer = 2, c.model.n_head = 2, c.model.n_embd = 64, c.model.n_positions = a.seq;
  }
  c.data.seq_len = a.seq;
  c.train.micro_batch_size = a.batch;
  c.mixed_precision = a.dtype == "bf16" ? fsdp::DType::kBFloat16 : fsdp::DType::kFloat32;
  c.fsdp.sharding_strategy = fsdp::parse_sharding_strategy(strategy);
  const bool prefetch = variant.find("prefetch") != std::string::npos;
  c.fsdp.forward_prefetch = prefetch;
  c.fsdp.backward_prefetch =
      prefetch ? fsdp::BackwardPrefetch::kBackwardPre : fsdp::BackwardPrefetch::kNoPrefetch;
  c.fsdp.activation_checkpointing = variant.find("ac") != std::string::npos;
  return c;
}

int64_t read_status_kib(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(std::strlen(key)));
  }
  return -1;
}

// Restarts the peak-RSS counter (VmHWM) from the current RSS.
void restart_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

// Returns freed heap to the OS, then restarts the peak-RSS counter.
void reset_peak_rss() {
  malloc_trim(0);
  restart_peak_rss();
}

double mib(int64_t bytes) { return bytes / (1024.0 * 1024.0); }

// The largest value over the ranks.
int64_t max_over_ranks(fsdp::Comm& world, int64_t mine) {
  std::vector<int64_t> all(static_cast<size_t>(world.size()));
  world.all_gather(&mine, all.data(), 1, fsdp::DType::kInt64);
  return *std::max_element(all.begin(), all.end());
}

struct Result {
  std::string strategy, variant;
  double step_seconds = 0, tokens_per_second = 0, loss = 0;
  int64_t peak_rss = 0;  // bytes above the process's resident set before the model was built
  fsdp::MemoryStats memory;
  int64_t optimizer_bytes = 0;
  int64_t comm_bytes = 0;  // per step
  fsdp::Plan plan;
};

// One timed checkpoint operation: wall seconds (slowest rank) and the largest peak-RSS growth.
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
  r.peak_growth_mib = max_over_ranks(world, read_status_kib("VmHWM:") - before) / 1024.0;
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

Result run(const Args& a, const std::string& strategy, const std::string& variant,
           fsdp::CommPtr world, std::vector<IoResult>* io) {
  const fsdp::TrainConfig c = bench_config(a, strategy, variant);
  const int n = world->size();
  Result r;
  r.strategy = strategy;
  r.variant = variant;
  r.plan = fsdp::plan_training(c, n, n);
  reset_peak_rss();
  const int64_t baseline_kib = read_status_kib("VmRSS:");
  auto counts = std::make_shared<fsdp::TrafficCounts>();
  fsdp::CausalLM lm = fsdp::build_model(c);
  auto model = fsdp::fully_shard(lm.module, fsdp::count_traffic(world, counts),
                                 c.sharding_options().param_init(lm.param_init));
  fsdp::AdamW opt(fsdp::sharded_params(*model), fsdp::AdamWOptions());
  auto gen = at::make_generator<at::CPUGeneratorImpl>(world->rank() + 1);
  at::Tensor tokens = at::randint(c.model.vocab_size, {a.batch, a.seq + 1}, gen, at::kLong);
  auto step = [&] {
    opt.zero_grad();
    at::Tensor loss =
        fsdp::gpt2_loss(lm.forward(tokens.narrow(1, 0, a.seq)), tokens.narrow(1, 1, a.seq));
    loss.backward();
    opt.step();
    return loss.item<double>();
  };
  step();  // warm-up: records the unit order, faults in buffers, allocates AdamW state
  world->barrier();
  model->reset_peak_memory();
  counts->reset();
  restart_peak_rss();  // the timed steps' peak, over heap the warm-up left in place
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < a.steps; ++i) r.loss = step();
  world->barrier();
  r.step_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / a.steps;
  r.tokens_per_second = n * a.batch * a.seq / r.step_seconds;
  r.peak_rss = max_over_ranks(*world, (read_status_kib("VmHWM:") - baseline_kib) * 1024);
  r.memory = model->memory();
  r.optimizer_bytes = opt.state_bytes();
  r.comm_bytes = counts->total_bytes() / a.steps;
  if (io) *io = checkpoint_io(*model, opt, a.checkpoint_dir, *world);
  return r;
}

std::string json_record(const Args& a, int n, const std::string& backend, const Result& r) {
  const auto& m = r.memory;
  const auto& p = r.plan.memory;
  std::ostringstream o;
  o << "{\"model\": \"gpt2-" << a.model << "\", \"parameters\": " << r.plan.parameters
    << ", \"world_size\": " << n << ", \"backend\": \"" << backend << "\", \"dtype\": \"" << a.dtype
    << "\", \"seq\": " << a.seq << ", \"batch_per_rank\": " << a.batch
    << ", \"threads_per_rank\": 1, \"strategy\": \"" << r.strategy << "\", \"variant\": \""
    << r.variant << "\", \"steps\": " << a.steps << ", \"step_seconds\": " << r.step_seconds
    << ", \"tokens_per_second\": " << r.tokens_per_second << ", \"loss\": " << r.loss
    << ", \"peak_rss_bytes\": " << r.peak_rss << ", \"model_state_bytes\": "
    << m.sharded_param_bytes + m.sharded_grad_bytes + r.optimizer_bytes
    << ", \"peak_gathered_bytes\": " << m.peak_gathered_param_bytes
    << ", \"peak_grad_buffer_bytes\": " << m.peak_grad_buffer_bytes
    << ", \"pool_bytes\": " << m.pool_bytes << ", \"comm_bytes_per_step\": " << r.comm_bytes
    << ", \"plan\": {\"model_state_bytes\": " << p.model_state()
    << ", \"gathered_bytes\": " << p.gathered << ", \"grad_buffer_bytes\": " << p.grad_buffers
    << ", \"activation_bytes\": " << p.activations << ", \"total_bytes\": " << p.total()
    << ", \"comm_bytes_per_step\": " << r.plan.comm.total() << "}, \"label\": \"" << a.label
    << "\"}";
  return o.str();
}

void print_table(const Args& a, const std::vector<Result>& results) {
  const Result* base = nullptr;
  for (const auto& r : results) {
    if (r.strategy == "NO_SHARD" && r.variant == "plain") base = &r;
  }
  std::printf(
      "\n| strategy | variant | step (s) | tokens/s | vs NO_SHARD | peak RSS (MiB) | plan (MiB) | "
      "RSS / plan | model state (MiB) | comm/step (MiB) | comm / theory |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const auto& r : results) {
    const double model_state =
        mib(r.memory.sharded_param_bytes + r.memory.sharded_grad_bytes + r.optimizer_bytes);
    const double theory = static_cast<double>(r.plan.comm.total());
    std::printf(
        "| %s | %s | %.2f | %.1f | %s | %.0f | %.0f | %.3f | %.1f | %.1f | %s |\n",
        r.strategy.c_str(), r.variant.c_str(), r.step_seconds, r.tokens_per_second,
        base ? std::to_string(r.tokens_per_second / base->tokens_per_second).substr(0, 5).c_str()
             : "-",
        mib(r.peak_rss), mib(r.plan.memory.total()),
        static_cast<double>(r.peak_rss) / r.plan.memory.total(), model_state, mib(r.comm_bytes),
        theory > 0 ? std::to_string(r.comm_bytes / theory).substr(0, 6).c_str() : "-");
  }
  std::printf(
      "(GPT-2 %s, %s, seq %lld, batch %lld per rank; peak RSS: per rank, above the process before "
      "the model was built; plan: fsdp-plan's total; comm: bytes of every collective per step)\n",
      a.model.c_str(), a.dtype.c_str(), static_cast<long long>(a.seq),
      static_cast<long long>(a.batch));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse_args(argc, argv);
    fsdp::CommPtr world = fsdp::tools::start_ranks(argc, argv, a.nproc);
    // As fsdp-train: keep freed memory in the heap so that each step reuses the last one's pages.
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    const int n = world->size();
    std::vector<Result> results;
    std::vector<IoResult> io;
    for (const auto& s : a.strategies) {
      for (const auto& v : a.variants) {
        const bool with_io = s == "FULL_SHARD" && v == "plain" && !a.checkpoint_dir.empty();
        results.push_back(run(a, s, v, world, with_io ? &io : nullptr));
        if (world->rank() == 0) {
          std::printf("fsdp-bench: %s %s: %.2f s/step\n", s.c_str(), v.c_str(),
                      results.back().step_seconds);
          std::fflush(stdout);
        }
      }
    }
    if (world->rank() != 0) return 0;
    print_table(a, results);
    for (const auto& r : io) {
      std::printf("checkpoint (FULL_SHARD): %-12s %7.2f s, peak RSS growth %7.1f MiB per rank\n",
                  r.what.c_str(), r.seconds, r.peak_growth_mib);
    }
    if (!a.json.empty()) {
      std::ofstream out(a.json);
      out << "[\n";
      for (size_t i = 0; i < results.size(); ++i) {
        out << "  " << json_record(a, n, world->backend(), results[i])
            << (i + 1 < results.size() ? ",\n" : "\n");
      }
      out << "]\n";
      if (!out) throw std::runtime_error("cannot write " + a.json);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-bench: %s\n", e.what());
    return 1;
  }
}
