// The planner's time model (fsdp-plan, fsdp-bench): one optimizer step of a plan
// (fsdp/train/plan.h) replayed as the runtime schedules it, on two kinds of resource. Compute is
// one queue per rank, its per-unit forward and backward times split from a whole-model profile by
// each unit's FLOPs. Each process group's collectives run one at a time in issue order, each priced
// by a ring algorithm over the links its ranks span (within a host, or between hosts through the
// hosts' network links). Waits happen where the runtime waits: a unit's compute for its all-gather,
// the next unit's reduction for the previous one (and, across replicas, for its blocking
// all-reduce), the optimizer for every reduction. docs/plan.md derives each term and says where it
// is wrong. No LibTorch here except in measure_compute_profile, which runs the model.
#pragma once

#include <string>

#include "fsdp/train/config.h"
#include "fsdp/train/plan.h"

namespace fsdp {

// One level of the network as a collective sees it.
struct LinkSpec {
  double bandwidth = 0;  // bytes per second a ring step gets across this link, each way
  double latency = 0;    // seconds a message adds per hop over this link (software and wire)
};

// Seconds one rank computes, for the whole model at its micro-batch, with no collective.
struct ComputeProfile {
  double forward = 0;    // one micro-batch's forward
  double backward = 0;   // its backward (with the recomputation under activation checkpointing)
  double optimizer = 0;  // AdamW over every parameter; a rank steps its shard's share
  std::string source;    // where the figures came from, for the printout
};

// How the backend carries collectives out, which decides what a reduce-scatter and an all-reduce
// cost (all-gathers move (p-1)/p of their output in all three).
enum class CollectiveAlgorithms {
  kRing,  // NCCL: rings; a reduce-scatter moves (p-1)/p of its input, an all-reduce twice that
  kGloo,  // Gloo: a reduce-scatter is a ring all-reduce of the whole input (comm/gloo.cpp)
  // OpenMPI's nonblocking collectives (libnbc), as the MPI backend calls them: a reduce-scatter
  // is a binomial reduce of the whole input to rank 0 (ceil(log2 p) rounds) and then rank 0
  // sending each rank its chunk; an in-place all-reduce a binomial reduce and a binomial
  // broadcast of the whole buffer.
  kOpenMpi,
};

// The algorithms of a backend by its name (Comm::backend(), fsdp-plan's --backend): "gloo",
// "mpi"; anything else (nccl) rings.
CollectiveAlgorithms collective_algorithms(const std::string& backend);

// A link given as people quote one: Gbit/s and microseconds.
LinkSpec link_from_gbit(double gbit_per_second, double latency_us);

struct TimeModelOptions {
  ComputeProfile compute;
  // Links. intra: between ranks of one host (shared memory, loopback, NVLink); inter: each
  // host's network link, shared by the ranks on it.
  LinkSpec intra;
  LinkSpec inter;
  int ranks_per_host = 0;  // 0: every rank on one host
  CollectiveAlgorithms algorithms = CollectiveAlgorithms::kRing;
  // Collectives that take the cores compute runs on (a CPU host whose cores all compute: TCP,
  // copies and sums). A collective moving data at its link's bandwidth B keeps a share
  // min(1, B / comm_cpu_bandwidth) of a core busy, and compute overlapping it runs
  // 1 + contention x that share times as long. Defaults 0: collectives cost compute nothing (a
  // GPU's run on the NIC and copy engines).
  double comm_cpu_bandwidth = 0;  // bytes per second one core moves through collectives
  double contention = 0;
  // Collectives move while compute runs (Comm::progresses_in_background). false: each moves only
  // while the rank waits for it (MPI without its progress thread), so none overlaps compute and
  // the step is compute, optimizer and every collective's time end to end.
  bool background_progress = true;
};

struct StepTimePlan {
  double step = 0;            // seconds per optimizer step, the slowest rank's
  double compute = 0;         // forward and backward of every micro-batch
  double optimizer = 0;       // the shard's AdamW step
  double in_collectives = 0;  // seconds the collectives run, all groups together
  double exposed = 0;         // step - compute - optimizer: the communication compute did not hide
  double tokens_per_second = 0;  // over all ranks
};

// One step of `plan` (made from `config` for the same world and host shape).
StepTimePlan predict_step_time(const Plan& plan, const TrainConfig& config,
                               const TimeModelOptions& options);

// FLOPs of one micro-batch's forward on one rank: 2 per parameter of a matrix per token, the
// attention scores and their weighted sum, and the vocabulary projection.
double forward_flops(const TrainConfig& config, int64_t parameters);

// A profile from a compute rate (FLOP/s; backward twice the forward, once more under activation
// checkpointing) and a memory bandwidth (bytes/s) for AdamW, which reads and writes its state.
ComputeProfile profile_from_rates(const TrainConfig& config, int64_t parameters,
                                  double flops_per_second, double memory_bandwidth);

// The rate a profile achieved, as --tflops takes it (the inverse of profile_from_rates: forward
// and backward FLOPs, the recomputation under activation checkpointing counted, over their time).
double achieved_flops_per_second(const TrainConfig& config, int64_t parameters,
                                 const ComputeProfile& profile);

// A profile measured here: the model built from `config` on this machine's device, one rank, no
// collective, `steps` timed steps after a warm-up; the medians. Runs LibTorch (seconds to minutes
// for large models).
ComputeProfile measure_compute_profile(const TrainConfig& config, int steps);

// A human-readable summary of a prediction.
std::string format_step_time(const StepTimePlan& time, const TimeModelOptions& options);

}  // namespace fsdp
