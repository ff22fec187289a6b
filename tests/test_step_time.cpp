// The planner's time model (fsdp/plan/step_time.h) against closed forms: what a step costs with
// no communication, with communication alone (the bandwidth-bound ceiling, every ring priced as
// docs/plan.md states), how much prefetch can hide, how the links a group spans and Gloo's
// reduce-scatter change the price, and how contention stretches compute. The prediction against
// measured steps is the benchmark's (bench/netem.sh) and the emulated-network test's.
#include <gtest/gtest.h>

#include "fsdp/plan/plan.h"
#include "fsdp/plan/step_time.h"

namespace fsdp {
namespace {

TrainConfig config(ShardingStrategy s) {
  TrainConfig c;
  c.model.type = ModelType::kGPT2;
  c.model.vocab_size = 512;
  c.model.n_layer = 4;
  c.model.n_head = 4;
  c.model.n_embd = 64;
  c.model.n_positions = 32;
  c.data.seq_len = 32;
  c.train.micro_batch_size = 2;
  c.fsdp.sharding_strategy = s;
  c.fsdp.backward_prefetch = BackwardPrefetch::kNoPrefetch;
  c.fsdp.forward_prefetch = false;
  // The closed forms below are the root's reduction in one piece, after the last compute;
  // SplitRootReduction* price the split.
  c.fsdp.split_root_reduction = false;
  return c;
}

TimeModelOptions links(double compute_seconds) {
  TimeModelOptions o;
  o.compute = {compute_seconds / 3, 2 * compute_seconds / 3, 0, "test"};
  o.intra = {1e9, 0};
  o.inter = {1e8, 0};
  return o;
}

int64_t padded(int64_t n, int p) { return (n + p - 1) / p * p; }

// Seconds of a ring over p ranks at bandwidth bw moving `bytes` (the collective's full buffer),
// `passes` times: (p - 1) steps of bytes / p.
double ring(double bytes, int p, double bw, int passes = 1) {
  return passes * (p - 1) * bytes / p / bw;
}

TEST(StepTime, WithoutCommunicationIsComputeAndTheShardsOptimizer) {
  const TrainConfig c = config(ShardingStrategy::kFullShard);
  const Plan plan = plan_training(c, 1);
  TimeModelOptions o = links(3.0);
  o.compute.optimizer = 0.5;
  const StepTimePlan t = predict_step_time(plan, c, o);
  EXPECT_DOUBLE_EQ(t.compute, 3.0);
  EXPECT_NEAR(t.optimizer, 0.5, 1e-12);  // one rank steps every parameter
  EXPECT_NEAR(t.step, 3.5, 1e-9);
  EXPECT_NEAR(t.exposed, 0, 1e-9);
  EXPECT_DOUBLE_EQ(t.in_collectives, 0);
  EXPECT_NEAR(t.tokens_per_second, 2 * 32 / 3.5, 1e-6);
}

// No compute: every collective runs back to back, forward gathers, backward gathers again (all
// but the root) and one reduce-scatter per unit, each a ring over the intra-host link.
TEST(StepTime, CommunicationAloneIsTheRingsSum) {
  TrainConfig c = config(ShardingStrategy::kFullShard);
  const int p = 4;
  const Plan plan = plan_training(c, p);
  const TimeModelOptions o = links(0);
  double expected = 0;
  for (size_t u = 0; u < plan.units.size(); ++u) {
    const double bytes = 4.0 * static_cast<double>(padded(plan.units[u].numel, p));
    const bool root = u + 1 == plan.units.size();
    expected += ring(bytes, p, 1e9) * (root ? 2 : 3);
  }
  const StepTimePlan t = predict_step_time(plan, c, o);
  EXPECT_NEAR(t.in_collectives, expected, 1e-12);
  EXPECT_NEAR(t.step, expected, 1e-12);
  EXPECT_NEAR(t.exposed, expected, 1e-12);

  // Gloo's reduce-scatter is a ring too (comm/gloo.cpp).
  EXPECT_EQ(collective_algorithms("gloo"), CollectiveAlgorithms::kRing);

  // So is MPI's (comm/mpi.cpp): FULL_SHARD runs no all-reduce, so OpenMPI's trees change nothing.
  TimeModelOptions mpi = o;
  mpi.algorithms = CollectiveAlgorithms::kOpenMpi;
  EXPECT_NEAR(predict_step_time(plan, c, mpi).in_collectives, expected, 1e-12);

  // bf16 halves every byte.
  c.mixed_precision = DType::kBFloat16;
  EXPECT_NEAR(predict_step_time(plan_training(c, p), c, o).in_collectives, expected / 2, 1e-12);
}

// Compute far longer than communication: prefetch hides all but the first gathers (the root's and
// the first block's in forward, the last block's in backward) and the last reductions.
TEST(StepTime, PrefetchHidesWhatComputeCovers) {
  TrainConfig c = config(ShardingStrategy::kFullShard);
  const int p = 2;
  const Plan plan = plan_training(c, p);
  const TimeModelOptions o = links(10.0);
  const StepTimePlan plain = predict_step_time(plan, c, o);
  c.fsdp.forward_prefetch = true;
  c.fsdp.backward_prefetch = BackwardPrefetch::kBackwardPre;
  const StepTimePlan prefetch = predict_step_time(plan, c, o);
  EXPECT_NEAR(prefetch.in_collectives, plain.in_collectives, 1e-12);  // the same collectives
  EXPECT_LT(prefetch.exposed, plain.exposed);
  EXPECT_LT(prefetch.exposed, 0.5 * prefetch.in_collectives);
  // What cannot be hidden: the root's gather and the first block's, the last block's backward
  // gather (a block whose forward ended, then the root's backward of 1/20 of compute at most) and
  // the root's reduce-scatter after the last compute.
  const double root = ring(4.0 * static_cast<double>(padded(plan.units.back().numel, p)), p, 1e9);
  EXPECT_GE(prefetch.exposed, root - 1e-12);
  EXPECT_GE(prefetch.step, prefetch.compute);
}

// The root's reduction split ([Note: split root reduction]): its reduce-scatter issued as the
// first block's backward begins, hidden when compute covers it, and the late part all-gathered as
// rows at the end: with a vocabulary of 4096, 2 x 32 tokens and 32 positions a rank touch at most
// 96 rows of 64 fp32 values (and an int64 index each) of the root's 4096 + 32 (+ 2 norm rows),
// under half its bytes. With 512 rows in the table and 4 ranks the rows would be more: the late
// part is reduced whole, the root's reduction costs twice, and nothing is hidden at the end.
TEST(StepTime, SplitRootReductionHidesTheRootsReduceScatter) {
  TrainConfig c = config(ShardingStrategy::kFullShard);
  c.model.vocab_size = 4096;
  c.fsdp.forward_prefetch = true;
  c.fsdp.backward_prefetch = BackwardPrefetch::kBackwardPre;
  const int p = 2;
  const Plan plan = plan_training(c, p);
  const TimeModelOptions o = links(10.0);
  const StepTimePlan whole = predict_step_time(plan, c, o);
  c.fsdp.split_root_reduction = true;
  const StepTimePlan split = predict_step_time(plan, c, o);
  const double root = ring(4.0 * static_cast<double>(padded(plan.units.back().numel, p)), p, 1e9);
  const double rows = ring(p * 96.0 * (64 * 4 + 8), p, 1e9);
  EXPECT_NEAR(split.in_collectives, whole.in_collectives + rows, 1e-12);
  EXPECT_LT(split.exposed, whole.exposed - 0.9 * root);  // the root's reduce-scatter, hidden
  EXPECT_GE(split.exposed, rows - 1e-12);                // the rows after the last compute

  // 4 ranks' 96 rows of a 512-row table: more than half the root's bytes.
  c.model.vocab_size = 512;
  const Plan dense = plan_training(c, 4);
  const StepTimePlan twice = predict_step_time(dense, c, o);
  c.fsdp.split_root_reduction = false;
  const StepTimePlan once = predict_step_time(dense, c, o);
  const double dense_root =
      ring(4.0 * static_cast<double>(padded(dense.units.back().numel, 4)), 4, 1e9);
  EXPECT_NEAR(twice.in_collectives, once.in_collectives + dense_root, 1e-12);
  EXPECT_GE(twice.exposed, dense_root - 1e-12);
}

// Collectives that move only while waited on (MPI without its progress thread) hide nothing,
// prefetched or not: the step is compute, the optimizer and every collective end to end.
TEST(StepTime, WithoutBackgroundProgressNothingOverlaps) {
  TrainConfig c = config(ShardingStrategy::kFullShard);
  c.fsdp.forward_prefetch = true;
  c.fsdp.backward_prefetch = BackwardPrefetch::kBackwardPre;
  const Plan plan = plan_training(c, 2);
  TimeModelOptions o = links(10.0);
  const StepTimePlan overlapped = predict_step_time(plan, c, o);
  o.background_progress = false;
  const StepTimePlan waited = predict_step_time(plan, c, o);
  EXPECT_NEAR(waited.in_collectives, overlapped.in_collectives, 1e-12);
  EXPECT_NEAR(waited.step, waited.compute + waited.optimizer + waited.in_collectives, 1e-12);
  EXPECT_NEAR(waited.exposed, waited.in_collectives, 1e-12);
  EXPECT_LT(overlapped.exposed, 0.5 * waited.exposed);
}

// HYBRID on 2 hosts of 2 ranks: gathers and reductions stay inside a host; only the replicas'
// all-reduce of the gradient shards crosses the slow link, where the host's two replica groups
// share it. FULL_SHARD puts every collective on a ring that crosses it.
TEST(StepTime, HybridKeepsTheSlowLinkForTheAllReduce) {
  const TrainConfig full = config(ShardingStrategy::kFullShard);
  const TrainConfig hybrid = config(ShardingStrategy::kHybridShard);
  TimeModelOptions o = links(0);
  o.ranks_per_host = 2;
  const Plan hp = plan_training(hybrid, 4, 2);
  ASSERT_EQ(hp.shard_count, 2);
  double expected = 0;
  for (size_t u = 0; u < hp.units.size(); ++u) {
    const double bytes = 4.0 * static_cast<double>(padded(hp.units[u].numel, 2));
    const bool root = u + 1 == hp.units.size();
    expected += ring(bytes, 2, 1e9) * (root ? 2 : 3);  // within the host
    expected += ring(bytes / 2, 2, 1e8 / 2, 2);        // across, the link shared by 2 groups
  }
  EXPECT_NEAR(predict_step_time(hp, hybrid, o).in_collectives, expected, 1e-12);

  const Plan fp = plan_training(full, 4, 2);
  double across = 0;
  for (size_t u = 0; u < fp.units.size(); ++u) {
    const double bytes = 4.0 * static_cast<double>(padded(fp.units[u].numel, 4));
    across += ring(bytes, 4, 1e8) * (u + 1 == fp.units.size() ? 2 : 3);
  }
  EXPECT_NEAR(predict_step_time(fp, full, o).in_collectives, across, 1e-12);
  EXPECT_LT(expected, across);
}

// Latency adds along a block's way round the ring: on 2 hosts of 2 ranks, one hop between hosts
// and two within, for every collective of the step (forward gathers of every unit, backward
// gathers of the blocks, a reduce-scatter per unit).
TEST(StepTime, LatencyAddsAlongTheRing) {
  const TrainConfig c = config(ShardingStrategy::kFullShard);
  TimeModelOptions o = links(0);
  o.intra = {1e18, 1e-6};
  o.inter = {1e18, 1e-5};
  o.ranks_per_host = 2;
  const Plan plan = plan_training(c, 4, 2);
  const double blocks = static_cast<double>(plan.units.size() - 1);
  EXPECT_NEAR(predict_step_time(plan, c, o).in_collectives, (3 * blocks + 2) * (1e-5 + 2e-6),
              1e-9);  // the bytes at 1e18 B/s add about 1e-12
}

// Gradient accumulation: every micro-batch gathers, only the last reduces.
TEST(StepTime, AccumulationGathersEachMicroBatchAndReducesOnce) {
  TrainConfig c = config(ShardingStrategy::kShardGradOp);
  const int p = 2;
  const TimeModelOptions o = links(0);
  const double one = predict_step_time(plan_training(c, p), c, o).in_collectives;
  c.train.gradient_accumulation_steps = 3;
  const Plan plan = plan_training(c, p);
  double gathers = 0;
  for (const auto& u : plan.units)
    gathers += ring(4.0 * static_cast<double>(padded(u.numel, p)), p, 1e9);
  EXPECT_NEAR(predict_step_time(plan, c, o).in_collectives, one + 2 * gathers, 1e-12);
}

// Contention 1 and collectives that keep a core busy at the link's rate: compute overlapping a
// collective runs at half speed. Without collectives (one rank) nothing changes; FULL_SHARD with
// prefetch overlaps, and its step grows, by at most the collectives' time.
TEST(StepTime, ContentionStretchesOverlappedComputeOnly) {
  TrainConfig c = config(ShardingStrategy::kFullShard);
  c.fsdp.forward_prefetch = true;
  c.fsdp.backward_prefetch = BackwardPrefetch::kBackwardPre;
  TimeModelOptions o = links(1.0);
  const Plan alone = plan_training(c, 1);
  const double quiet = predict_step_time(alone, c, o).step;
  o.comm_cpu_bandwidth = 1e9;
  o.contention = 1;
  EXPECT_NEAR(predict_step_time(alone, c, o).step, quiet, 1e-12);

  const Plan fs = plan_training(c, 2);
  o.contention = 0;
  const StepTimePlan calm = predict_step_time(fs, c, o);
  o.contention = 1;
  const StepTimePlan busy = predict_step_time(fs, c, o);
  EXPECT_GT(busy.step, calm.step);
  EXPECT_LE(busy.step, calm.step + busy.in_collectives + 1e-12);
}

// Across replicas the all-reduces overlap the backward of the units after them (runtime.cpp,
// [Note: reduction stages]): with compute far longer than communication, NO_SHARD and HYBRID
// expose only the last units' reductions (HYBRID: the last two blocks' and the root's, whose
// all-reduces start after the backward's last compute), a small part of 12 blocks' collectives.
TEST(StepTime, ReplicaAllReducesOverlapBackward) {
  for (ShardingStrategy s : {ShardingStrategy::kNoShard, ShardingStrategy::kHybridShard}) {
    TrainConfig c = config(s);
    c.model.n_layer = 12;
    c.fsdp.backward_prefetch = BackwardPrefetch::kBackwardPre;
    TimeModelOptions o = links(10.0);
    o.ranks_per_host = 2;
    o.inter = {1e6, 0};  // slow enough that the all-reduces are most of the collectives
    const StepTimePlan t = predict_step_time(plan_training(c, 4, 2), c, o);
    SCOPED_TRACE(to_string(s));
    EXPECT_GT(t.in_collectives, 0.1);
    EXPECT_LT(t.exposed, 0.3 * t.in_collectives);
  }
}

// The CPU bound (TimeModelOptions::cores_per_rank): on 2 hosts of 2 ranks, a FULL_SHARD ring has
// 2 of its 4 hops between hosts, so a member's byte costs half a network byte and half a loopback
// byte of a core's time; each block is gathered twice and reduce-scattered once, the root gathered
// once and reduce-scattered, each pass moving 3/4 of the buffer per member.
// With links that take no time the replay's step is compute and optimizer, and the bound decides:
// the collectives' CPU seconds over the rank's half core are added. No cores given: no bound, the
// same CPU seconds reported; one rank: nothing to add.
TEST(StepTime, CpuBoundAddsTheCollectivesCpuWorkOverTheRanksCores) {
  const TrainConfig c = config(ShardingStrategy::kFullShard);
  const int p = 4;
  const Plan plan = plan_training(c, p, 2);
  TimeModelOptions o = links(1.0);
  o.ranks_per_host = 2;
  o.intra = {1e18, 0, 2e9};
  o.inter = {1e18, 0, 1e9};
  double moved = 0;  // bytes a member sends (and receives) in the step
  for (size_t u = 0; u < plan.units.size(); ++u) {
    const double bytes = 4.0 * static_cast<double>(padded(plan.units[u].numel, p));
    const bool root = u + 1 == plan.units.size();
    moved += (root ? 2 : 3) * 0.75 * bytes;
  }
  const double cpu = moved * (0.5 / 1e9 + 0.5 / 2e9);
  const StepTimePlan free_cores = predict_step_time(plan, c, o);
  EXPECT_NEAR(free_cores.comm_cpu, cpu, 1e-9 * cpu);
  EXPECT_DOUBLE_EQ(free_cores.cpu_bound, 0);
  EXPECT_NEAR(free_cores.step, 1.0, 1e-6);

  o.cores_per_rank = 0.5;
  const StepTimePlan bound = predict_step_time(plan, c, o);
  EXPECT_NEAR(bound.cpu_bound, 1.0 + bound.optimizer + cpu / 0.5, 1e-9);
  EXPECT_DOUBLE_EQ(bound.step, bound.cpu_bound);
  EXPECT_NEAR(bound.exposed, cpu / 0.5, 1e-9);

  // On one host every hop is loopback; a world of one moves nothing.
  o.ranks_per_host = 4;
  EXPECT_NEAR(predict_step_time(plan_training(c, p), c, o).comm_cpu, moved / 2e9, 1e-9 * cpu);
  const StepTimePlan one = predict_step_time(plan_training(c, 1), c, o);
  EXPECT_DOUBLE_EQ(one.comm_cpu, 0);
  EXPECT_NEAR(one.step, 1.0, 1e-12);
}

// OpenMPI's in-place all-reduce (NO_SHARD's) is a binomial reduce to rank 0 and a binomial
// broadcast: over its 4 members 3 whole buffers each way, so a member's CPU share is 2 x 3/4 of
// the buffer, as a ring's; its time is 2 x 2 rounds of the whole buffer against the ring's 2 x 3/4.
TEST(StepTime, OpenMpisAllReduceIsTwoTrees) {
  TrainConfig c = config(ShardingStrategy::kNoShard);
  const int p = 4;
  const Plan plan = plan_training(c, p);
  TimeModelOptions o = links(1.0);
  o.intra = {1e9, 0, 1e9};
  double bytes = 0;
  for (const auto& u : plan.units) bytes += 4.0 * static_cast<double>(u.numel);
  const StepTimePlan rings = predict_step_time(plan, c, o);
  o.algorithms = CollectiveAlgorithms::kOpenMpi;
  const StepTimePlan trees = predict_step_time(plan, c, o);
  EXPECT_NEAR(rings.in_collectives, 1.5 * bytes / 1e9, 1e-9 * bytes / 1e9);
  EXPECT_NEAR(trees.in_collectives, 4 * bytes / 1e9, 1e-9 * bytes / 1e9);
  EXPECT_NEAR(trees.comm_cpu, rings.comm_cpu, 1e-9 * rings.comm_cpu);
}

double sum_of_waits(const StepTimePlan& t) {
  double sum = 0;
  for (const auto& w : t.waits) sum += w.seconds;
  return sum;
}

double wait_for(const StepTimePlan& t, const std::string& cause) {
  for (const auto& w : t.waits) {
    if (w.cause == cause) return w.seconds;
  }
  return 0;
}

// The exposed time by cause (fsdp-plan prints it): the causes add up to the exposed time, whatever
// the schedule, and name what the schedule waited for. Without prefetch FULL_SHARD waits for every
// block's gathers; with it and compute far longer, hardly at all; contention and the CPU bound
// are causes of their own; without background progress one cause is every collective.
TEST(StepTime, WaitsAddUpToTheExposedTime) {
  TrainConfig c = config(ShardingStrategy::kFullShard);
  TimeModelOptions o = links(0.01);
  o.ranks_per_host = 2;
  const Plan plan = plan_training(c, 4, 2);
  const auto check = [&](const char* what) {
    SCOPED_TRACE(what);
    const StepTimePlan t = predict_step_time(plan, c, o);
    EXPECT_GT(t.exposed, 0);
    EXPECT_NEAR(sum_of_waits(t), t.exposed, 1e-9 * t.step);
    return t;
  };
  const StepTimePlan plain = check("plain");
  EXPECT_GT(wait_for(plain, "a block's all-gather in forward"), 0);
  EXPECT_GT(wait_for(plain, "a block's all-gather in backward"), 0);
  EXPECT_GT(wait_for(plain, "the root's all-gather, before forward"), 0);
  c.fsdp.forward_prefetch = true;
  c.fsdp.backward_prefetch = BackwardPrefetch::kBackwardPre;
  c.fsdp.split_root_reduction = true;
  check("prefetch, split");
  o.comm_cpu_bandwidth = 1e8;
  o.contention = 1;
  EXPECT_GT(wait_for(check("contention"), "compute slowed by collectives (contention)"), 0);
  o.intra.cpu_bandwidth = o.inter.cpu_bandwidth = 1e6;
  o.cores_per_rank = 1;
  EXPECT_GT(wait_for(check("CPU bound"), "the CPU bound, beyond the schedule"), 0);
  o.cores_per_rank = 0;
  o.background_progress = false;
  const StepTimePlan waited = check("no background progress");
  ASSERT_EQ(waited.waits.size(), 1u);
  EXPECT_EQ(waited.waits[0].cause, "every collective, inside its wait");
  c.fsdp.sharding_strategy = ShardingStrategy::kHybridShard;
  o.background_progress = true;
  const StepTimePlan hybrid = predict_step_time(plan_training(c, 4, 2), c, o);
  EXPECT_NEAR(sum_of_waits(hybrid), hybrid.exposed, 1e-9 * hybrid.step);
}

// The split's early part in pieces (root_reduction_chunks; [Note: split root reduction]): in one
// queue (Gloo's), a piece goes as each of the first blocks' backward begins, so a block's
// reduce-scatter waits behind a piece, not the whole root's. The pieces move the same bytes, at
// a ring's latency each. Here the root is 5.3 blocks (automatic: 6 pieces of a block's size, at
// most one per block, so 4). A block's backward (0.30 ms) is about as long as its gather and
// reduce-scatter and a piece together (0.22 + 0.14 ms), and shorter than the root's whole
// reduction (0.53 ms). Where a block's backward is shorter than its own collectives pieces hide
// nothing: at half the compute here they add their latencies.
TEST(StepTime, RootInPiecesLetsTheBlocksReductionsPass) {
  TrainConfig c = config(ShardingStrategy::kFullShard);
  c.model.vocab_size = 4096;
  c.fsdp.forward_prefetch = true;
  c.fsdp.backward_prefetch = BackwardPrefetch::kBackwardPre;
  c.fsdp.split_root_reduction = true;
  const Plan plan = plan_training(c, 2);
  TimeModelOptions o = links(0.004);
  o.intra = {1e9, 1e-5};
  EXPECT_EQ(root_reduction_pieces(plan, c), 4);
  const StepTimePlan pieces = predict_step_time(plan, c, o);
  c.fsdp.root_reduction_chunks = 1;
  EXPECT_EQ(root_reduction_pieces(plan, c), 1);
  const StepTimePlan one = predict_step_time(plan, c, o);
  EXPECT_NEAR(pieces.in_collectives, one.in_collectives + 3 * 1e-5, 1e-12);
  const char* behind = "a unit's reduce-scatter, before the next is issued";
  EXPECT_GT(wait_for(one, behind), 0);
  EXPECT_LT(wait_for(pieces, behind), 0.5 * wait_for(one, behind));
  EXPECT_LT(pieces.exposed, one.exposed);
  EXPECT_NEAR(sum_of_waits(pieces), pieces.exposed, 1e-9 * pieces.step);
}

// BACKWARD_PRE from the root (Runtime::prefetch_after at its pre-backward): the first block of
// backward is gathered during the output head's backward, so with compute far longer than a
// gather no block waits for one; without backward prefetch each waits for its own.
TEST(StepTime, RootsPreBackwardPrefetchesTheFirstBlock) {
  TrainConfig c = config(ShardingStrategy::kFullShard);
  c.fsdp.backward_prefetch = BackwardPrefetch::kBackwardPre;
  const Plan plan = plan_training(c, 2);
  const TimeModelOptions o = links(10.0);
  const char* cause = "a block's all-gather in backward";
  EXPECT_EQ(wait_for(predict_step_time(plan, c, o), cause), 0);
  c.fsdp.backward_prefetch = BackwardPrefetch::kNoPrefetch;
  EXPECT_GT(wait_for(predict_step_time(plan, c, o), cause), 0);
}

TEST(StepTime, FlopsCountTheMatricesTheHeadAndAttention) {
  TrainConfig c = config(ShardingStrategy::kFullShard);
  const Plan plan = plan_training(c, 1);
  const double h = 64, v = 512, s = 32, b = 2, L = 4, positions = 32;
  const double matrices = static_cast<double>(plan.parameters) - v * h - positions * h;
  const double expected = 2 * b * s * matrices + 2 * b * s * v * h + 4 * b * s * s * h * L;
  EXPECT_NEAR(forward_flops(c, plan.parameters), expected, 1e-6 * expected);
  const ComputeProfile p = profile_from_rates(c, plan.parameters, 1e9, 1e9);
  EXPECT_NEAR(p.forward, expected / 1e9, 1e-12);
  EXPECT_NEAR(p.backward, 2 * p.forward, 1e-12);
  EXPECT_NEAR(achieved_flops_per_second(c, plan.parameters, p), 1e9, 1e-3);  // no recomputation
  c.fsdp.activation_checkpointing = true;
  const ComputeProfile checkpointed = profile_from_rates(c, plan.parameters, 1e9, 1e9);
  EXPECT_NEAR(checkpointed.backward, 3 * p.forward, 1e-12);
  EXPECT_NEAR(achieved_flops_per_second(c, plan.parameters, checkpointed), 1e9, 1e-3);
  c.fsdp.activation_checkpointing_every = 2;  // 2 of the 4 blocks recompute
  const ComputeProfile selective = profile_from_rates(c, plan.parameters, 1e9, 1e9);
  EXPECT_NEAR(selective.backward, 2.5 * p.forward, 1e-12);
  EXPECT_NEAR(achieved_flops_per_second(c, plan.parameters, selective), 1e9, 1e-3);
  c.fsdp.activation_checkpointing_every = 3;  // blocks 0 and 3
  EXPECT_NEAR(profile_from_rates(c, plan.parameters, 1e9, 1e9).backward, 2.5 * p.forward, 1e-12);
  EXPECT_THROW(profile_from_rates(c, plan.parameters, 0, 1e9), std::invalid_argument);
}

}  // namespace
}  // namespace fsdp
