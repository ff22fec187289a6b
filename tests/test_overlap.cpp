// Overlap: prefetch and the deferred wait on reductions exist so that compute never waits on a
// collective it does not need. The parity tests show that they change no number; this test shows
// that they do what they are for, from when things happened in each process, not from speed:
// the next unit's all-gather completes while this unit's forward computes, the previous unit's
// while this unit's backward computes (BACKWARD_PRE), and a unit's reduce-scatter while the unit
// before it computes its backward. With prefetch off, the same probe sees each all-gather issued
// only after the compute before it ended: the measurement tells the two apart.
//
// The model is a chain of four units, each a 2048 x 2048 weight applied 4 times to 128 rows (50 to
// 150 ms of one thread's compute, against a 16 MB all-gather of 5 to 15 ms), which records when its
// forward and its backward compute begin and end. The group is wrapped in a comm that records
// when each all-gather and reduce-scatter was issued and when it completed: a thread of the test
// waits on each one, so completion is seen when it happens, not when the runtime asks.
//
// The group is Gloo's, on the CPU: its collectives run on a worker thread of their own, beside
// the training thread. Not MPI: OpenMPI progresses a nonblocking collective only inside MPI calls,
// so there the transfer happens when the runtime waits (and the test's waiting thread would move
// it itself). On one GPU no collective can run beside compute (docs/cuda.md).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <iomanip>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "fsdp/fsdp.h"
#include "test_util.h"

namespace fsdp {
namespace {

using Clock = std::chrono::steady_clock;

struct Interval {
  Clock::time_point begin, end;
};

// What one process saw: compute intervals by name ("b1 forward"), collectives by the context
// label the runtime gave them ("unit 'b1' forward prefetch all-gather, step 1").
class Timeline {
 public:
  void compute_began(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    compute_[what].begin = Clock::now();
  }
  void compute_ended(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    compute_[what].end = Clock::now();
  }
  void collective(const std::string& label, Interval in_flight) {
    std::lock_guard<std::mutex> lock(mu_);
    collectives_[label] = in_flight;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    compute_.clear();
    collectives_.clear();
  }

  std::optional<Interval> compute(const std::string& what) const { return find(compute_, what); }
  // The collective of unit `unit` whose label holds `phase`, e.g. ("b1", "forward all-gather").
  std::optional<Interval> collective(const std::string& unit, const std::string& phase) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [label, interval] : collectives_) {
      if (label.find("unit '" + unit + "' " + phase + ",") == 0) return interval;
    }
    return std::nullopt;
  }

 private:
  std::optional<Interval> find(const std::map<std::string, Interval>& m,
                               const std::string& key) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = m.find(key);
    return it == m.end() ? std::nullopt : std::optional<Interval>(it->second);
  }

  mutable std::mutex mu_;
  std::map<std::string, Interval> compute_;
  std::map<std::string, Interval> collectives_;
};

Timeline& timeline() {
  static Timeline t;
  return t;
}

// A collective waited on by a thread of its own from the moment it is issued, which records when
// it completed; the runtime's wait joins that thread and rethrows what it caught.
class WatchedWork : public Work {
 public:
  WatchedWork(WorkPtr inner, std::string label) {
    const Clock::time_point issued = Clock::now();
    watcher_ = std::thread([this, inner = std::move(inner), label = std::move(label), issued] {
      try {
        inner->wait();
        timeline().collective(label, {issued, Clock::now()});
      } catch (...) {
        error_ = std::current_exception();
      }
    });
  }
  ~WatchedWork() override {
    if (watcher_.joinable()) watcher_.join();
  }
  void wait() override {
    if (watcher_.joinable()) watcher_.join();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::exception_ptr error_;
  std::thread watcher_;  // last: starts after error_ exists
};

// The group under test, with its all-gathers and reduce-scatters watched.
class WatchedComm : public Comm {
 public:
  explicit WatchedComm(CommPtr inner) : inner_(std::move(inner)) {
    set_timeout(inner_->timeout());
    set_local_size(inner_->local_size());
  }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend() const override { return inner_->backend(); }
  CommDevice device() const override { return inner_->device(); }
  int device_index() const override { return inner_->device_index(); }

