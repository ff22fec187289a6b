// The planner's time model (fsdp-plan, fsdp-bench): one optimizer step of a plan
// (fsdp/plan/plan.h) replayed as the runtime schedules it, on two kinds of resource. Compute is
// one queue per rank, its per-unit forward and backward times split from a whole-model profile by
// each unit's FLOPs. Each process group's collectives run one at a time in issue order, each priced
// by a ring algorithm over the links its ranks span (within a host, or between hosts through the
// hosts' network links). Waits happen where the runtime waits: a unit's compute for its all-gather,
// the next unit's reduction for the previous one (and, across replicas, for its blocking
// all-reduce), the optimizer for every reduction. On the CPU the step is also bounded below by the
// cores' work: the compute alone's, then every byte the collectives move (cores_per_rank).
// docs/plan.md derives each term and says where it is wrong. No LibTorch here except in
// measure_compute_profile, which runs the model.
#pragma once

#include <string>
#include <vector>

#include "fsdp/config/config.h"
#include "fsdp/plan/plan.h"

namespace fsdp {

// One level of the network as a collective sees it.
struct LinkSpec {
  double bandwidth = 0;  // bytes per second a ring step gets across this link, each way
  double latency = 0;    // seconds a message adds per hop over this link (software and wire)
  // Bytes one core moves across this link per second of its time, the sender's and the
  // receiver's work together (TCP's copies and packets, a reduction's sums); 0: moving data costs
  // the CPU nothing (NCCL over NVLink and InfiniBand, a NIC's DMA).
  double cpu_bandwidth = 0;
};

// Seconds one rank computes, for the whole model at its micro-batch, with no collective.
struct ComputeProfile {
  double forward = 0;    // one micro-batch's forward
  double backward = 0;   // its backward (with the recomputation under activation checkpointing)
  double optimizer = 0;  // AdamW over every parameter; a rank steps its shard's share
  std::string source;    // where the figures came from, for the printout
  // CPU seconds the process used in one whole step (user and system, every thread); 0: not
  // measured (a profile from rates). Only reported: beside a distributed run's, it shows what
  // the collectives cost the CPU.
  double cpu = 0;
};

// How the backend carries collectives out, which decides what an all-reduce costs (all-gathers
// move (p-1)/p of their output, reduce-scatters (p-1)/p of their input, in all three: Gloo's and
// MPI's reduce-scatters are our own rings, comm/gloo.cpp and comm/mpi.cpp).
enum class CollectiveAlgorithms {
  // NCCL and Gloo: an all-reduce moves twice what a reduce-scatter does.
  kRing,
  // OpenMPI's nonblocking all-reduce (libnbc), as the MPI backend calls it in place: a binomial
  // reduce of the whole buffer to rank 0 and a binomial broadcast (ceil(log2 p) rounds each).
  kOpenMpi,
};

// The algorithms of a backend by its name (Comm::backend(), fsdp-plan's --backend): "mpi";
// anything else (gloo, nccl) rings.
CollectiveAlgorithms collective_algorithms(const std::string& backend);

// A link given as people quote one: Gbit/s and microseconds, and what a core moves over it in
// Gbit/s (0: free).
LinkSpec link_from_gbit(double gbit_per_second, double latency_us, double cpu_gbit = 0);

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
  // The cores a rank's compute and its collectives share (a host's cores over its ranks). With
  // the links' cpu_bandwidth it bounds the step from below: those cores do the compute alone's
  // work and then the collectives' (their bytes over each link's cpu_bandwidth), so the step is
  // at least compute + optimizer + comm_cpu / cores_per_rank, whatever the schedule overlaps.
  // 0: no bound (collectives that cost the CPU nothing, or cores of their own).
  double cores_per_rank = 0;
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
  // CPU seconds one rank's collectives take (bytes over the links' cpu_bandwidth), on average
  // over the ranks; cpu_bound: compute + optimizer + comm_cpu / cores_per_rank (0 without it).
  // The step is the larger of the schedule's replay and cpu_bound.
  double comm_cpu = 0;
  double cpu_bound = 0;
  // What `exposed` is made of: where the compute thread waited, by cause (a block's all-gather,
  // the last reductions, ...), compute stretched by contention and the CPU bound beyond the
  // replay, in the order first met; the seconds add up to `exposed`.
  struct Wait {
    std::string cause;
    double seconds = 0;
  };
  std::vector<Wait> waits;
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
