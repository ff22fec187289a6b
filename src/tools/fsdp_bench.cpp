// fsdp-bench: training throughput, per-rank memory and communication for each sharding
// strategy and runtime variant (prefetch, activation checkpointing), all in one run on the same
// ranks so that they compare as ratios, each next to the planner's prediction (fsdp-plan).
//
// Usage: build/bin/fsdp-bench [--model 124m|large|xl|tiny|llama|llama-1b|llama-7b] [--seq 512]
//            [--batch 1] [--steps 3] [--repeats 1] [--dtype fp32|bf16|fp16] [--lora R]
//            [--strategies NO_SHARD,SHARD_GRAD_OP,FULL_SHARD] [--vocab V] [--layers N]
//            [--peak-tflops P]
//            [--variants plain,prefetch,ac,prefetch+ac] [--allocator fsdp|glibc] [--json FILE]
//            [--label TEXT] [--checkpoint DIR] [--nproc 2] [--device cpu|cuda] [--root-chunks 0]
//            [--profile DIR]
//            [--intra-gbit G --inter-gbit G [--intra-us U] [--inter-us U]
//             [--comm-cpu-gbit G] [--contention C] [--intra-cpu-gbit G] [--inter-cpu-gbit G]
//             [--cores-per-rank N]] [--compute-cpus LIST --comm-cpus LIST]
// --model: GPT-2 124M, large (774M), XL (1.5B), a 2-layer toy, `llama`, the shape of
// configs/llama-small.yaml (grouped-query attention, SwiGLU, tied embeddings), or `llama-1b`,
// Llama 3.2 1B's (16 layers, 2048 wide, 32 heads, 8 KV heads, 8192 feed-forward, vocabulary
// 128,256, tied, RoPE llama3), or `llama-7b`, Llama 2 7B's (32 layers, 4096 wide, 32 heads,
// 11008 feed-forward, vocabulary 32,000, untied). --vocab V: the model's vocabulary instead
// (GPT-2's 50,257, Llama 3's 128,256, Qwen's 151,936: the logits' share of memory). --layers N: its
// depth instead (a 1B Llama's widths in a few layers fit a CPU's memory).
// --lora R: PEFT's LoRA of rank R (alpha 2R) on every linear layer (lora.target_modules
// all-linear) over a frozen base of random values, each rank materialising only its shard: only
// the adapters train (fsdp/models/lora.h).
// --peak-tflops P: the device's peak (dense, the compute dtype's) in TFLOP/s; the table then adds
// the model FLOPs utilisation (bench/README.md has the FLOP count: 6 x the parameters a token's
// matmuls use, plus attention's).
// Started without a launcher it re-launches itself under `mpirun -np 2` (--nproc). A variant is
// `plain` or features joined by '+': `prefetch`, `ac` (activation checkpointing), `ac2` (of every
// second block: fsdp_config.activation_checkpointing_every 2), `offload` (CPU
// offload: shards and AdamW in host memory), `whole` (the root's gradients reduced in one piece
// at the end of backward, as PyTorch FSDP does: ShardingOptions::split_root_reduction off),
// `onepiece` (split, its early part in one piece: ShardingOptions::root_reduction_chunks 1),
// `unfused` (the logits [B, T, V] whole, then the loss: train.fused_loss false), `fusedadam`
// (AdamWImpl::kFused: on a GPU ATen's fused kernel instead of the default op-by-op step),
// `composite` (a Llama's RMSNorm, gated activation and RoPE as ATen's composite ops instead of
// the fused nodes: model.fused_ops false).
// --profile DIR (an existing folder): after each run's timed steps, one more step under
// LibTorch's profiler (rank 0's), its time by GPU kernel (by CPU operator on the CPU) in
// DIR/MODEL-STRATEGY-VARIANT-bBATCH.md and the Chrome trace beside it (.trace.json);
// tools/step_profile.h.
// --root-chunks N: the split's early part in N pieces in every other variant (default 0: the
// runtime's choice, the root's size over a block's).
// --device cuda: the model computes on the GPU (LOCAL_RANK's; one rank alone, or under fsdp-run,
// uses NCCL, under mpirun MPI through host buffers), with as many intra-op threads per rank as
// the node's cores divided among its ranks (the CPU AdamW of offload uses them); every timed phase
// ends with the device synchronised, and the table adds the CUDA caching allocator's peak
// (torch.cuda.max_memory_allocated, the figure PyTorch FSDP users compare).
//
// Per run: a warm-up step (it records the unit order prefetch follows and faults in every buffer),
// then --steps timed steps; --repeats runs every (strategy, variant) again, in the same order, so
// that a slow stretch of the machine spreads over all of them (and, predicting, measures the
// compute alone again first; the prediction shown is the repeats' median). Step times are medians
// over every timed step, each the slowest rank's, split into forward, backward and optimizer, and
// the time spent inside collective calls (the communication compute did not hide). Memory is the
// peak, during the timed steps, of the live tensor bytes (fsdp/host_memory.h) and of the resident
// set, both above their values before the model was built, next to the plan. Communication is
// counted by fsdp::count_traffic. `prefetch` is forward prefetch with BACKWARD_PRE; `plain` has no
// prefetch at all. --allocator: `fsdp` (default, as fsdp-train) caches large blocks
// (fsdp/host_memory.h); `glibc` leaves every block to malloc, with freed memory kept in its heap.
// --label (bench/ scripts pass the BLAS kernel) is copied into every JSON record.
// --checkpoint DIR: after the FULL_SHARD plain run, times a sharded checkpoint's save and load and
// a full safetensors file's save and load under DIR.
// --intra-gbit and --inter-gbit (the links, as fsdp-plan takes them; bench/netem.sh passes the
// ones it makes): every rank first measures the compute alone (the model as a world of one, all
// ranks at once), and a second table puts each step beside the time model's prediction
// (fsdp/plan/step_time.h; not for offload variants, which it does not model).
// --intra-cpu-gbit, --inter-cpu-gbit and --cores-per-rank: the model's CPU bound (what a core
// moves over each link, default 0: free, bench/netem.sh gives 14 and 8.7; the cores a rank shares
// with its collectives, by default the CPUs this process may use over its host's ranks, and none
// when pinned). Each step also records the
// process's CPU time, and the compute alone its own, so that the tables show what the
// collectives cost the CPU beside what the model says.
// --compute-cpus and --comm-cpus (CPU lists as taskset takes them, e.g. 0 or 0-3,6): the training
// thread on the first, the threads that move the collectives (the backend's workers, Gloo's
// transport loop, MPI's progress thread) on the second, as on a machine whose collectives have
// cores compute does not use (see set_thread_cpus below). Recorded in the JSON (`cpus`). Default:
// neither, every thread where the system puts it; one without the other is refused.
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

#include "checkpoint/file_io.h"
#include "core/device_memory.h"
#include "core/streams.h"
#include "factory/model_factory.h"
#include "fsdp/checkpoint/checkpoint.h"
#include "fsdp/checkpoint/full_state.h"
#include "fsdp/fsdp.h"
#include "fsdp/plan/plan.h"
#include "fsdp/plan/step_time.h"
#include "tools/step_profile.h"
#include "tools/tool_util.h"
#include "util/number_flag.h"