  WorkPtr all_gather_async(const void* in, void* out, size_t count, DType dtype) override {
    return std::make_shared<WatchedWork>(pass().all_gather_async(in, out, count, dtype), context());
  }
  WorkPtr reduce_scatter_async(const void* in, void* out, size_t count, DType dtype,
                               ReduceOp op) override {
    return std::make_shared<WatchedWork>(pass().reduce_scatter_async(in, out, count, dtype, op),
                                         context());
  }
  WorkPtr all_reduce_async(void* data, size_t count, DType dtype, ReduceOp op) override {
    return pass().all_reduce_async(data, count, dtype, op);
  }
  WorkPtr broadcast_async(void* data, size_t count, DType dtype, int root) override {
    return pass().broadcast_async(data, count, dtype, root);
  }
  void barrier() override { pass().barrier(); }
  std::shared_ptr<Comm> split(int color, int key) override { return pass().split(color, key); }

 private:
  // The inner group, told this one's context and deadline (set on this object by the runtime).
  Comm& pass() {
    inner_->set_context(context());
    inner_->set_timeout(timeout());
    return *inner_;
  }

  CommPtr inner_;
};

constexpr int64_t kWidth = 2048, kRows = 128, kRepeats = 4, kBlocks = 4;

// One unit: tanh(x W^T), 4 times over, with its compute's begin and end recorded, in forward
// directly and in backward by hooks on its output's and its input's gradients (the first fires
// before the unit's backward ops, the second after).
struct BurnImpl : torch::nn::Module {
  explicit BurnImpl(std::string name) : name(std::move(name)) {
    weight = register_parameter("weight", torch::randn({kWidth, kWidth}) / std::sqrt(kWidth));
  }
  at::Tensor forward(at::Tensor x) {
    const std::string backward = name + " backward";
    if (x.requires_grad()) {
      x.register_hook([backward](const at::Tensor&) { timeline().compute_ended(backward); });
    }
    timeline().compute_began(name + " forward");
    at::Tensor y = x;
    for (int i = 0; i < kRepeats; ++i) y = at::tanh(at::matmul(y, weight.t()));
    timeline().compute_ended(name + " forward");
    if (y.requires_grad()) {
      y.register_hook([backward](const at::Tensor&) { timeline().compute_began(backward); });
    }
    return y;
  }
  std::string name;
  at::Tensor weight;
};
TORCH_MODULE(Burn);

struct ChainImpl : torch::nn::Module {
  ChainImpl() {
    for (int i = 0; i < kBlocks; ++i) {
      const std::string name = "b" + std::to_string(i);
      blocks.push_back(register_module(name, Burn(name)));
    }
  }
  at::Tensor forward(at::Tensor x) {
    for (auto& b : blocks) x = fsdp::forward(b, x);
    return x.pow(2).mean();
  }
  std::vector<Burn> blocks;
};
TORCH_MODULE(Chain);

std::string block(int i) { return "b" + std::to_string(i); }

// A model sharded with `options` over the watched group, after a first pass that records the
// unit order prefetch follows; each timed_pass() is one more forward and backward, its timeline
// alone kept.
class ShardedChain {
 public:
  explicit ShardedChain(const ShardingOptions& options) {
    torch::manual_seed(0);  // the same weights and input on every rank
    model_ = Chain();
    comm_ = std::make_shared<WatchedComm>(test::world());
    sharded_ = fully_shard(model_.ptr(), comm_, options);
    x_ = torch::randn({kRows, kWidth});
    pass();
  }
  void timed_pass() {
    comm_->barrier();  // the ranks start together
    timeline().clear();
    pass();
  }

 private:
  Chain model_{nullptr};
  std::shared_ptr<WatchedComm> comm_;
  std::shared_ptr<FullyShardedModel> sharded_;
  // A fresh leaf each pass, so that the first unit's input hook is registered once per pass.
  void pass() { fsdp::forward(model_, x_.detach().requires_grad_()).backward(); }

