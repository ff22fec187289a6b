// The planner's time model (fsdp/plan/step_time.h): a replay of one optimizer step's schedule as
// src/core/unit.cpp and runtime.cpp issue it, with each collective priced by a ring over the
// links it crosses, and the CPU bound (the collectives' bytes in core-seconds) beside it.
// docs/plan.md, "Step time", derives the terms and lists what it leaves out.
#include "fsdp/plan/step_time.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <stdexcept>
#include <vector>

namespace fsdp {
namespace {

int64_t padded_numel(int64_t numel, int shards) { return (numel + shards - 1) / shards * shards; }

// A process group as the model sees it: its size and what its ring's hops cost.
struct Group {
  int size = 1;
  double bandwidth = 0;  // of its slowest hop
  double latency = 0;    // one block's way round the ring: every hop's latency
  // Core-seconds per byte a member moves, averaged over the ring's hops (a share hosts / size of
  // them cross hosts), each hop's sender's and receiver's work together.
  double cpu_per_byte = 0;
};

// A collective as the replay schedules it: how long it runs, and the core-seconds its bytes take
// (the CPU bound's, StepTimePlan::comm_cpu).
struct Cost {
  double seconds = 0;
  double cpu = 0;
};

// A ring over `g` ranks on `hosts` hosts. Spanning hosts, its slowest hop is a host's network link,
// shared by the `sharing` rings of the groups whose members sit on that host. A block goes round
// g - 1 hops, hosts - 1 of them between hosts: latencies add along its way (as NCCL's tuner
// counts them), bandwidth is the slowest hop's.
Group group_over(int g, int hosts, int sharing, const TimeModelOptions& o) {
  Group group{g, o.intra.bandwidth, 0};
  if (hosts > 1) {
    group.bandwidth = std::min(o.intra.bandwidth, o.inter.bandwidth / std::max(1, sharing));
  }
  group.latency = (hosts - 1) * o.inter.latency + (g - hosts) * o.intra.latency;
  const auto per_byte = [](const LinkSpec& l) {
    return l.cpu_bandwidth > 0 ? 1 / l.cpu_bandwidth : 0.0;
  };
  const double crossing = hosts > 1 ? static_cast<double>(hosts) / g : 0;
  group.cpu_per_byte = crossing * per_byte(o.inter) + (1 - crossing) * per_byte(o.intra);
  return group;
}

// A ring collective moving `bytes` (its full buffer) `passes` times: g - 1 steps of bytes / g
// over the slowest hop, plus the latency of one way round. Each member sends and receives
// (g - 1) / g of the buffer per pass.
Cost ring(const Group& g, double bytes, int passes) {
  if (g.size <= 1 || bytes <= 0) return {};
  const double moved = passes * (g.size - 1) * bytes / g.size;
  return {moved / g.bandwidth + passes * g.latency, moved * g.cpu_per_byte};
}

// OpenMPI libnbc's binomial rounds: ceil(log2 g), each moving the whole buffer one hop.
int binomial_rounds(int g) {
  int rounds = 0;
  while ((1 << rounds) < g) ++rounds;
  return rounds;
}

// libnbc's in-place all-reduce: a binomial reduce and a binomial broadcast of the whole buffer.
Cost binomial_all_reduce(const Group& g, double bytes) {
  if (g.size <= 1 || bytes <= 0) return {};
  const double hop = g.latency / (g.size - 1);
  const double moved = 2.0 * (g.size - 1) * bytes / g.size;
  return {2 * binomial_rounds(g.size) * (bytes / g.bandwidth + hop), moved * g.cpu_per_byte};
}

// When collectives run and how much of a core each keeps busy. An interval never starts before
// the compute clock that issued it, so compute can be stretched where it overlaps one.
struct Busy {
  double start, end, load;
};
using Intervals = std::vector<Busy>;

// One resource that runs its work in issue order: a process group's worker.
struct Queue {
  double load = 0;  // share of a core its collectives keep busy
  double free_at = 0;
  double busy = 0;
  double cpu = 0;  // core-seconds of the collectives run
  Intervals* log = nullptr;
  // A collective issued at `t`; returns when it ends.
  double run(double t, const Cost& c) {
    const double start = std::max(t, free_at);
    free_at = start + c.seconds;
    busy += c.seconds;
    cpu += c.cpu;
    if (c.seconds > 0) log->push_back({start, free_at, load});
    return free_at;
  }
};

// The clock after `work` seconds of compute from `t`, running at 1 / (1 + contention x load) of
// its speed inside each collective (where two overlap, the earlier's load counts).
double advance(double t, double work, Intervals busy, double contention) {
  if (contention <= 0 || work <= 0) return t + work;
  std::sort(busy.begin(), busy.end(),
            [](const Busy& a, const Busy& b) { return a.start < b.start; });
  for (const Busy& b : busy) {
    const double start = std::max(b.start, t);
    if (b.end <= start) continue;
    if (start - t >= work) break;  // done before this interval
    work -= start - t;
    t = start;
    const double slow = 1 + contention * b.load;
    const double done = (b.end - t) / slow;  // work done inside the interval
    if (done >= work) return t + work * slow;
    work -= done;
    t = b.end;
  }
  return t + work;
}

constexpr const char* kRootGather = "the root's all-gather, before forward";
constexpr const char* kPreviousReduction = "a unit's reduce-scatter, before the next is issued";

void add_wait(std::vector<StepTimePlan::Wait>& waits, const std::string& cause, double seconds) {
  for (auto& w : waits) {
    if (w.cause == cause) {
      w.seconds += seconds;
      return;
    }
  }
  waits.push_back({cause, seconds});
}

// The step's replay: per unit the collectives' durations and the compute, the clock of the rank's
// compute thread, and the two groups' queues.
class Replay {
 public:
  Replay(const Plan& p, const TrainConfig& c, const TimeModelOptions& o);
  StepTimePlan run();