namespace {

using fsdp::ShardingStrategy;

struct Args {
  std::string model = "124m";
  int64_t seq = 512;
  int64_t batch = 1;
  int steps = 3;
  int repeats = 1;
  std::string dtype = "fp32";
  std::vector<std::string> strategies = {"NO_SHARD", "SHARD_GRAD_OP", "FULL_SHARD"};
  std::vector<std::string> variants = {"plain", "prefetch", "ac", "prefetch+ac"};
  std::string json;
  std::string label;
  int nproc = 2;
  std::string checkpoint_dir;      // empty: no checkpoint timings
  std::string allocator = "fsdp";  // fsdp: fsdp/host_memory.h's; glibc: malloc's heap (counted)
  std::string device = "cpu";      // cpu or cuda
  int root_chunks = 0;             // fsdp_config.root_reduction_chunks, but under `onepiece`
  int64_t vocab = 0;               // the model's vocabulary instead of its own; 0: its own
  int64_t layers = 0;              // the model's depth instead of its own; 0: its own
  int64_t lora_r = 0;              // LoRA's rank on every linear layer; 0: full training
  double peak_tflops = 0;          // the device's peak, for the MFU column; 0: no column
  std::string profile_dir;         // --profile: one more step profiled per run; empty: none
  // The time model's links (fsdp/plan/step_time.h), Gbit/s and microseconds; a bandwidth turns
  // on the prediction and the compute-alone measurement. 0: not given.
  double intra_gbit = 0, intra_us = 0, inter_gbit = 0, inter_us = 0;
  double comm_cpu_gbit = 0, contention = 0;  // TimeModelOptions' comm_cpu_bandwidth, contention
  // The CPU bound: what a core moves over each link (LinkSpec::cpu_bandwidth, Gbit/s; 0: free)
  // and the cores a rank shares with its collectives (-1: this process's CPUs over the host's
  // ranks; 0: no bound).
  double intra_cpu_gbit = 0, inter_cpu_gbit = 0, cores_per_rank = -1;
  // --compute-cpus, --comm-cpus as given, and their CPUs; empty: threads left where they run.
  std::string compute_cpus_text, comm_cpus_text;
  std::vector<int> compute_cpus, comm_cpus;
  bool predict() const { return intra_gbit > 0 || inter_gbit > 0; }
  bool pinned() const { return !compute_cpus.empty(); }
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::vector<std::string> split_variant(const std::string& v) {
  std::vector<std::string> out;
  std::stringstream in(v);
  for (std::string item; std::getline(in, item, '+');) out.push_back(item);
  return out;
}

bool has_feature(const std::string& variant, const std::string& feature) {
  const std::vector<std::string> f = split_variant(variant);
  return std::find(f.begin(), f.end(), feature) != f.end();
}

// "0", "0-3,6": the CPUs of a list as taskset takes it.
std::vector<int> parse_cpus(const std::string& flag, const std::string& text) {
  std::vector<int> cpus;
  for (const std::string& part : split_list(text)) {
    const size_t dash = part.find('-');
    const int64_t first = fsdp::flags::parse_int(flag, part.substr(0, dash), 0, CPU_SETSIZE - 1);
    const int64_t last =
        dash == std::string::npos
            ? first
            : fsdp::flags::parse_int(flag, part.substr(dash + 1), first, CPU_SETSIZE - 1);
    for (int64_t c = first; c <= last; ++c) cpus.push_back(static_cast<int>(c));
  }
  if (cpus.empty()) throw std::invalid_argument(flag + ": no CPU in '" + text + "'");
  return cpus;
}

cpu_set_t cpu_set_of(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  return set;
}

// The calling thread onto `cpus`; an errno, 0 on success. A thread starts with the affinity of the
// thread that creates it, which is how the collectives' threads get theirs: the training thread
// holds the comm CPUs while it starts them (CommCpus below) and the compute CPUs otherwise.
int set_thread_cpus(const std::vector<int>& cpus) {
  const cpu_set_t set = cpu_set_of(cpus);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

void pin_thread(const std::vector<int>& cpus, const std::string& flag, const std::string& text) {
  if (const int err = set_thread_cpus(cpus)) {
    throw std::runtime_error(flag + " " + text + ": cannot run a thread there (" +
                             std::strerror(err) + "; `taskset -p $$` shows the CPUs allowed)");
  }
}

// This process's threads, and how many of them may run on exactly `compute` and `comm`: what the
// JSON records, so that a reader (and tools_smoke) sees where the threads went.
struct ThreadPlaces {
  int threads = 0, on_compute = 0, on_comm = 0;
};
ThreadPlaces thread_places(const Args& a) {
  const cpu_set_t compute = cpu_set_of(a.compute_cpus), comm = cpu_set_of(a.comm_cpus);
  ThreadPlaces p;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    cpu_set_t set;
    const pid_t tid = static_cast<pid_t>(std::stol(task.path().filename().string()));
    if (sched_getaffinity(tid, sizeof(set), &set) != 0) continue;  // it has just exited
    ++p.threads;
    p.on_compute += CPU_EQUAL(&set, &compute) ? 1 : 0;
    p.on_comm += CPU_EQUAL(&set, &comm) ? 1 : 0;
  }
  return p;
}

// While it lives, the training thread is on the comm CPUs (when pinning), so that the threads it
// starts run there; then back on the compute CPUs, which main has already pinned it to once (so
// going back cannot fail).
class CommCpus {
 public:
  explicit CommCpus(const Args& a) : a_(a) {
    if (a_.pinned()) pin_thread(a_.comm_cpus, "--comm-cpus", a_.comm_cpus_text);
  }
  ~CommCpus() {
    if (a_.pinned() && set_thread_cpus(a_.compute_cpus) != 0) std::abort();
  }
  CommCpus(const CommCpus&) = delete;
  CommCpus& operator=(const CommCpus&) = delete;