  at::Tensor x_;
};

// A collective and the compute it should run beside, as every rank saw them: one row per rank.
struct Pair {
  std::string collective, compute;
  std::vector<Interval> in_flight, computed;
};

// Every rank's intervals for `what` (collective, compute), gathered over the group: the ranks run
// on one host, where steady_clock is the system's monotonic clock, the same in every process.
// A side a rank did not see fails the test, and reads as time zero below.
Pair across_ranks(std::string collective, std::optional<Interval> c, std::string compute,
                  std::optional<Interval> w) {
  EXPECT_TRUE(c.has_value()) << collective << " was not seen";
  EXPECT_TRUE(w.has_value()) << compute << " was not seen";
  const auto ns = [](Clock::time_point t) {
    return static_cast<int64_t>(t.time_since_epoch().count());
  };
  const Interval none{};
  const Interval cc = c.value_or(none), ww = w.value_or(none);
  const std::vector<int64_t> mine = {ns(cc.begin), ns(cc.end), ns(ww.begin), ns(ww.end)};
  Comm& comm = *test::world();
  std::vector<int64_t> all(mine.size() * comm.size());
  comm.all_gather(mine.data(), all.data(), mine.size(), DType::kInt64);
  Pair p{std::move(collective), std::move(compute), {}, {}};
  const auto at = [](int64_t v) { return Clock::time_point(Clock::duration(v)); };
  for (size_t r = 0; r < static_cast<size_t>(comm.size()); ++r) {
    const int64_t* v = &all[4 * r];
    p.in_flight.push_back({at(v[0]), at(v[1])});
    p.computed.push_back({at(v[2]), at(v[3])});
  }
  return p;
}

// What keeps `p` from having run beside its compute, if anything. On every rank the collective
// was issued before the compute began (the runtime's schedule). It waits for the rank that issued
// it last, the gate: there it must still have been in flight when the gate's compute began, and it
// must have completed, on every rank, before that compute ended, so that no compute waited on it.
// (Completion is compared with the gate's compute, not each rank's own: a rank that runs ahead
// waits for the others whatever the runtime does, and a rank's side of an all-gather completes as
// soon as the gate's data reached it.)
std::vector<std::string> violations(const Pair& p, Clock::time_point origin) {
  const auto ms = [&](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(t - origin).count();
  };
  std::vector<std::string> found;
  size_t gate = 0;
  for (size_t r = 0; r < p.in_flight.size(); ++r) {
    if (p.in_flight[r].begin >= p.computed[r].begin) {
      found.push_back("rank " + std::to_string(r) + ": " + p.collective + " was issued after " +
                      p.compute + " began");
    }
    if (p.in_flight[r].begin > p.in_flight[gate].begin) gate = r;
  }
  const Interval& window = p.computed[gate];
  if (p.in_flight[gate].end <= window.begin) {
    found.push_back("rank " + std::to_string(gate) + ": " + p.collective + " was complete before " +
                    p.compute + " began");
  }
  std::ostringstream line;
  line << std::fixed << std::setprecision(1) << "[ overlap ] " << p.collective
       << ": issued last by rank " << gate << " at " << ms(p.in_flight[gate].begin) << " ms, whose "
       << p.compute << " ran " << ms(window.begin) << " - " << ms(window.end)
       << " ms; completed at";
  for (size_t r = 0; r < p.in_flight.size(); ++r) {
    line << " " << ms(p.in_flight[r].end) << " (rank " << r << ")";
    if (p.in_flight[r].end >= window.end) {
      found.push_back("rank " + std::to_string(r) + ": " + p.collective + " completed after rank " +
                      std::to_string(gate) + "'s " + p.compute + " ended");
    }
  }
  if (test::world()->rank() == 0) std::cout << line.str() << " ms\n";
  return found;
}

// The prefetched pairs of the last timed pass (every rank's view) and what kept them apart.
std::vector<std::string> prefetch_violations() {
  const Timeline& t = timeline();
  // The pass's first unit in each direction (b0 forward, b3 backward) is left out as the unit
  // computing: nothing computes before its own all-gather, issued just before the next unit's,
  // and the next one, queued behind it, may finish while the rank is still waking from the wait
  // for the first. From the second unit on, a unit's own gather finished during the compute
  // before it, and the next unit's starts as it is issued.
  std::vector<Pair> pairs;
  for (int i = 0; i + 1 < kBlocks; ++i) {
    const std::string next = block(i + 1), unit = block(i);
    if (i > 0) {
      pairs.push_back(across_ranks("unit " + next + "'s forward all-gather",
                                   t.collective(next, "forward prefetch all-gather"),
                                   unit + " forward", t.compute(unit + " forward")));
    }
    if (i + 2 < kBlocks) {
      pairs.push_back(across_ranks("unit " + unit + "'s backward all-gather",
                                   t.collective(unit, "backward prefetch all-gather"),
                                   next + " backward", t.compute(next + " backward")));
    }
    pairs.push_back(across_ranks("unit " + next + "'s reduce-scatter",
                                 t.collective(next, "backward gradient reduction"),
                                 unit + " backward", t.compute(unit + " backward")));
  }
  Clock::time_point origin = Clock::time_point::max();
  for (const Pair& p : pairs) {
    for (const Interval& c : p.in_flight) origin = std::min(origin, c.begin);
  }
  std::vector<std::string> found;
  for (const Pair& p : pairs) {
    for (std::string& v : violations(p, origin)) found.push_back(std::move(v));
  }
  return found;
}

ShardingOptions base() {
  return ShardingOptions()
      .strategy(ShardingStrategy::kFullShard)
      .wrap(WrapPolicy::by_type({"Burn"}))
      .device("cpu");
}

class Overlap : public ::testing::Test {
 protected:
  void SetUp() override {
    if (test::world()->size() < 2) GTEST_SKIP() << "one rank: there is no collective to overlap";
    if (test::world()->backend() != "gloo") {
      GTEST_SKIP() << "backend " << test::world()->backend()
                   << ": only Gloo runs its collectives beside the training thread";
    }
  }
};

// Up to three timed passes: the first in which every pair ran beside its compute passes. On a
// loaded two-core machine the OS may hold a collective's thread off the CPU for longer than a
// unit's compute in one pass. A runtime that does not overlap fails every pass: one that issues
// the collective after the compute began fails the schedule check, one that waits on it at once
// finds it complete before the compute began. Every rank sees the same gathered timestamps, so
// all agree on the outcome.
TEST_F(Overlap, PrefetchedAllGathersAndReductionsCompleteDuringCompute) {
  ShardedChain run(base().forward_prefetch(true).backward_prefetch(BackwardPrefetch::kBackwardPre));
  std::vector<std::string> found;
  for (int pass = 1; pass <= 3; ++pass) {
    run.timed_pass();
    found = prefetch_violations();
    if (found.empty()) return;
    if (test::world()->rank() == 0) {
      std::cout << "[ overlap ] pass " << pass << ": " << found.front() << " (" << found.size()
                << " in all)\n";
    }
  }
  for (const std::string& v : found) ADD_FAILURE() << v;
}

// The control: without prefetch each unit's all-gather is issued when the unit is reached, after
// the compute before it ended, so it cannot run beside it.
TEST_F(Overlap, WithoutPrefetchEachAllGatherFollowsTheComputeBeforeIt) {
  ShardedChain(base().forward_prefetch(false).backward_prefetch(BackwardPrefetch::kNoPrefetch))
      .timed_pass();
  const Timeline& t = timeline();
  for (int i = 0; i + 1 < kBlocks; ++i) {
    const std::string next = block(i + 1), unit = block(i);
    const auto forward = t.collective(next, "forward all-gather");
    const auto backward = t.collective(unit, "backward all-gather");
    const auto computed_forward = t.compute(unit + " forward");
    const auto computed_backward = t.compute(next + " backward");
    ASSERT_TRUE(forward && backward && computed_forward && computed_backward) << "unit " << unit;
    EXPECT_GE(forward->begin, computed_forward->end) << "unit " << next;
    EXPECT_GE(backward->begin, computed_backward->end) << "unit " << unit;
  }
}

}  // namespace
}  // namespace fsdp