 private:
  void forward(bool first);
  void backward(bool reduce);
  // A unit's gradient reduction, in runtime.cpp's stages ([Note: reduction stages]): its
  // reduce-scatter issued; with one replica the previous unit's completes; across replicas the
  // all-reduces issued a unit ago complete and the previous unit's is issued once its
  // reduce-scatter ends (NO_SHARD's at once, with nothing to scatter).
  struct Pending {
    double scattered;     // when its reduce-scatter ends
    Cost all_reduce;      // its chunk's all-reduce across replicas
    double reduced = -1;  // when its all-reduce ends; -1: not issued
  };
  void reduce(size_t unit);
  // A piece of the split's early part (Runtime::enqueue_early_piece): it joins the reductions in
  // flight without completing any.
  void reduce_early_piece();
  // The root's late part under a split reduction: the row counts and the rows, all-gathered over
  // the world, behind the reductions already queued (the rank waits for them), or, too dense for
  // rows, the counts and a second reduction of the whole root.
  void reduce_late_rows();
  void start_all_reduce(Pending& p);
  void drain(const char* cause);
  double gather(size_t unit, double t) { return shard_q_.run(t, all_gather_[unit]); }
  void compute(double seconds) {
    const double end = advance(now_, seconds, busy_, options_.contention);
    stretched_ += end - now_ - seconds;
    now_ = end;
  }
  // The compute thread waits until `t` for what `cause` names (StepTimePlan::waits).
  void wait_until(double t, const char* cause) {
    if (t <= now_) return;
    add_wait(waits_, cause, t - now_);
    now_ = t;
  }