 private:
  const Args& a_;
};

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
      a.seq = fsdp::flags::parse_int(k, value(), 1, 1 << 20);
    } else if (k == "--batch") {
      a.batch = fsdp::flags::parse_int(k, value(), 1, 1 << 20);
    } else if (k == "--steps") {
      a.steps = static_cast<int>(fsdp::flags::parse_int(k, value(), 1, 1000000));
    } else if (k == "--repeats") {
      a.repeats = static_cast<int>(fsdp::flags::parse_int(k, value(), 1, 10000));
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
      a.nproc = static_cast<int>(fsdp::flags::parse_int(k, value(), 1, 4096));
    } else if (k == "--allocator") {
      a.allocator = value();
    } else if (k == "--checkpoint") {
      a.checkpoint_dir = value();
    } else if (k == "--device") {
      a.device = value();
    } else if (k == "--intra-gbit" || k == "--inter-gbit") {
      (k == "--intra-gbit" ? a.intra_gbit : a.inter_gbit) =
          fsdp::flags::parse_number(k, value(), 1e-3, 1e7);
    } else if (k == "--contention") {
      a.contention = fsdp::flags::parse_number(k, value(), 0, 100);
    } else if (k == "--comm-cpu-gbit") {
      a.comm_cpu_gbit = fsdp::flags::parse_number(k, value(), 0, 1e7);
    } else if (k == "--intra-cpu-gbit" || k == "--inter-cpu-gbit") {
      (k == "--intra-cpu-gbit" ? a.intra_cpu_gbit : a.inter_cpu_gbit) =
          fsdp::flags::parse_number(k, value(), 0, 1e7);
    } else if (k == "--vocab") {
      a.vocab = fsdp::flags::parse_int(k, value(), 2, int64_t{1} << 24);
    } else if (k == "--layers") {
      a.layers = fsdp::flags::parse_int(k, value(), 1, 1 << 16);
    } else if (k == "--lora") {
      a.lora_r = fsdp::flags::parse_int(k, value(), 1, 1 << 16);
    } else if (k == "--profile") {
      a.profile_dir = value();
    } else if (k == "--peak-tflops") {
      a.peak_tflops = fsdp::flags::parse_number(k, value(), 1e-6, 1e6);
    } else if (k == "--root-chunks") {
      a.root_chunks = static_cast<int>(fsdp::flags::parse_int(k, value(), 0, 1000000));
    } else if (k == "--cores-per-rank") {
      a.cores_per_rank = fsdp::flags::parse_number(k, value(), 0, 1e4);
    } else if (k == "--intra-us" || k == "--inter-us") {
      (k == "--intra-us" ? a.intra_us : a.inter_us) = fsdp::flags::parse_number(k, value(), 0, 1e6);
    } else if (k == "--compute-cpus" || k == "--comm-cpus") {
      const bool compute = k == "--compute-cpus";
      const std::string list = value();
      (compute ? a.compute_cpus_text : a.comm_cpus_text) = list;
      (compute ? a.compute_cpus : a.comm_cpus) = parse_cpus(k, list);
    } else {
      throw std::invalid_argument(
          "unknown option " + k +
          " (known: --model --seq --batch --steps --repeats --dtype "
          "--strategies --variants --json --label "
          "--nproc --checkpoint --allocator --device --intra-gbit --intra-us "
          "--inter-gbit --inter-us --comm-cpu-gbit --contention --intra-cpu-gbit "
          "--inter-cpu-gbit --cores-per-rank --compute-cpus --comm-cpus --vocab --layers "
          "--lora --peak-tflops --profile)");
    }
  }
  const std::vector<std::string> models = {"124m",  "large",    "xl",      "tiny",
                                           "llama", "llama-1b", "llama-7b"};
  if (std::find(models.begin(), models.end(), a.model) == models.end()) {
    throw std::invalid_argument(
        "--model: 124m, large, xl, tiny, llama, llama-1b or llama-7b; got " + a.model);
  }
  if (a.predict() && (a.intra_gbit <= 0 || a.inter_gbit <= 0)) {
    throw std::invalid_argument("the time model needs both --intra-gbit and --inter-gbit");
  }
  if (a.compute_cpus.empty() != a.comm_cpus.empty()) {
    throw std::invalid_argument("--compute-cpus and --comm-cpus go together: give both or neither");
  }
  if (a.device != "cpu" && a.device != "cuda") {
    throw std::invalid_argument("--device: cpu or cuda; got " + a.device);
  }
  if (a.dtype != "fp32" && a.dtype != "bf16" && a.dtype != "fp16") {
    throw std::invalid_argument("--dtype: fp32, bf16 or fp16");
  }
  if (a.allocator != "fsdp" && a.allocator != "glibc") {
    throw std::invalid_argument("--allocator: fsdp or glibc");
  }
  for (const auto& v : a.variants) {
    const std::vector<std::string> features = split_variant(v);
    const bool known = std::all_of(features.begin(), features.end(), [](const std::string& f) {
      return f == "prefetch" || f == "ac" || f == "ac2" || f == "offload" || f == "whole" ||
             f == "onepiece" || f == "unfused" || f == "fusedadam" || f == "composite";
    });
    if (v != "plain" && (features.empty() || !known)) {
      throw std::invalid_argument(
          "--variants: plain, or prefetch, ac, ac2, offload, whole, onepiece, unfused, fusedadam "
          "and composite joined by '+'; got " +
          v);
    }
    if (has_feature(v, "whole") && has_feature(v, "onepiece")) {
      throw std::invalid_argument("--variants: " + v +
                                  ": onepiece sets the split root reduction's pieces, and whole "
                                  "turns the split off");
    }
  }
  if (!a.profile_dir.empty() && !std::filesystem::is_directory(a.profile_dir)) {
    throw std::invalid_argument("--profile: '" + a.profile_dir +
                                "' is not a folder (make it first)");
  }
  for (const auto& s : a.strategies) fsdp::parse_sharding_strategy(s);  // throws on a bad name
  return a;
}

// The trainer's config for this benchmark: GPT-2 at its real context length (1024 positions), so
// the parameter counts are the published ones; Llama as configs/llama-small.yaml, or Llama 3.2
// 1B's config.json.
fsdp::TrainConfig bench_config(const Args& a, const std::string& strategy,
                               const std::string& variant) {
  fsdp::TrainConfig c;
  c.model.type = fsdp::ModelType::kGPT2;
  c.model.n_positions = 1024;
  if (a.model == "llama") {
    c.model.type = fsdp::ModelType::kLlama;
    c.model.n_positions = 0;  // the sequence length
    c.model.n_layer = 4, c.model.n_head = 8, c.model.n_kv_head = 2, c.model.dim = 256;
    c.model.intermediate_size = 704, c.model.tie_embeddings = true;
  } else if (a.model == "llama-1b") {
    c.model.type = fsdp::ModelType::kLlama;
    c.model.n_positions = 0;
    c.model.n_layer = 16, c.model.n_head = 32, c.model.n_kv_head = 8, c.model.dim = 2048;
    c.model.intermediate_size = 8192, c.model.tie_embeddings = true;
    c.model.vocab_size = 128256, c.model.rope_theta = 500000, c.model.norm_eps = 1e-5;
    c.model.rope_scaling = "llama3", c.model.rope_factor = 32;
    c.model.rope_low_freq_factor = 1, c.model.rope_high_freq_factor = 4;
    c.model.rope_original_max_positions = 8192;
  } else if (a.model == "llama-7b") {
    c.model.type = fsdp::ModelType::kLlama;
    c.model.n_positions = 0;
    c.model.n_layer = 32, c.model.n_head = 32, c.model.n_kv_head = 32, c.model.dim = 4096;
    c.model.intermediate_size = 11008, c.model.tie_embeddings = false;
    c.model.vocab_size = 32000, c.model.rope_theta = 10000, c.model.norm_eps = 1e-5;
  } else if (a.model == "124m") {
    c.model.n_layer = 12, c.model.n_head = 12, c.model.n_embd = 768;
  } else if (a.model == "large") {
    c.model.n_layer = 36, c.model.n_head = 20, c.model.n_embd = 1280;
  } else if (a.model == "xl") {
    c.model.n_layer = 48, c.model.n_head = 25, c.model.n_embd = 1600;
  } else {
    c.model.n_layer = 2, c.model.n_head = 2, c.model.n_embd = 64, c.model.n_positions = a.seq;
  }
  if (a.vocab > 0) c.model.vocab_size = a.vocab;
  if (a.layers > 0) c.model.n_layer = a.layers;
  if (a.lora_r > 0) {
    c.lora.target_modules = {"all-linear"};
    c.lora.r = a.lora_r;
    c.lora.alpha = 2.0 * static_cast<double>(a.lora_r);
  }
  c.data.seq_len = a.seq;
  c.train.micro_batch_size = a.batch;
  c.train.fused_loss = !has_feature(variant, "unfused");
  c.model.fused_ops = !has_feature(variant, "composite");
  c.mixed_precision = a.dtype == "bf16"   ? fsdp::DType::kBFloat16
                      : a.dtype == "fp16" ? fsdp::DType::kFloat16
                                          : fsdp::DType::kFloat32;
  c.fsdp.sharding_strategy = fsdp::parse_sharding_strategy(strategy);
  const bool prefetch = has_feature(variant, "prefetch");
  c.fsdp.forward_prefetch = prefetch;
  c.fsdp.backward_prefetch =
      prefetch ? fsdp::BackwardPrefetch::kBackwardPre : fsdp::BackwardPrefetch::kNoPrefetch;
  c.fsdp.activation_checkpointing = has_feature(variant, "ac") || has_feature(variant, "ac2");
  if (has_feature(variant, "ac2")) c.fsdp.activation_checkpointing_every = 2;
  c.fsdp.offload_params = has_feature(variant, "offload");
  c.fsdp.split_root_reduction = !has_feature(variant, "whole");
  c.fsdp.root_reduction_chunks = !c.fsdp.split_root_reduction       ? 0
                                 : has_feature(variant, "onepiece") ? 1
                                                                    : a.root_chunks;
  c.train.device = a.device == "cuda" ? fsdp::TrainDevice::kCuda : fsdp::TrainDevice::kCpu;
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

int64_t minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// The process's CPU time so far, every thread's, user and system: std::clock, as the compute
// alone's (measure_compute_profile) is read, so that the two subtract.
int64_t cpu_ns() { return static_cast<int64_t>(std::clock()) * (1000000000 / CLOCKS_PER_SEC); }

// How long `cpus` have been idle since boot, averaged over them: /proc/stat's idle and iowait, in
// clock ticks (10 ms). In a pinned run every training thread of this host runs on them and no
// thread of the collectives does, so over a step this is the time no training thread had work:
// the exposed communication, read off the compute's own timeline, as a GPU trace shows it (the
// compute stream's gaps), not as a step minus a compute alone measured in another run (whose
// spread between runs here, 0.1 to 0.2 s, exceeds a 10 Gbit/s step's exposed time). It leaves
// out what the training threads spend inside collective calls (issuing, polling); the step minus
// the compute alone keeps that.
int64_t compute_cpus_idle_ns(const std::vector<int>& cpus) {
  std::ifstream stat("/proc/stat");
  int64_t ticks = 0;
  for (std::string line; std::getline(stat, line);) {
    if (line.size() < 4 || line.compare(0, 3, "cpu") != 0 || !std::isdigit(line[3])) continue;
    std::istringstream in(line.substr(3));
    int cpu = -1;
    int64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0;
    in >> cpu >> user >> nice >> system >> idle >> iowait;
    if (std::find(cpus.begin(), cpus.end(), cpu) != cpus.end()) ticks += idle + iowait;
  }
  return ticks * (1000000000 / sysconf(_SC_CLK_TCK)) / static_cast<int64_t>(cpus.size());
}

double mib(int64_t bytes) { return bytes / (1024.0 * 1024.0); }

// The largest value over the ranks.
int64_t max_over_ranks(fsdp::Comm& world, int64_t mine) {
  std::vector<int64_t> all(static_cast<size_t>(world.size()));
  world.all_gather(&mine, all.data(), 1, fsdp::DType::kInt64);
  return *std::max_element(all.begin(), all.end());
}

// One step's wall time and its parts, in nanoseconds, and the page faults it took (fresh pages
// cost about 2 us each here), each the slowest rank's.
struct StepTimes {
  int64_t step = 0, forward = 0, backward = 0, optimizer = 0, comm = 0, faults = 0;
  int64_t cpu = 0;   // the process's CPU time in the step, every thread's
  int64_t idle = 0;  // pinned runs: the compute CPUs' idle time in the step (compute_cpus_idle_ns)
};
constexpr int kStepParts = 8;

double seconds(int64_t ns) { return ns * 1e-9; }

struct Result {
  std::string strategy, variant;
  std::vector<StepTimes> steps;  // every timed step of every repeat
  double loss = 0;
  // Peaks over the ranks and repeats, above the values before the model was built: live tensor
  // bytes and resident set.
  int64_t peak_tensors = 0, peak_rss = 0;
  // The resident set's peak over the run, warm-up included, as it is (libraries and all): what
  // PyTorch's runs report (bench/fsdp2_cpu.py), and what a host's memory limit meets.
  int64_t peak_rss_absolute = 0;
  int64_t peak_held = 0;     // live tensors and the host allocator's cached blocks
  int64_t fresh_blocks = 0;  // large blocks the host allocator mapped during the timed steps
  // GPU runs: the CUDA caching allocator's peaks during the timed steps (absolute, as
  // torch.cuda.max_memory_allocated and max_memory_reserved), the largest over the ranks.
  int64_t peak_device_allocated = 0, peak_device_reserved = 0;
  fsdp::MemoryStats memory;
  int64_t optimizer_bytes = 0;
  int64_t comm_bytes = 0;  // per step
  fsdp::Plan plan;
  // The time model's (with --intra/--inter-gbit), one per repeat, each from that repeat's own
  // measurement of the compute alone.
  std::vector<fsdp::StepTimePlan> predictions;
  std::vector<fsdp::ComputeProfile> profiles;  // the compute alone each prediction came from
  int ranks_per_host = 0;
  double cores_per_rank = 0;  // the CPU bound's (TimeModelOptions::cores_per_rank)

  // The median of each part on its own.
  StepTimes median() const {
    auto med = [&](int64_t StepTimes::*part) {
      std::vector<int64_t> v;
      for (const auto& t : steps) v.push_back(t.*part);
      std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
      return v[v.size() / 2];
    };
    return {med(&StepTimes::step),      med(&StepTimes::forward), med(&StepTimes::backward),
            med(&StepTimes::optimizer), med(&StepTimes::comm),    med(&StepTimes::faults),
            med(&StepTimes::cpu),       med(&StepTimes::idle)};
  }
  double tokens_per_second(const Args& a) const {
    return plan.world_size * a.batch * a.seq / seconds(median().step);
  }
  // The repeats' median prediction (by step), beside the median step.
  std::optional<fsdp::StepTimePlan> predicted() const {
    if (predictions.empty()) return std::nullopt;
    std::vector<fsdp::StepTimePlan> v = predictions;
    const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
    std::nth_element(v.begin(), mid, v.end(),
                     [](const auto& x, const auto& y) { return x.step < y.step; });
    return *mid;
  }
};

// Each step's parts, the largest over the ranks.
std::vector<StepTimes> slowest_rank(fsdp::Comm& world, const std::vector<StepTimes>& mine) {
  std::vector<int64_t> flat;
  for (const auto& t : mine)
    flat.insert(flat.end(),
                {t.step, t.forward, t.backward, t.optimizer, t.comm, t.faults, t.cpu, t.idle});
  std::vector<int64_t> all(flat.size() * static_cast<size_t>(world.size()));
  world.all_gather(flat.data(), all.data(), flat.size(), fsdp::DType::kInt64);
  std::vector<StepTimes> out = mine;
  for (size_t r = 0; r < static_cast<size_t>(world.size()); ++r) {
    for (size_t i = 0; i < mine.size(); ++i) {
      const int64_t* t = &all[r * flat.size() + i * kStepParts];
      StepTimes& o = out[i];
      o = {std::max(o.step, t[0]),      std::max(o.forward, t[1]), std::max(o.backward, t[2]),
           std::max(o.optimizer, t[3]), std::max(o.comm, t[4]),    std::max(o.faults, t[5]),
           std::max(o.cpu, t[6]),       std::max(o.idle, t[7])};
    }
  }
  return out;
}

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

// The compute alone: every rank at once trains the variant's model as a world of one (no
// collective), so that the cores are shared as in the runs; the slowest rank's medians.
fsdp::ComputeProfile compute_alone(const Args& a, const std::string& variant, fsdp::Comm& world) {
  world.barrier();
  fsdp::ComputeProfile p =
      fsdp::measure_compute_profile(bench_config(a, "NO_SHARD", variant), a.steps);
  const auto slowest = [&](double sec) {
    return max_over_ranks(world, static_cast<int64_t>(sec * 1e9)) * 1e-9;
  };
  p.forward = slowest(p.forward);
  p.backward = slowest(p.backward);
  p.optimizer = slowest(p.optimizer);
  p.cpu = slowest(p.cpu);
  p.source = "measured in this run, every rank alone at once";
  return p;
}

// The cores a rank shares with its collectives for the CPU bound: --cores-per-rank, else none
// when pinned (the collectives have CPUs of their own), else the CPUs this process may use over
// the ranks on its host. bench/netem.sh, whose emulated hosts share one machine, gives it.
double cores_per_rank(const Args& a, fsdp::Comm& world) {
  if (a.cores_per_rank >= 0) return a.cores_per_rank;
  if (a.pinned()) return 0;
  return static_cast<double>(fsdp::tools::usable_cpus()) / std::max(1, world.local_size());
}

// The time model's options for `variant` (its compute measured once per activation-checkpointing
// setting, in `profiles`), on this job's links and hosts.
fsdp::TimeModelOptions time_options(const Args& a, const std::string& variant, fsdp::Comm& world,
                                    std::map<std::string, fsdp::ComputeProfile>& profiles) {
  const std::string ac = has_feature(variant, "ac2")  ? "ac2"
                         : has_feature(variant, "ac") ? "ac"
                                                      : "plain";
  if (!profiles.count(ac)) profiles[ac] = compute_alone(a, ac, world);
  fsdp::TimeModelOptions o;
  o.compute = profiles[ac];
  o.intra = fsdp::link_from_gbit(a.intra_gbit, a.intra_us, a.intra_cpu_gbit);
  o.inter = fsdp::link_from_gbit(a.inter_gbit, a.inter_us, a.inter_cpu_gbit);
  o.ranks_per_host = world.local_size();
  o.cores_per_rank = cores_per_rank(a, world);
  o.comm_cpu_bandwidth = a.comm_cpu_gbit * 1e9 / 8;
  o.contention = a.contention;
  o.algorithms = fsdp::collective_algorithms(world.backend());
  o.background_progress = world.progresses_in_background();
  return o;
}

std::string model_name(const Args& a);

// --profile: one more step with rank 0 under the profiler (every rank steps: the collectives need
// them all); its table and trace into the folder, the table's path printed.
void profile_step(const Args& a, const Result& r, const std::function<StepTimes()>& step,
                  const c10::Device& device, fsdp::Comm& world) {
  std::optional<fsdp_tools::StepProfile> profile;
  if (world.rank() == 0) profile.emplace(device.is_cuda());
  const StepTimes t = step();
  if (!profile) return;
  std::string stem =
      model_name(a) + "-" + r.strategy + "-" + r.variant + "-b" + std::to_string(a.batch);
  for (char& ch : stem) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '.') ch = '_';
  }
  const std::string base = a.profile_dir + "/" + stem;
  const auto totals = profile->stop(base + ".trace.json");
  std::ostringstream o;
  o << "# " << model_name(a) << ", " << r.strategy << " " << r.variant << ", batch " << a.batch
    << " x " << a.seq << ", " << a.dtype << ", " << world.size() << " rank(s), "
    << (device.is_cuda() ? "GPU" : "CPU") << "\n\n"
    << fsdp_tools::format_profile(totals, t.step, device.is_cuda()) << "\n";
  fsdp::ckpt::write_file_atomically(base + ".md", o.str());  // its own temporary, no link
  if (profile->no_trace().empty()) {
    std::printf("profile: %s.md (trace %s.trace.json)\n", base.c_str(), base.c_str());
  } else {
    std::printf("profile: %s.md (no trace: %s)\n", base.c_str(), profile->no_trace().c_str());
  }
}