  const Plan& plan_;
  const TrainConfig& config_;
  const TimeModelOptions& options_;
  size_t blocks_ = 0;  // units before the root
  int64_t ahead_ = 0;  // prefetch depth in effect
  std::vector<Cost> all_gather_, reduce_scatter_, all_reduce_;
  std::vector<double> forward_, backward_;
  Intervals busy_;
  Queue shard_q_, replica_q_;
  double now_ = 0;
  std::vector<StepTimePlan::Wait> waits_;
  double stretched_ = 0;     // compute's time beyond its own, from contention
  bool replicated_ = false;  // more than one replica: all-reduces follow the reduce-scatters
  bool split_ = false;       // the root's reduction split ([Note: split root reduction])
  int64_t pieces_ = 1;       // its early part's pieces
  Cost piece_scatter_, piece_all_reduce_;
  bool late_as_rows_ = false;  // the split's late part is sent as rows, not reduced whole
  Cost late_rows_;             // its row counts' (and rows') all-gathers
  // How long before the step the root's gather starts: issued after the root's shard stepped,
  // it runs while the other shards step ([Note: root gathered after its step]). 0: at the step.
  double root_head_start_ = 0;
  std::deque<Pending> pending_;
};

// The vocabulary projection's FLOPs in one micro-batch's forward: 2 V h per token.
double head_flops(const TrainConfig& c) {
  return 2.0 * static_cast<double>(c.model.vocab_size) * static_cast<double>(c.model.width()) *
         static_cast<double>(c.train.micro_batch_size * c.data.seq_len);
}

std::vector<double> unit_flop_shares(const Plan& p, const TrainConfig& c) {
  const double total = forward_flops(c, p.parameters);
  const double head = head_flops(c);
  std::vector<double> share(p.units.size(), 0);
  if (p.units.size() == 1 || total <= 0) {
    share.back() = 1;
    return share;
  }
  int64_t block_numel = 0;  // frozen parameters compute as much as the others in forward
  for (size_t u = 0; u + 1 < p.units.size(); ++u) block_numel += p.units[u].total();
  share.back() = head / total;
  for (size_t u = 0; u + 1 < p.units.size(); ++u) {
    share[u] = (1 - share.back()) * static_cast<double>(p.units[u].total()) /
               static_cast<double>(std::max<int64_t>(1, block_numel));
  }
  return share;
}

Replay::Replay(const Plan& p, const TrainConfig& c, const TimeModelOptions& o)
    : plan_(p), config_(c), options_(o), blocks_(p.units.size() - 1) {
  const int world = p.world_size, shards = p.shard_count, replicas = world / shards;
  replicated_ = replicas > 1;
  const int per_host = o.ranks_per_host > 0 ? std::min(o.ranks_per_host, world) : world;
  if (world % per_host != 0) {
    throw std::invalid_argument("ranks per host " + std::to_string(per_host) +
                                " does not divide the world size " + std::to_string(world));
  }
  // Shard groups are consecutive ranks; replica groups take one rank from each shard group, so
  // a host holds per_host / shards members of one (or one, when shard groups span hosts).
  const Group shard = group_over(shards, (shards + per_host - 1) / per_host, 1, o);
  const int replica_hosts = shards >= per_host ? replicas : replicas * shards / per_host;
  const Group replica =
      group_over(replicas, std::max(1, replica_hosts), std::min(per_host, shards), o);
  const auto load = [&](const Group& g) {
    return o.comm_cpu_bandwidth > 0 ? std::min(1.0, g.bandwidth / o.comm_cpu_bandwidth) : 0;
  };
  shard_q_ = {load(shard), 0, 0, 0, &busy_};
  replica_q_ = {load(replica), 0, 0, 0, &busy_};
  const double elem = static_cast<double>(dtype_size(c.mixed_precision));
  const bool open_mpi = o.algorithms == CollectiveAlgorithms::kOpenMpi;
  const auto reduce_scatter = [&](double bytes) { return ring(shard, bytes, 1); };
  const auto all_reduce = [&](double bytes) {
    return open_mpi ? binomial_all_reduce(replica, bytes) : ring(replica, bytes, 2);
  };
  const std::vector<double> share = unit_flop_shares(p, c);
  for (size_t u = 0; u < p.units.size(); ++u) {
    const double n = static_cast<double>(padded_numel(p.units[u].numel, shards));
    const double frozen = static_cast<double>(padded_numel(p.units[u].frozen_numel, shards));
    all_gather_.push_back(ring(shard, (n + frozen) * elem, 1));
    reduce_scatter_.push_back(reduce_scatter(n * elem));
    all_reduce_.push_back(all_reduce(n / shards * elem));
    forward_.push_back(o.compute.forward * share[u]);
    backward_.push_back(o.compute.backward * share[u]);
  }
  ahead_ = prefetch_ahead(c.fsdp, static_cast<int64_t>(blocks_));
  // The split's late part as the plan bounds it (late_root_part: the runtime's test on the rows it
  // finds): the rows all-gathered over the world, or the root reduced a second time.
  split_ = splits_root_reduction(p, c);
  pieces_ = root_reduction_pieces(p, c);
  const double root_bytes = static_cast<double>(padded_numel(p.units.back().numel, shards)) * elem;
  piece_scatter_ = reduce_scatter(root_bytes / static_cast<double>(pieces_));
  piece_all_reduce_ = all_reduce(root_bytes / shards / static_cast<double>(pieces_));
  const LateRootPart late = late_root_part(p, c);
  const double rows_bytes = static_cast<double>(world) * static_cast<double>(late.rows) *
                            static_cast<double>(late.row_bytes);
  const Group everyone = group_over(world, world / per_host, 1, o);
  late_as_rows_ = late.as_rows;
  late_rows_ = ring(everyone, late_as_rows_ ? rows_bytes : 0, 1);
  late_rows_.seconds += (late_as_rows_ ? 3 : 1) * everyone.latency;  // counts, indices with rows
  // The optimizers step the root's shard first, then the others (their share of the step).
  if (shards > 1 && c.fsdp.forward_prefetch) {
    const double shard_elems = static_cast<double>(p.memory.params) / 4;
    const double root_elems =
        static_cast<double>(padded_numel(p.units.back().numel, shards) / shards);
    const double optimizer =
        o.compute.optimizer * shard_elems / static_cast<double>(std::max<int64_t>(1, p.parameters));
    root_head_start_ = optimizer * (1 - root_elems / std::max(1.0, shard_elems));
  }
}

// The root is gathered first and kept (in a step's first forward, with forward prefetch, from
// before the step: root_head_start_); each block waits for its gather, and with forward prefetch
// issues the next blocks' as it starts. The root's own compute (the vocabulary projection) comes
// last.
void Replay::forward(bool first) {
  const bool sharded = plan_.shard_count > 1;
  std::vector<double> gathered(blocks_, -1);
  if (sharded && first && root_head_start_ > 0) {
    shard_q_.free_at = std::min(shard_q_.free_at, now_ - root_head_start_);
    wait_until(gather(blocks_, now_ - root_head_start_), kRootGather);
  } else if (sharded) {
    wait_until(gather(blocks_, now_), kRootGather);
  }
  for (size_t i = 0; i < blocks_; ++i) {
    if (sharded && gathered[i] < 0) gathered[i] = gather(i, now_);
    if (sharded) wait_until(gathered[i], "a block's all-gather in forward");
    if (sharded && config_.fsdp.forward_prefetch) {
      for (size_t j = i + 1; j < blocks_ && j <= i + static_cast<size_t>(ahead_); ++j) {
        if (gathered[j] < 0) gathered[j] = gather(j, now_);
      }
    }
    compute(forward_[i]);
  }
  compute(forward_[blocks_]);
}

// The root's backward (the projection's) first, then the blocks in reverse: a block resharded
// after forward is gathered again, BACKWARD_PRE issuing the next blocks' gathers before its own
// compute, without prefetch after the previous block's reduce-scatter (in one queue, behind it).
void Replay::backward(bool reduce_now) {
  const bool regather =
      plan_.shard_count > 1 && reshards_after_forward(config_.fsdp.sharding_strategy);
  const bool pre = config_.fsdp.backward_prefetch == BackwardPrefetch::kBackwardPre;
  std::vector<double> gathered(blocks_, -1);
  int64_t pieces_sent = 0;
  // The root's pre-backward prefetches the first blocks of backward before its own compute
  // (Runtime::prefetch_after from the root: a block's reach, with every block after the root).
  if (regather && pre) {
    const auto first = static_cast<size_t>(prefetch_ahead(config_.fsdp, blocks_ + 1));
    for (size_t k = 1; k <= first; ++k) gathered[blocks_ - k] = gather(blocks_ - k, now_);
  }
  compute(backward_[blocks_]);
  for (size_t i = blocks_; i-- > 0;) {
    if (regather) {
      if (gathered[i] < 0) gathered[i] = gather(i, now_);
      if (pre) {
        for (size_t k = 1; k <= static_cast<size_t>(ahead_) && k <= i; ++k) {
          if (gathered[i - k] < 0) gathered[i - k] = gather(i - k, now_);
        }
      }
    }
    // The split's early part goes in pieces, one as each of the first blocks' backward begins,
    // behind its gathers.
    if (reduce_now && split_ && pieces_sent < pieces_) {
      reduce_early_piece();
      ++pieces_sent;
    }
    if (regather) wait_until(gathered[i], "a block's all-gather in backward");
    compute(backward_[i]);
    if (reduce_now) reduce(i);
  }
  if (reduce_now) {
    if (split_) {
      for (; pieces_sent < pieces_; ++pieces_sent) reduce_early_piece();
      reduce_late_rows();
    } else {
      reduce(blocks_);
    }
    drain("the last reductions, before the optimizer");
  }
}

void Replay::reduce_late_rows() {
  Queue& q = plan_.shard_count > 1 ? shard_q_ : replica_q_;
  wait_until(q.run(now_, late_rows_), "the root's late rows (split root reduction)");
  if (!late_as_rows_) reduce(blocks_);
}

void Replay::reduce_early_piece() {
  Pending mine{shard_q_.run(now_, piece_scatter_), piece_all_reduce_};
  if (replicated_ && plan_.shard_count == 1) start_all_reduce(mine);
  pending_.push_back(mine);
}

void Replay::reduce(size_t unit) {
  Pending mine{shard_q_.run(now_, reduce_scatter_[unit]), all_reduce_[unit]};
  if (!replicated_) {
    drain(kPreviousReduction);
    pending_.push_back(mine);
    return;
  }
  while (!pending_.empty() && pending_.front().reduced >= 0) {
    wait_until(pending_.front().reduced, "a unit's all-reduce across replicas");
    pending_.pop_front();
  }
  for (Pending& p : pending_) start_all_reduce(p);
  if (plan_.shard_count == 1) start_all_reduce(mine);
  pending_.push_back(mine);
}

void Replay::start_all_reduce(Pending& p) {
  wait_until(p.scattered, kPreviousReduction);
  p.reduced = replica_q_.run(now_, p.all_reduce);
}

void Replay::drain(const char* cause) {
  for (Pending& p : pending_) {
    if (replicated_ && p.reduced < 0) start_all_reduce(p);
  }
  for (const Pending& p : pending_) wait_until(std::max(p.scattered, p.reduced), cause);
  pending_.clear();
}

StepTimePlan Replay::run() {
  const int64_t micro = std::max<int64_t>(1, plan_.micro_batches);
  for (int64_t m = 0; m < micro; ++m) {
    forward(/*first=*/m == 0);
    backward(/*reduce_now=*/m + 1 == micro);  // no_sync before the last micro-batch
  }
  const int64_t shard_elems = plan_.memory.params / 4;  // the fp32 master shards' elements
  StepTimePlan t;
  t.compute = static_cast<double>(micro) * (options_.compute.forward + options_.compute.backward);
  t.optimizer = options_.compute.optimizer * static_cast<double>(shard_elems) /
                static_cast<double>(std::max<int64_t>(1, plan_.parameters));
  t.in_collectives = shard_q_.busy + replica_q_.busy;
  // Without background progress every collective runs inside its wait, one after another.
  t.step = options_.background_progress ? now_ + t.optimizer
                                        : t.compute + t.optimizer + t.in_collectives;
  if (options_.background_progress) {
    t.waits = waits_;
    if (stretched_ > 0) add_wait(t.waits, "compute slowed by collectives (contention)", stretched_);
  } else {
    t.waits.push_back({"every collective, inside its wait", t.in_collectives});
  }
  t.comm_cpu = shard_q_.cpu + replica_q_.cpu;
  if (options_.cores_per_rank > 0) {
    t.cpu_bound = t.compute + t.optimizer + t.comm_cpu / options_.cores_per_rank;
    if (t.cpu_bound > t.step) {
      add_wait(t.waits, "the CPU bound, beyond the schedule", t.cpu_bound - t.step);
      t.step = t.cpu_bound;
    }
  }
  t.exposed = std::max(0.0, t.step - t.compute - t.optimizer);
  const double tokens = static_cast<double>(plan_.world_size) * static_cast<double>(micro) *
                        static_cast<double>(config_.train.micro_batch_size * config_.data.seq_len);
  t.tokens_per_second = t.step > 0 ? tokens / t.step : 0;
  return t;
}

}  // namespace

double forward_flops(const TrainConfig& c, int64_t parameters) {
  const ModelConfig& m = c.model;
  const double b = static_cast<double>(c.train.micro_batch_size);
  const double s = static_cast<double>(c.data.seq_len), tokens = b * s;
  const double h = static_cast<double>(m.width()), v = static_cast<double>(m.vocab_size);
  const bool tied = m.type == ModelType::kGPT2 || m.tie_embeddings;
  const double positions =
      m.type == ModelType::kGPT2
          ? static_cast<double>(m.n_positions > 0 ? m.n_positions : c.data.seq_len) * h
          : 0;
  // Embedding tables are looked up, not multiplied; the projection to the vocabulary is (tied, it
  // reuses the token table).
  const double matrices = static_cast<double>(parameters) - v * h * (tied ? 1 : 2) - positions;
  const double head_dim = m.head_dim > 0 ? static_cast<double>(m.head_dim) : h / m.n_head;
  // Scores q.k and their weighted sum of v: 2 x 2 x s^2 x (heads x head_dim) per sequence.
  const double attention = 4.0 * b * s * s * m.n_head * head_dim * static_cast<double>(m.n_layer);
  return 2 * tokens * std::max(0.0, matrices) + head_flops(c) + attention;
}

namespace {
// The share of the blocks' forward that backward runs again (activation checkpointing).
double recomputed_fraction(const TrainConfig& c) {
  if (c.model.n_layer <= 0) return c.fsdp.activation_checkpointing ? 1.0 : 0.0;
  return static_cast<double>(checkpointed_blocks(c)) / static_cast<double>(c.model.n_layer);
}
}  // namespace

ComputeProfile profile_from_rates(const TrainConfig& c, int64_t parameters, double flops_per_second,
                                  double memory_bandwidth) {
  if (flops_per_second <= 0 || memory_bandwidth <= 0) {
    throw std::invalid_argument("a compute rate and a memory bandwidth must be positive");
  }
  ComputeProfile p;
  p.forward = forward_flops(c, parameters) / flops_per_second;
  p.backward = p.forward * (2 + recomputed_fraction(c));
  // AdamW reads the parameter, its gradient, m and v (fp32) and writes all but the gradient.
  p.optimizer = 28.0 * static_cast<double>(parameters) / memory_bandwidth;
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%.3g TFLOP/s, AdamW at %.3g GB/s", flops_per_second / 1e12,
                memory_bandwidth / 1e9);
  p.source = buf;
  return p;
}