Result run(const Args& a, const std::string& strategy, const std::string& variant,
           fsdp::CommPtr world, const fsdp::TimeModelOptions* time, std::vector<IoResult>* io) {
  using Clock = std::chrono::steady_clock;
  const fsdp::TrainConfig c = bench_config(a, strategy, variant);
  const int n = world->size();
  Result r;
  r.strategy = strategy;
  r.variant = variant;
  r.plan = fsdp::plan_training(c, n, world->local_size());  // HYBRID: a shard group per host
  if (time && !c.fsdp.offload_params) {
    r.predictions.push_back(fsdp::predict_step_time(r.plan, c, *time));
    r.profiles.push_back(time->compute);
    r.cores_per_rank = time->cores_per_rank;
  }
  r.ranks_per_host = world->local_size();
  fsdp::release_cached_host_memory();  // the previous run's blocks
  reset_peak_rss();
  const int64_t baseline_kib = read_status_kib("VmRSS:");
  const int64_t baseline_tensors = fsdp::host_memory().live;
  auto counts = std::make_shared<fsdp::TrafficCounts>();
  fsdp::CausalLM lm = fsdp::build_model(c);
  auto model = [&] {
    CommCpus on_comm(a);  // the groups HYBRID_SHARD splits off start their workers
    return fsdp::fully_shard(lm.module, fsdp::count_traffic(world, counts),
                             c.sharding_options().param_init(lm.param_init));
  }();
  const c10::Device device = model->device();
  fsdp::AdamWOptions adamw;
  if (has_feature(variant, "fusedadam")) adamw.impl = fsdp::AdamWImpl::kFused;
  fsdp::AdamW opt(fsdp::sharded_params(*model), adamw);
  // fp16 steps as PyTorch's do with a GradScaler: the loss scaled, the optimizer phase unscaling,
  // checking for inf/NaN (one all-reduce) and stepping.
  std::optional<fsdp::ShardedGradScaler> scaler;
  if (c.mixed_precision == fsdp::DType::kFloat16) scaler.emplace(c.grad_scaler);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(world->rank() + 1);
  const at::Tensor tokens =
      at::randint(c.model.vocab_size, {a.batch, a.seq + 1}, gen, at::kLong).to(device);
  // Each phase ends with the device's current stream synchronised (it waits for the collectives),
  // so that the clocks time the work, not its queueing.
  auto step = [&] {
    StepTimes t;
    fsdp::synchronize_current_stream(device);
    world->barrier();
    const int64_t blocked = counts->blocked_ns, faults = minor_faults(), cpu0 = cpu_ns();
    const int64_t idle0 = a.pinned() ? compute_cpus_idle_ns(a.compute_cpus) : 0;
    const auto t0 = Clock::now();
    opt.zero_grad();
    at::Tensor loss = fsdp::next_token_loss(lm, tokens.narrow(1, 0, a.seq),
                                            tokens.narrow(1, 1, a.seq), c.train.fused_loss);
    fsdp::synchronize_current_stream(device);
    const auto t1 = Clock::now();
    (scaler ? scaler->scale(loss) : loss).backward();
    fsdp::synchronize_current_stream(device);
    const auto t2 = Clock::now();
    if (scaler) {
      scaler->step(opt, *world);
      scaler->update();
    } else {
      opt.step();
    }
    r.loss = loss.item<double>();
    fsdp::synchronize_current_stream(device);
    const auto t3 = Clock::now();
    auto ns = [](Clock::duration d) {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
    };
    return StepTimes{ns(t3 - t0),
                     ns(t1 - t0),
                     ns(t2 - t1),
                     ns(t3 - t2),
                     counts->blocked_ns - blocked,
                     minor_faults() - faults,
                     cpu_ns() - cpu0,
                     a.pinned() ? compute_cpus_idle_ns(a.compute_cpus) - idle0 : 0};
  };
  step();  // warm-up: records the unit order, faults in buffers, allocates AdamW state
  world->barrier();
  const int64_t warmup_peak_kib = read_status_kib("VmHWM:");
  model->reset_peak_memory();
  counts->reset();
  restart_peak_rss();  // the timed steps' peak, over heap the warm-up left in place
  fsdp::reset_host_memory_peak();
  fsdp::reset_peak_device_memory(device);
  const int64_t mapped = fsdp::host_memory().mapped_blocks;
  std::vector<StepTimes> mine;
  for (int i = 0; i < a.steps; ++i) mine.push_back(step());
  r.steps = slowest_rank(*world, mine);
  const int64_t peak_kib = read_status_kib("VmHWM:");
  r.peak_rss = max_over_ranks(*world, (peak_kib - baseline_kib) * 1024);
  r.peak_rss_absolute = max_over_ranks(*world, std::max(peak_kib, warmup_peak_kib) * 1024);
  const fsdp::HostMemoryStats host = fsdp::host_memory();
  r.peak_tensors = max_over_ranks(*world, host.peak_live - baseline_tensors);
  r.peak_held = max_over_ranks(*world, host.peak_held - baseline_tensors);
  r.fresh_blocks = max_over_ranks(*world, host.mapped_blocks - mapped);
  const fsdp::DeviceMemory gpu = fsdp::device_memory(device);
  r.peak_device_allocated = max_over_ranks(*world, gpu.peak_allocated_bytes);
  r.peak_device_reserved = max_over_ranks(*world, gpu.peak_reserved_bytes);
  r.memory = model->memory();
  r.optimizer_bytes = opt.state_bytes();
  r.comm_bytes = counts->total_bytes() / a.steps;
  if (io) *io = checkpoint_io(*model, opt, a.checkpoint_dir, *world);
  if (!a.profile_dir.empty()) profile_step(a, r, step, device, *world);
  return r;
}

// Adds a repeat's measurements to the first run of the same strategy and variant.
void merge(Result& into, const Result& again) {
  into.steps.insert(into.steps.end(), again.steps.begin(), again.steps.end());
  into.predictions.insert(into.predictions.end(), again.predictions.begin(),
                          again.predictions.end());
  into.profiles.insert(into.profiles.end(), again.profiles.begin(), again.profiles.end());
  into.peak_tensors = std::max(into.peak_tensors, again.peak_tensors);
  into.peak_rss = std::max(into.peak_rss, again.peak_rss);
  into.peak_rss_absolute = std::max(into.peak_rss_absolute, again.peak_rss_absolute);
  into.fresh_blocks = std::max(into.fresh_blocks, again.fresh_blocks);
  into.peak_held = std::max(into.peak_held, again.peak_held);
  into.peak_device_allocated = std::max(into.peak_device_allocated, again.peak_device_allocated);
  into.peak_device_reserved = std::max(into.peak_device_reserved, again.peak_device_reserved);
}

// "gpt2-124m", ..., "llama-small", "llama-1b", "llama-7b": the model's name in records and tables,
// with the vocabulary and depth when --vocab and --layers changed them, and LoRA's rank.
std::string model_name(const Args& a) {
  const std::string name = a.model == "llama"                ? "llama-small"
                           : a.model.rfind("llama-", 0) == 0 ? a.model
                                                             : "gpt2-" + a.model;
  std::string changed;
  if (a.vocab > 0) changed = "vocabulary " + std::to_string(a.vocab);
  if (a.layers > 0) changed += (changed.empty() ? "" : ", ") + std::to_string(a.layers) + " layers";
  if (a.lora_r > 0)
    changed += (changed.empty() ? "LoRA r " : ", LoRA r ") + std::to_string(a.lora_r);
  return changed.empty() ? name : name + " (" + changed + ")";
}

// The model's FLOPs per trained token, forward and backward (bench/README.md, "FLOPs and MFU"):
// 6 per parameter a token's matmuls use (all but the position table and an untied input
// embedding, which are looked up), plus attention's scores and weighted sum, 12 x layers x the
// query width x the sequence (PaLM's count, as nanoGPT's estimate_mfu: the causal mask's
// skipped half included, as FlashAttention's and TinyLlama's figures count it).
double flops_per_token(const Args& a) {
  const fsdp::TrainConfig c = bench_config(a, "NO_SHARD", "plain");
  const fsdp::ModelShapes shapes = fsdp::model_shapes(c);
  const bool tied = c.model.type == fsdp::ModelType::kGPT2 || c.model.tie_embeddings;
  double matmul = static_cast<double>(shapes.parameters());
  for (const fsdp::ParameterShape& p : shapes.outer) {
    const bool positions = p.name.find("wpe") != std::string::npos;
    const bool input_table = !tied && p.name.find("embed_tokens") != std::string::npos;
    if (positions || input_table) matmul -= static_cast<double>(p.numel());
  }
  const int64_t head_dim =
      c.model.head_dim > 0 ? c.model.head_dim : c.model.width() / c.model.n_head;
  const double attention = 12.0 * c.model.n_layer * c.model.n_head * head_dim * a.seq;
  // Under LoRA the frozen weights get no gradient: forward and the input's gradient, 4 a
  // parameter (the adapters' own FLOPs, r / width of that, left out).
  return (a.lora_r > 0 ? 4 : 6) * matmul + attention;
}

// The model TFLOP/s each rank ran in `r`'s median step.
double tflops_per_rank(const Args& a, const Result& r) {
  return flops_per_token(a) * r.tokens_per_second(a) / r.plan.world_size * 1e-12;
}