double achieved_flops_per_second(const TrainConfig& c, int64_t parameters,
                                 const ComputeProfile& p) {
  const double passes = 3 + recomputed_fraction(c);
  const double seconds = p.forward + p.backward;
  return seconds > 0 ? passes * forward_flops(c, parameters) / seconds : 0;
}

CollectiveAlgorithms collective_algorithms(const std::string& backend) {
  if (backend == "mpi") return CollectiveAlgorithms::kOpenMpi;
  return CollectiveAlgorithms::kRing;
}

LinkSpec link_from_gbit(double gbit_per_second, double latency_us, double cpu_gbit) {
  return {gbit_per_second * 1e9 / 8, latency_us * 1e-6, cpu_gbit * 1e9 / 8};
}

StepTimePlan predict_step_time(const Plan& plan, const TrainConfig& config,
                               const TimeModelOptions& options) {
  if (plan.units.empty()) throw std::invalid_argument("a plan without units");
  if (plan.world_size > 1 && plan.shard_count > 1 && options.intra.bandwidth <= 0) {
    throw std::invalid_argument("the time model needs a positive intra-host bandwidth");
  }
  return Replay(plan, config, options).run();
}

std::string format_step_time(const StepTimePlan& t, const TimeModelOptions& o) {
  char buf[1024];
  const double gbps = 8e-9;
  std::snprintf(
      buf, sizeof(buf),
      "time per optimizer step (compute: %s; links: within a host %.3g Gbit/s, %.3g us; between "
      "hosts %.3g Gbit/s, %.3g us, %s%s):\n"
      "  compute (forward, backward) %10.3f s\n"
      "  optimizer (the shard)       %10.3f s\n"
      "  in collectives             %10.3f s\n"
      "  exposed communication      %10.3f s\n"
      "  step                       %10.3f s\n"
      "  tokens/s (all ranks)       %10.1f\n",
      o.compute.source.c_str(), o.intra.bandwidth * gbps, o.intra.latency * 1e6,
      o.inter.bandwidth * gbps, o.inter.latency * 1e6,
      o.ranks_per_host > 0 ? (std::to_string(o.ranks_per_host) + " ranks per host").c_str()
                           : "one host",
      o.background_progress ? "" : "; collectives move only when waited on", t.compute, t.optimizer,
      t.in_collectives, t.exposed, t.step, t.tokens_per_second);
  std::string out = buf;
  for (const StepTimePlan::Wait& w : t.waits) {
    if (w.seconds < 5e-4) continue;  // below what the table prints
    std::snprintf(buf, sizeof(buf), "    exposed: %-52s %8.3f s\n", w.cause.c_str(), w.seconds);
    out += buf;
  }
  if (o.cores_per_rank > 0) {
    // Which of the two bounds decided the step, so that a reader sees what to change.
    std::snprintf(
        buf, sizeof(buf),
        "  CPU bound: collectives take %.3f core-seconds a rank (a core moves %.3g "
        "Gbit/s within a host, %.3g between hosts), %.3g cores a rank: step >= %.3f s%s\n",
        t.comm_cpu, o.intra.cpu_bandwidth * gbps, o.inter.cpu_bandwidth * gbps, o.cores_per_rank,
        t.cpu_bound, t.cpu_bound >= t.step ? " (this decides the step)" : "");
    out += buf;
  }
  return out;
}

}  // namespace fsdp