std::string json_record(const Args& a, int n, const std::string& backend, const Result& r) {
  const auto& m = r.memory;
  const auto& p = r.plan.memory;
  const StepTimes t = r.median();
  std::ostringstream o;
  const fsdp::TrainConfig c = bench_config(a, r.strategy, r.variant);
  const double flops = flops_per_token(a);
  o << "{\"model\": \"" << model_name(a) << "\", \"parameters\": " << r.plan.parameters
    << ", \"trainable\": " << r.plan.trainable << ", \"vocab_size\": " << c.model.vocab_size
    << ", \"lora_r\": " << a.lora_r
    << ", \"fused_loss\": " << (c.train.fused_loss ? "true" : "false")
    << ", \"fused_ops\": " << (c.model.fused_ops ? "true" : "false")
    << ", \"flops_per_token\": " << static_cast<int64_t>(flops)  // a whole count
    << ", \"tflops_per_rank\": " << tflops_per_rank(a, r);
  if (a.peak_tflops > 0) {
    o << ", \"peak_tflops\": " << a.peak_tflops
      << ", \"mfu\": " << tflops_per_rank(a, r) / a.peak_tflops;
  }
  o << ", \"world_size\": " << n << ", \"backend\": \"" << backend << "\", \"device\": \""
    << a.device << "\", \"dtype\": \"" << a.dtype << "\", \"seq\": " << a.seq
    << ", \"batch_per_rank\": " << a.batch << ", \"threads_per_rank\": " << at::get_num_threads()
    << ", \"strategy\": \"" << r.strategy << "\", \"variant\": \"" << r.variant
    << "\", \"timed_steps\": " << r.steps.size() << ", \"step_seconds\": [" <<
      [&] {
        std::string list;
        for (const auto& s : r.steps)
          list += (list.empty() ? "" : ", ") + std::to_string(seconds(s.step));
        return list;
      }()
    << "], \"median\": {\"step\": " << seconds(t.step) << ", \"forward\": " << seconds(t.forward)
    << ", \"backward\": " << seconds(t.backward) << ", \"optimizer\": " << seconds(t.optimizer)
    << ", \"in_collectives\": " << seconds(t.comm) << ", \"page_faults\": " << t.faults
    << ", \"cpu\": " << seconds(t.cpu) << "}, \"tokens_per_second\": " << r.tokens_per_second(a)
    << ", \"loss\": " << r.loss << ", \"allocator\": \"" << a.allocator
    << "\", \"fresh_blocks\": " << r.fresh_blocks << ", \"peak_tensor_bytes\": " << r.peak_tensors
    << ", \"peak_held_bytes\": " << r.peak_held << ", \"peak_rss_bytes\": " << r.peak_rss
    << ", \"peak_rss_absolute_bytes\": " << r.peak_rss_absolute
    << ", \"peak_device_allocated_bytes\": " << r.peak_device_allocated
    << ", \"peak_device_reserved_bytes\": " << r.peak_device_reserved
    << ", \"host_shard_bytes\": " << m.host_shard_bytes << ", \"model_state_bytes\": "
    << m.sharded_param_bytes + m.sharded_frozen_bytes + m.sharded_grad_bytes + r.optimizer_bytes
    << ", \"peak_gathered_bytes\": " << m.peak_gathered_param_bytes
    << ", \"peak_grad_buffer_bytes\": " << m.peak_grad_buffer_bytes
    << ", \"pool_bytes\": " << m.pool_bytes << ", \"comm_bytes_per_step\": " << r.comm_bytes
    << ", \"plan\": {\"model_state_bytes\": " << p.model_state()
    << ", \"gathered_bytes\": " << p.gathered << ", \"grad_buffer_bytes\": " << p.grad_buffers
    << ", \"activation_bytes\": " << p.activations << ", \"logits_bytes\": " << p.logits
    << ", \"embedding_grad_bytes\": " << p.embedding_grads << ", \"total_bytes\": " << p.total()
    << ", \"comm_bytes_per_step\": " << r.plan.comm.total() << "}";
  if (const auto predicted = r.predicted()) {
    const fsdp::StepTimePlan& t = *predicted;
    o << ", \"links\": {\"intra_gbit\": " << a.intra_gbit << ", \"intra_us\": " << a.intra_us
      << ", \"inter_gbit\": " << a.inter_gbit << ", \"inter_us\": " << a.inter_us
      << ", \"ranks_per_host\": " << r.ranks_per_host
      << ", \"intra_cpu_gbit\": " << a.intra_cpu_gbit
      << ", \"inter_cpu_gbit\": " << a.inter_cpu_gbit
      << ", \"cores_per_rank\": " << r.cores_per_rank << "}, \"predicted\": {\"step\": " << t.step
      << ", \"compute\": " << t.compute << ", \"optimizer\": " << t.optimizer
      << ", \"in_collectives\": " << t.in_collectives << ", \"exposed\": " << t.exposed
      << ", \"tokens_per_second\": " << t.tokens_per_second << ", \"comm_cpu\": " << t.comm_cpu
      << ", \"cpu_bound\": " << t.cpu_bound << ", \"waits\": {";
    for (size_t i = 0; i < t.waits.size(); ++i) {
      o << (i ? ", " : "") << "\"" << t.waits[i].cause << "\": " << t.waits[i].seconds;
    }
    o << "}}, \"predicted_steps\": [";
    for (size_t i = 0; i < r.predictions.size(); ++i) {
      o << (i ? ", " : "") << r.predictions[i].step;
    }
    o << "], \"compute_alone_seconds\": [";
    for (size_t i = 0; i < r.predictions.size(); ++i) {
      o << (i ? ", " : "") << r.predictions[i].compute + r.predictions[i].optimizer;
    }
    o << "], \"compute_alone_profiles\": [";
    for (size_t i = 0; i < r.profiles.size(); ++i) {
      const fsdp::ComputeProfile& p = r.profiles[i];
      o << (i ? ", " : "") << "{\"forward\": " << p.forward << ", \"backward\": " << p.backward
        << ", \"optimizer\": " << p.optimizer << ", \"cpu\": " << p.cpu << "}";
    }
    o << "]";
  }
  if (a.pinned()) {
    const ThreadPlaces places = thread_places(a);
    o << ", \"cpus\": {\"compute\": \"" << a.compute_cpus_text << "\", \"comm\": \""
      << a.comm_cpus_text << "\", \"threads\": " << places.threads
      << ", \"threads_on_compute\": " << places.on_compute
      << ", \"threads_on_comm\": " << places.on_comm
      << ", \"compute_idle_seconds\": " << seconds(t.idle) << "}";
  }
  o << ", \"label\": \"" << a.label << "\"}";
  return o.str();
}

std::string fixed(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// What a row's throughput is compared with: NO_SHARD with the same variant (prefetch against
// prefetch: the options a sharded run adds are the ones compared), else NO_SHARD plain.
const Result* no_shard_baseline(const std::vector<Result>& results, const Result& row) {
  const Result* plain = nullptr;
  for (const auto& r : results) {
    if (r.strategy != "NO_SHARD") continue;
    if (r.variant == row.variant) return &r;
    if (r.variant == "plain") plain = &r;
  }
  return plain;
}

void print_table(const Args& a, const std::vector<Result>& results) {
  std::printf(
      "\n| strategy | variant | step (s) | tokens/s | vs NO_SHARD | forward | backward | optimizer "
      "| "
      "in collectives | tensors (MiB) | plan (MiB) | tensors / plan | peak RSS (MiB) | RSS / plan "
      "| "
      "model state (MiB) | comm/step (MiB) | comm / theory | device peak (MiB) |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | "
      "--- "
      "| --- | --- |\n");
  for (const auto& r : results) {
    const Result* base = no_shard_baseline(results, r);
    const StepTimes t = r.median();
    const double model_state = mib(r.memory.sharded_param_bytes + r.memory.sharded_frozen_bytes +
                                   r.memory.sharded_grad_bytes + r.optimizer_bytes);
    const double plan = static_cast<double>(r.plan.memory.total());
    const double theory = static_cast<double>(r.plan.comm.total());
    std::printf(
        "| %s | %s | %.2f | %.1f | %s | %.2f | %.2f | %.2f | %.2f | %.0f | %.0f | %.3f | %.0f | "
        "%.3f | %.1f | %.1f | %s | %s |\n",
        r.strategy.c_str(), r.variant.c_str(), seconds(t.step), r.tokens_per_second(a),
        base ? fixed(r.tokens_per_second(a) / base->tokens_per_second(a), 3).c_str() : "-",
        seconds(t.forward), seconds(t.backward), seconds(t.optimizer), seconds(t.comm),
        mib(r.peak_tensors), mib(r.plan.memory.total()), r.peak_tensors / plan, mib(r.peak_rss),
        r.peak_rss / plan, model_state, mib(r.comm_bytes),
        theory > 0 ? fixed(r.comm_bytes / theory, 4).c_str() : "-",
        a.device == "cpu" ? "-" : fixed(mib(r.peak_device_allocated), 0).c_str());
  }
  std::printf(
      "(%s, %s, seq %lld, batch %lld per rank; times: medians of %zu timed steps, slowest "
      "rank; vs NO_SHARD: against NO_SHARD with the same variant; in collectives: inside the "
      "collectives' issue and wait calls; tensors and peak RSS: "
      "per rank, peak above the process before the model was built; plan: fsdp-plan's total; "
      "comm: bytes of every collective per step; device peak: the CUDA caching allocator's "
      "peak allocated bytes, GPU runs only)\n",
      model_name(a).c_str(), a.dtype.c_str(), static_cast<long long>(a.seq),
      static_cast<long long>(a.batch), results.empty() ? size_t{0} : results[0].steps.size());
}

// The model FLOPs each rank ran per second (flops_per_token), and their share of --peak-tflops;
// with the logits' share of the plan, the two figures the head's fusion moves.
void print_flops(const Args& a, const std::vector<Result>& results) {
  const double flops = flops_per_token(a);
  std::printf(
      "\n| strategy | variant | TFLOP/s per rank | MFU | logits in plan (MiB) |\n"
      "| --- | --- | --- | --- | --- |\n");
  for (const auto& r : results) {
    const double tflops = tflops_per_rank(a, r);
    std::printf(
        "| %s | %s | %.3f | %s | %.0f |\n", r.strategy.c_str(), r.variant.c_str(), tflops,
        a.peak_tflops > 0 ? fixed(100 * tflops / a.peak_tflops, 1).append(" %").c_str() : "-",
        mib(r.plan.memory.logits));
  }
  std::printf(
      "(%.4g FLOPs a token: %d x the matmuls' parameters + 12 x layers x query width x "
      "sequence, bench/README.md; MFU against --peak-tflops %g)\n",
      flops, a.lora_r > 0 ? 4 : 6, a.peak_tflops);
}

// Measured against the time model: the step, the compute alone (its profile's forward and backward
// and the shard's AdamW), what is left of the step (the exposed communication), and the
// prediction.
void print_time_model(const Args& a, const std::vector<Result>& results) {
  std::printf(
      "\n| strategy | variant | step (s) | compute alone (s) | exposed (s) | in collectives (s) | "
      "predicted step (s) | predicted / measured | predicted exposed (s) | predicted collectives "
      "(s) | CPU beyond compute's (s) | predicted (s) | CPU bound (s) | compute CPUs idle (s) |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const auto& r : results) {
    const auto predicted = r.predicted();
    if (!predicted) continue;
    const fsdp::StepTimePlan& p = *predicted;
    const StepTimes t = r.median();
    const double alone = p.compute + p.optimizer;
    double alone_cpu = 0;
    for (const auto& profile : r.profiles) alone_cpu += profile.cpu / r.profiles.size();
    std::printf(
        "| %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.3f | %.2f | %.2f | %.2f | %.2f | %.2f "
        "| %s |\n",
        r.strategy.c_str(), r.variant.c_str(), seconds(t.step), alone, seconds(t.step) - alone,
        seconds(t.comm), p.step, p.step / seconds(t.step), p.exposed, p.in_collectives,
        seconds(t.cpu) - alone_cpu, p.comm_cpu, p.cpu_bound,
        a.pinned() ? fixed(seconds(t.idle), 2).c_str() : "-");
  }
  std::printf(
      "(links: within a host %g Gbit/s, %g us; between hosts %g Gbit/s, %g us; a core moves %g "
      "Gbit/s, contention %g; CPU bound: a core moves %g Gbit/s within a host, %g between, %g "
      "cores a rank (0: none); compute alone: every "
      "rank training a world of one at once, the slowest; in collectives: measured, the time the "
      "compute thread waited; predicted collectives: how long the collectives run; CPU beyond "
      "compute's: the process's CPU seconds a step over the compute alone's, measured, and "
      "predicted for the collectives; compute CPUs idle: pinned runs, the time a step no training "
      "thread of this host had work, the exposed communication on the compute's own timeline)\n",
      a.intra_gbit, a.intra_us, a.inter_gbit, a.inter_us, a.comm_cpu_gbit, a.contention,
      a.intra_cpu_gbit, a.inter_cpu_gbit, results.empty() ? 0.0 : results.front().cores_per_rank);
}

// The world, its threads on the comm CPUs when pinning. MPI starts its progress thread at the
// first nonblocking collective: one is issued here, so that it starts there too.
fsdp::CommPtr start_world(const Args& a, int argc, char** argv) {
  CommCpus on_comm(a);
  fsdp::CommPtr world = fsdp::tools::start_ranks(argc, argv, a.nproc, a.device);
  if (a.pinned()) {
    int64_t one = 1;
    world->all_reduce_async(&one, 1, fsdp::DType::kInt64, fsdp::ReduceOp::kSum)->wait();
  }
  return world;
}

}  // namespace

// What --help prints: the usage at the top of this file, in short.
constexpr const char* kUsage =
    "usage: fsdp-bench [--model 124m|large|xl|tiny|llama|llama-1b|llama-7b] [--vocab V]\n"
    "           [--layers N] [--lora R] [--seq 512]\n"
    "           [--batch 1] [--steps 3] [--peak-tflops P]\n"
    "           [--repeats 1] [--dtype fp32|bf16|fp16] [--strategies NO_SHARD,SHARD_GRAD_OP,...]\n"
    "           [--variants "
    "plain,prefetch,ac,ac2,prefetch+ac,offload,whole,onepiece,unfused,fusedadam,composite]\n"
    "           [--allocator fsdp|glibc] [--json FILE] [--label TEXT] [--checkpoint DIR]\n"
    "           [--nproc 2] [--device cpu|cuda] [--root-chunks N] [--profile DIR]\n"
    "           [--intra-gbit G --inter-gbit G [--intra-us U] [--inter-us U] [--comm-cpu-gbit G]\n"
    "            [--contention C] [--intra-cpu-gbit G] [--inter-cpu-gbit G] [--cores-per-rank N]]\n"
    "           [--compute-cpus LIST --comm-cpus LIST]\n"
    "Each strategy and variant of one model trained on the same ranks (re-launched under mpirun\n"
    "without a launcher), with step times, memory and traffic beside the plan (bench/README.md).\n";

int main(int argc, char** argv) {
  fsdp::tools::write_whole_lines();
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  try {
    const Args a = parse_args(argc, argv);
    fsdp::HostAllocatorOptions host;
    if (a.allocator == "glibc") host.cache_min_bytes = SIZE_MAX;  // count only: all to malloc
    fsdp::install_host_allocator(host);
    if (a.pinned()) pin_thread(a.compute_cpus, "--compute-cpus", a.compute_cpus_text);
    fsdp::CommPtr world = start_world(a, argc, argv);
    // As fsdp-train: keep freed memory in the heap so that each step reuses the last one's pages.
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    const int n = world->size();
    std::vector<Result> results;
    std::vector<IoResult> io;
    std::map<std::string, fsdp::ComputeProfile> profiles;  // by activation checkpointing
    for (int repeat = 0; repeat < a.repeats; ++repeat) {
      // Each repeat measures the compute alone again, for its own predictions: this project's
      // VMs drift (the same compute took 2.6 to 5.3 s over one day), a repeat's cells less.
      profiles.clear();
      size_t i = 0;
      for (const auto& s : a.strategies) {
        for (const auto& v : a.variants) {
          const bool with_io =
              repeat == 0 && s == "FULL_SHARD" && v == "plain" && !a.checkpoint_dir.empty();
          std::optional<fsdp::TimeModelOptions> time;
          if (a.predict()) time = time_options(a, v, *world, profiles);
          Result r = run(a, s, v, world, time ? &*time : nullptr, with_io ? &io : nullptr);
          if (world->rank() == 0) {
            std::printf("fsdp-bench: %s %s: %.2f s/step\n", s.c_str(), v.c_str(),
                        seconds(r.median().step));
            std::fflush(stdout);
          }
          if (repeat == 0) {
            results.push_back(std::move(r));
          } else {
            merge(results[i], r);
          }
          ++i;
        }
      }
    }
    if (world->rank() != 0) return 0;
    print_table(a, results);
    print_flops(a, results);
    if (a.predict()) print_time_model(a, results);
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
