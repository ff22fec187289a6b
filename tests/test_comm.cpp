// Tests of the comm layer. Suite `Comm` runs on every rank of an mpirun job against the group
// FSDP_TEST_BACKEND names (mpi or gloo): every collective, dtype and an assortment of counts the
// world size does not divide, with rank-dependent data and exact expected values (the inputs are
// small integers, so every sum is exact even in bf16). `CommTimeout` leaves rank 0 alone in a
// collective and runs in CTest entries of its own. `CommEnv`, `CommLocal` and `CommKernels` are
// single-process: environment parsing (through a fake environment), the local backend and the
// bf16/fp16 rounding of the shared sum kernel.
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <thread>
#include <vector>

#include "comm/internal.h"
#include "comm/progress.h"
#include "comm/rendezvous.h"
#include "test_util.h"

namespace fsdp {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const DType kAllTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kInt64};

// A buffer of `n` elements of `dtype`, read and written as doubles (exact for every value the
// tests use).
class Buffer {
 public:
  Buffer(DType dtype, size_t n) : dtype_(dtype), n_(n), bytes_(n * dtype_size(dtype)) {}

  void* data() { return bytes_.data(); }
  size_t size() const { return n_; }

  void set(size_t i, double v) {
    char* p = bytes_.data() + i * dtype_size(dtype_);
    switch (dtype_) {
      case DType::kFloat32: {
        float f = static_cast<float>(v);
        return (void)std::memcpy(p, &f, 4);
      }
      case DType::kBFloat16: {
        c10::BFloat16 b(static_cast<float>(v));
        return (void)std::memcpy(p, &b, 2);
      }
      case DType::kFloat16: {
        c10::Half h(static_cast<float>(v));
        return (void)std::memcpy(p, &h, 2);
      }
      case DType::kInt64: {
        int64_t x = static_cast<int64_t>(v);
        return (void)std::memcpy(p, &x, 8);
      }
    }
  }

  double get(size_t i) const {
    const char* p = bytes_.data() + i * dtype_size(dtype_);
    switch (dtype_) {
      case DType::kFloat32: {
        float f;
        std::memcpy(&f, p, 4);
        return f;
      }
      case DType::kBFloat16: {
        c10::BFloat16 b;
        std::memcpy(&b, p, 2);
        return static_cast<float>(b);
      }
      case DType::kFloat16: {
        c10::Half h;
        std::memcpy(&h, p, 2);
        return static_cast<float>(h);
      }
      case DType::kInt64: {
        int64_t x;
        std::memcpy(&x, p, 8);
        return static_cast<double>(x);
      }
    }
    return 0;
  }

 private:
  DType dtype_;
  size_t n_;
  std::vector<char> bytes_;
};

// Rank r's element i: an integer in [-32, 31] (sums over 4 ranks stay within bf16's exact
// integers), scaled so that fp32 carries a fraction and int64 needs more than 32 bits.
double value(DType dtype, int rank, size_t i) {
  const double base =
      static_cast<double>((i * 7 + i / 97 + static_cast<size_t>(rank) * 13) % 64) - 32;
  switch (dtype) {
    case DType::kFloat32:
      return base * 0.25;
    case DType::kInt64:
      return base * static_cast<double>(int64_t{1} << 40) + rank;
    default:
      return base;
  }
}

double sum_over_ranks(DType dtype, int size, size_t i) {
  double s = 0;
  for (int r = 0; r < size; ++r) s += value(dtype, r, i);
  return s;
}

// The average as the backends compute it: the exact sum, divided in float (integer division for
// int64) and rounded to the element type.
double average(DType dtype, double sum, int size) {
  const float q = static_cast<float>(sum) / static_cast<float>(size);
  switch (dtype) {
    case DType::kFloat32:
      return q;
    case DType::kBFloat16:
      return static_cast<float>(c10::BFloat16(static_cast<float>(c10::BFloat16(sum)) / size));
    case DType::kFloat16:
      return static_cast<float>(c10::Half(static_cast<float>(c10::Half(sum)) / size));
    case DType::kInt64:
      return static_cast<double>(static_cast<int64_t>(sum) / size);
  }
  return 0;
}

double reduced(DType dtype, ReduceOp op, int size, size_t i) {
  const double s = sum_over_ranks(dtype, size, i);
  return op == ReduceOp::kSum ? s : average(dtype, s, size);
}

// Checks every element, reporting the count and the first mismatch (not a million failures).
// EXPECT, never ASSERT: a rank that returned early would leave its peers in a collective.
void expect_all(const Buffer& got, const std::function<double(size_t)>& want) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got.get(i) != want(i) && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << "first mismatch at " << first << ": got " << got.get(first) << ", want "
                     << want(first);
}

Buffer filled(DType dtype, int rank, size_t n) {
  Buffer b(dtype, n);
  for (size_t i = 0; i < n; ++i) b.set(i, value(dtype, rank, i));
  return b;
}

// Element counts per rank: small ones no world size divides, and a large one (about a million
// in total) that Gloo segments and that the MPI chunking test splits.
std::vector<size_t> counts(int size) { return {1, 7, 13, (size_t{1} << 20) / size + 3}; }

std::string trace(DType dtype, size_t count) {
  return std::string(dtype_name(dtype)) + " x " + std::to_string(count);
}

void check_all_gather(Comm& comm, DType dtype, size_t count) {
  SCOPED_TRACE("all_gather " + trace(dtype, count));
  Buffer in = filled(dtype, comm.rank(), count), out(dtype, count * comm.size());
  comm.all_gather(in.data(), out.data(), count, dtype);
  expect_all(out, [&](size_t j) { return value(dtype, static_cast<int>(j / count), j % count); });
}

void check_reduce_scatter(Comm& comm, DType dtype, size_t count, ReduceOp op) {
  SCOPED_TRACE(std::string("reduce_scatter ") + comm_internal::op_name(op) + " " +
               trace(dtype, count));
  Buffer in = filled(dtype, comm.rank(), count * comm.size()), out(dtype, count);
  comm.reduce_scatter(in.data(), out.data(), count, dtype, op);
  const size_t offset = count * comm.rank();
  expect_all(out, [&](size_t i) { return reduced(dtype, op, comm.size(), offset + i); });
}

void check_all_reduce(Comm& comm, DType dtype, size_t count, ReduceOp op) {
  SCOPED_TRACE(std::string("all_reduce ") + comm_internal::op_name(op) + " " + trace(dtype, count));
  Buffer data = filled(dtype, comm.rank(), count);
  comm.all_reduce(data.data(), count, dtype, op);
  expect_all(data, [&](size_t i) { return reduced(dtype, op, comm.size(), i); });
}

void check_broadcast(Comm& comm, DType dtype, size_t count) {
  const int root = comm.size() - 1;  // not rank 0 whenever there is more than one rank
  SCOPED_TRACE("broadcast from " + std::to_string(root) + " " + trace(dtype, count));
  Buffer data = filled(dtype, comm.rank(), count);
  comm.broadcast(data.data(), count, dtype, root);
  expect_all(data, [&](size_t i) { return value(dtype, root, i); });
}

void check_every_collective(Comm& comm) {
  for (DType dtype : kAllTypes) {
    for (size_t count : counts(comm.size())) {
      check_all_gather(comm, dtype, count);
      check_reduce_scatter(comm, dtype, count, ReduceOp::kSum);
      check_reduce_scatter(comm, dtype, count, ReduceOp::kAvg);
      check_all_reduce(comm, dtype, count, ReduceOp::kSum);
      check_all_reduce(comm, dtype, count, ReduceOp::kAvg);
      check_broadcast(comm, dtype, count);
    }
  }
}

// ---- Multi-rank: the group under test -------------------------------------------------------

TEST(Comm, GroupMatchesBackendUnderTest) {
  CommPtr world = test::world();
  EXPECT_EQ(world->backend(), test::backend_under_test());
  EXPECT_GE(world->rank(), 0);
  EXPECT_LT(world->rank(), world->size());
}

TEST(Comm, EveryCollectiveDtypeAndCount) { check_every_collective(*test::world()); }

// MPI counts are int: longer messages go out in pieces. Lowering the piece size makes the test's
// million elements take that path (several all-reduce/broadcast calls, and several sends and
// receives per step of the all-gather's and the reduce-scatter's rings). Gloo ignores the knob.
TEST(Comm, MessagesSplitIntoPieces) {
  CommPtr world = test::world();
  size_t& limit = comm_internal::mpi_max_elements_per_call();
  const size_t saved = limit;
  limit = 100003;
  const size_t count = (size_t{1} << 20) / world->size() + 5;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    check_all_gather(*world, dtype, count);
    check_reduce_scatter(*world, dtype, count, ReduceOp::kAvg);
    check_all_reduce(*world, dtype, count * world->size(), ReduceOp::kSum);
    check_broadcast(*world, dtype, count * world->size());
  }
  limit = saved;
}

TEST(Comm, ZeroElementsIsANoOp) {
  CommPtr world = test::world();
  float x = 0;
  world->all_gather(&x, &x, 0, DType::kFloat32);
  world->reduce_scatter(&x, &x, 0, DType::kFloat32, ReduceOp::kSum);
  world->all_reduce(&x, 0, DType::kFloat32, ReduceOp::kSum);
  world->broadcast(&x, 0, DType::kFloat32, 0);
  check_all_reduce(*world, DType::kFloat32, 3, ReduceOp::kSum);  // still in step afterwards
}

// Each rank leaves a file before the barrier (the last rank late) and checks all are there after.
TEST(Comm, BarrierWaitsForEveryRank) {
  CommPtr world = test::world();
  int64_t token =
      static_cast<int64_t>(getpid()) * 1000003 + Clock::now().time_since_epoch().count() % 1000003;
  world->broadcast(&token, 1, DType::kInt64, 0);
  namespace fs = std::filesystem;
  for (int round = 0; round < 3; ++round) {
    const fs::path dir = fs::temp_directory_path() / ("fsdp_comm_barrier_" + std::to_string(token) +
                                                      "_" + std::to_string(round));
    fs::create_directories(dir);
    if (world->rank() == world->size() - 1) std::this_thread::sleep_for(100ms);
    std::ofstream(dir / std::to_string(world->rank())) << "here";
    world->barrier();
    for (int r = 0; r < world->size(); ++r) EXPECT_TRUE(fs::exists(dir / std::to_string(r))) << r;
    world->barrier();
    if (world->rank() == 0) fs::remove_all(dir);
  }
}

// Several collectives in flight at once, waited on in issue order (twice: a second wait returns).
TEST(Comm, AsyncCollectivesCompleteInIssueOrder) {
  CommPtr world = test::world();
  const int n = world->size(), me = world->rank();
  const size_t count = 1001;
  for (DType dtype : kAllTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Buffer gather_in = filled(dtype, me, count), gathered(dtype, count * n);
    Buffer scatter_in = filled(dtype, me, count * n), scattered(dtype, count);
    Buffer reduced_data = filled(dtype, me, count), broadcast_data = filled(dtype, me, count);
    std::vector<WorkPtr> work;
    work.push_back(world->all_gather_async(gather_in.data(), gathered.data(), count, dtype));
    work.push_back(world->reduce_scatter_async(scatter_in.data(), scattered.data(), count, dtype,
                                               ReduceOp::kSum));
    work.push_back(world->all_reduce_async(reduced_data.data(), count, dtype, ReduceOp::kAvg));
    work.push_back(world->broadcast_async(broadcast_data.data(), count, dtype, n - 1));
    for (auto& w : work) w->wait();
    for (auto& w : work) w->wait();
    expect_all(gathered,
               [&](size_t j) { return value(dtype, static_cast<int>(j / count), j % count); });
    expect_all(scattered,
               [&](size_t i) { return reduced(dtype, ReduceOp::kSum, n, me * count + i); });
    expect_all(reduced_data, [&](size_t i) { return reduced(dtype, ReduceOp::kAvg, n, i); });
    expect_all(broadcast_data, [&](size_t i) { return value(dtype, n - 1, i); });
  }
}

// Reduce-scatters of growing then shrinking sizes in flight together, waited on last first: the
// MPI backend runs a communicator's rings one at a time in issue order, so waiting on the last must
// drive the ones before it (with FSDP_MPI_PROGRESS=0, comm_mpi_noprogress_*, nothing else does),
// and the scratch they share must grow between them.
TEST(Comm, ReduceScattersInFlightWaitedOnLastFirst) {
  CommPtr world = test::world();
  const int n = world->size(), me = world->rank();
  const std::vector<size_t> counts = {3, 1001, 40000, 7};
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<Buffer> in, out;
    for (size_t count : counts) {
      in.push_back(filled(dtype, me, count * n));
      out.emplace_back(dtype, count);
    }
    std::vector<WorkPtr> work;
    for (size_t k = 0; k < counts.size(); ++k) {
      work.push_back(world->reduce_scatter_async(in[k].data(), out[k].data(), counts[k], dtype,
                                                 ReduceOp::kAvg));
    }
    for (size_t k = counts.size(); k-- > 0;) work[k]->wait();
    for (size_t k = 0; k < counts.size(); ++k) {
      expect_all(out[k],
                 [&](size_t i) { return reduced(dtype, ReduceOp::kAvg, n, me * counts[k] + i); });
    }
  }
}

// Gathers and reduce-scatters in flight together, as FSDP's prefetch has them, waited in an order
// that differs between ranks (even ranks last first): over MPI, whose gathers and reductions are
// rings in two lanes, a wait must move the other lane's rings too, or (without the progress
// thread) two ranks each wait for a ring the other does not drive.
TEST(Comm, GathersAndReductionsWaitedInAnyOrder) {
  CommPtr world = test::world();
  const int n = world->size(), me = world->rank();
  const std::vector<size_t> counts = {40000, 5, 1001};
  const DType dtype = DType::kFloat32;
  std::vector<Buffer> gather_in, gathered, scatter_in, scattered;
  std::vector<WorkPtr> work;
  for (size_t count : counts) {
    gather_in.push_back(filled(dtype, me, count));
    gathered.emplace_back(dtype, count * n);
    scatter_in.push_back(filled(dtype, me, count * n));
    scattered.emplace_back(dtype, count);
    work.push_back(
        world->all_gather_async(gather_in.back().data(), gathered.back().data(), count, dtype));
    work.push_back(world->reduce_scatter_async(scatter_in.back().data(), scattered.back().data(),
                                               count, dtype, ReduceOp::kSum));
  }
  if (me % 2 == 0) std::reverse(work.begin(), work.end());
  for (auto& w : work) w->wait();
  for (size_t k = 0; k < counts.size(); ++k) {
    const size_t count = counts[k];
    expect_all(gathered[k],
               [&](size_t j) { return value(dtype, static_cast<int>(j / count), j % count); });
    expect_all(scattered[k],
               [&](size_t i) { return reduced(dtype, ReduceOp::kSum, n, me * count + i); });
  }
}

// Two colors (even and odd ranks), each ordered by descending parent rank through the key.
TEST(Comm, SplitIntoTwoColors) {
  CommPtr world = test::world();
  const int n = world->size(), me = world->rank(), color = me % 2;
  std::vector<int> members;  // parent ranks of my group, in key order
  for (int r = n - 1; r >= 0; --r) {
    if (r % 2 == color) members.push_back(r);
  }
  world->set_timeout(45s);
  CommPtr sub = world->split(color, -me);
  world->set_timeout(60s);
  ASSERT_TRUE(sub);
  EXPECT_EQ(sub->size(), static_cast<int>(members.size()));
  EXPECT_EQ(sub->backend(), world->backend());
  EXPECT_EQ(sub->timeout(), 45s);
  const int sub_rank = sub->rank();
  EXPECT_EQ(members.at(sub_rank), me);

  int64_t mine = me, all[4] = {-1, -1, -1, -1};
  sub->all_gather(&mine, all, 1, DType::kInt64);
  for (int i = 0; i < sub->size(); ++i) EXPECT_EQ(all[i], members[i]) << i;

  for (DType dtype : kAllTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Buffer data = filled(dtype, me, 13);
    sub->all_reduce(data.data(), 13, dtype, ReduceOp::kSum);
    expect_all(data, [&](size_t i) {
      double s = 0;
      for (int r : members) s += value(dtype, r, i);
      return s;
    });
  }
  sub->barrier();
  world->barrier();  // the world is still in step after its children worked
  check_all_reduce(*world, DType::kFloat32, 7, ReduceOp::kSum);
}

TEST(Comm, SplitOfASplit) {
  CommPtr world = test::world();
  CommPtr same = world->split(0, world->rank());
  EXPECT_EQ(same->size(), world->size());
  EXPECT_EQ(same->rank(), world->rank());
  CommPtr alone = same->split(same->rank(), 0);
  EXPECT_EQ(alone->size(), 1);
  EXPECT_EQ(alone->rank(), 0);
  check_every_collective(*alone);
  check_all_reduce(*same, DType::kBFloat16, 13, ReduceOp::kAvg);
}

TEST(Comm, BadArgumentsThrowWithTheContextLabel) {
  CommPtr world = test::world();
  world->set_context("bad root test");
  float x = 0;
  try {
    world->broadcast(&x, 1, DType::kFloat32, world->size());
    ADD_FAILURE() << "no error for an out-of-range root";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("broadcast"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bad root test"), std::string::npos) << e.what();
  }
  EXPECT_THROW(world->split(-1, 0), CommError);
  world->set_context("");
  check_all_reduce(*world, DType::kFloat32, 7, ReduceOp::kSum);  // no collective was started
}

// ---- Multi-rank: the timeout path (own CTest entries, see comm.cmake) -----------------------

// The Work keeps the deadline it was issued with (500 ms here); retry while peers catch up.
void wait_patiently(Work& work) {
  for (int attempt = 0;; ++attempt) {
    try {
      return work.wait();
    } catch (const CommError&) {
      if (attempt == 40) throw;
    }
  }
}

// Rank 0 enters an all-reduce that no one else joins, on a group of its own with a short
// deadline. Its wait must throw within about that deadline, naming the collective and the label.
// Afterwards MPI still has the collective pending, so the others join it late and it completes;
// Gloo's worker gave up too, and the group refuses further work instead of hanging.
TEST(CommTimeout, LoneRankTimesOutWithContext) {
  CommPtr world = test::world();
  if (world->size() < 2) GTEST_SKIP() << "needs a peer that stays away";
  CommPtr group = world->split(0, world->rank());
  const auto timeout = 500ms;
  group->set_timeout(timeout);
  group->set_context("timeout test, step 7");
  std::vector<float> data(13, 1.0f);
  WorkPtr work;
  if (world->rank() == 0) {
    const auto start = Clock::now();
    work = group->all_reduce_async(data.data(), data.size(), DType::kFloat32, ReduceOp::kSum);
    try {
      work->wait();
      ADD_FAILURE() << "wait returned although no peer joined";
    } catch (const CommError& e) {
      const std::string what = e.what();
      std::cout << "rank 0 got, as expected: " << what << "\n";
      EXPECT_NE(what.find("all_reduce"), std::string::npos) << what;
      EXPECT_NE(what.find("timeout test, step 7"), std::string::npos) << what;
      EXPECT_NE(what.find("13 x fp32"), std::string::npos) << what;
      EXPECT_NE(what.find("timed out"), std::string::npos) << what;
    }
    const auto elapsed = Clock::now() - start;
    EXPECT_GE(elapsed, timeout);
    EXPECT_LT(elapsed, timeout + 3s);
  }
  world->barrier();
  if (world->backend() == "mpi") {
    group->set_timeout(30s);
    if (world->rank() == 0) {
      wait_patiently(*work);
    } else {
      group->all_reduce(data.data(), data.size(), DType::kFloat32, ReduceOp::kSum);
    }
    for (float v : data) EXPECT_EQ(v, static_cast<float>(world->size()));
    group->barrier();
  } else if (world->rank() == 0) {
    const auto start = Clock::now();
    try {
      group->all_reduce(data.data(), data.size(), DType::kFloat32, ReduceOp::kSum);
      ADD_FAILURE() << "a failed Gloo group ran another collective";
    } catch (const CommError& e) {
      std::cout << "rank 0 got, as expected: " << e.what() << "\n";
      EXPECT_NE(std::string(e.what()).find("failed earlier"), std::string::npos) << e.what();
    }
    EXPECT_LT(Clock::now() - start, timeout);
  }
  world->barrier();
  check_all_reduce(*world, DType::kFloat32, 7, ReduceOp::kSum);  // the world is unharmed
}

// A prefetch: rank 0 issues an all-gather that no one else joins and waits on it only after its
// deadline has passed, as FSDP's backward prefetch does when a peer hangs. Gloo's own timer (which
// starts when its worker begins the collective) fires before the wait does; either way the error
// must be the same timeout report as a prompt wait gives, naming who issued the collective and
// where the others stopped.
TEST(CommTimeout, PrefetchThatTimesOutBeforeItsWaitNamesTheMissingRanks) {
  CommPtr world = test::world();
  if (world->size() < 2) GTEST_SKIP() << "needs a peer that stays away";
  CommPtr group = world->split(0, world->rank());
  group->set_context("prefetch test");
  group->barrier();  // collective #1 on the group's board, issued by every rank
  const auto timeout = 500ms;
  group->set_timeout(timeout);
  std::vector<float> in(5, 1.0f), out(5 * world->size());
  WorkPtr work;
  if (world->rank() == 0) {
    work = group->all_gather_async(in.data(), out.data(), in.size(), DType::kFloat32);
    std::this_thread::sleep_for(3 * timeout);  // the compute a prefetch overlaps
    try {
      work->wait();
      ADD_FAILURE() << "wait returned although no peer joined";
    } catch (const CommError& e) {
      const std::string what = e.what();
      std::cout << "rank 0 got, as expected: " << what << "\n";
      EXPECT_NE(what.find("timed out after 500 ms waiting for all_gather of 5 x fp32"),
                std::string::npos)
          << what;
      EXPECT_NE(what.find("prefetch test"), std::string::npos) << what;
      EXPECT_NE(what.find("; ranks that issued this collective (#2): 0; rank 1 last issued #1 "
                          "barrier"),
                std::string::npos)
          << what;
    }
  }
  world->barrier();
  if (world->backend() == "mpi") {  // the collective is still pending: complete it
    group->set_timeout(30s);
    if (world->rank() == 0) {
      wait_patiently(*work);
    } else {
      group->all_gather(in.data(), out.data(), in.size(), DType::kFloat32);
    }
  }
  world->barrier();
}

// ---- Single process: environment parsing -----------------------------------------------------

using Env = std::map<std::string, std::string>;

comm_internal::Launch resolve(const std::string& backend, const Env& env, bool mpi = true) {
  return comm_internal::resolve_launch(
      backend,
      [&](const char* name) -> const char* {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      mpi);
}

// The CommError message resolve() throws, or "" when it does not throw.
std::string error_of(const std::string& backend, const Env& env, bool mpi = true) {
  try {
    resolve(backend, env, mpi);
  } catch (const CommError& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

TEST(CommEnv, UnknownBackendNameListsTheValidOnes) {
  CommOptions options;
  options.backend = "nccl2";
  try {
    init_comm(options);
    ADD_FAILURE() << "init_comm accepted an unknown backend";
  } catch (const CommError& e) {
    EXPECT_CONTAINS(e.what(), "nccl2");
    for (const char* name : {"auto", "mpi", "gloo", "local"}) EXPECT_CONTAINS(e.what(), name);
  }
}

TEST(CommEnv, NonPositiveTimeoutIsRejected) {
  CommOptions options;
  options.backend = "local";
  options.timeout = 0ms;
  EXPECT_THROW(init_comm(options), CommError);
}

TEST(CommEnv, AutoWithoutLauncherIsLocal) {
  auto launch = resolve("auto", {});
  EXPECT_EQ(launch.backend, "local");
  EXPECT_EQ(launch.size, 1);
  EXPECT_FALSE(launch.size_from_env);
}

TEST(CommEnv, AutoUnderTorchrunIsGloo) {
  auto launch = resolve("auto", {{"RANK", "1"},
                                 {"WORLD_SIZE", "4"},
                                 {"LOCAL_RANK", "1"},
                                 {"LOCAL_WORLD_SIZE", "2"},
                                 {"MASTER_PORT", "29512"}});
  EXPECT_EQ(launch.backend, "gloo");
  EXPECT_EQ(launch.rank, 1);
  EXPECT_EQ(launch.size, 4);
  EXPECT_EQ(launch.local_rank, 1);
  EXPECT_EQ(launch.local_size, 2);
  EXPECT_EQ(launch.master_addr, "127.0.0.1");
  EXPECT_EQ(launch.master_port, 29512);
}

TEST(CommEnv, AutoUnderMpirunIsMpiWhenBuilt) {
  const Env ompi = {{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"}};
  auto launch = resolve("auto", ompi, /*mpi=*/true);
  EXPECT_EQ(launch.backend, "mpi");
  EXPECT_EQ(launch.size, 3);
  // Without MPI, auto falls back to Gloo, which then needs a rendezvous port.
  EXPECT_CONTAINS(error_of("auto", ompi, /*mpi=*/false), "MASTER_PORT");
}

TEST(CommEnv, ExplicitGlooUnderMpirunTakesOmpiRanks) {
  auto launch = resolve("gloo", {{"OMPI_COMM_WORLD_RANK", "2"},
                                 {"OMPI_COMM_WORLD_SIZE", "3"},
                                 {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                                 {"MASTER_ADDR", "10.1.2.3"},
                                 {"MASTER_PORT", "29600"}});
  EXPECT_EQ(launch.backend, "gloo");
  EXPECT_EQ(launch.rank, 2);
  EXPECT_EQ(launch.size, 3);
  EXPECT_EQ(launch.local_rank, 2);
  EXPECT_EQ(launch.master_addr, "10.1.2.3");
  EXPECT_EQ(launch.master_port, 29600);
}

TEST(CommEnv, BadVariablesAreNamedWithTheirValues) {
  std::string e = error_of("auto", {{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_PORT", "1"}});
  EXPECT_CONTAINS(e, "RANK='4'");
  e = error_of("auto", {{"RANK", "one"}, {"WORLD_SIZE", "4"}});
  EXPECT_CONTAINS(e, "RANK='one'");
  EXPECT_CONTAINS(e, "not an integer");
  e = error_of("auto", {{"RANK", "0"}, {"WORLD_SIZE", "0"}});
  EXPECT_CONTAINS(e, "WORLD_SIZE='0'");
  e = error_of("auto", {{"RANK", "1"}});
  EXPECT_CONTAINS(e, "WORLD_SIZE is not");
  e = error_of("gloo", {{"RANK", "0"}, {"WORLD_SIZE", "2"}});
  EXPECT_CONTAINS(e, "MASTER_PORT");
  e = error_of("gloo", {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}});
  EXPECT_CONTAINS(e, "MASTER_PORT='70000'");
  e = error_of("gloo", {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500x"}});
  EXPECT_CONTAINS(e, "MASTER_PORT='29500x'");
  e = error_of("auto", {{"RANK", "0"},
                        {"WORLD_SIZE", "4"},
                        {"LOCAL_RANK", "2"},
                        {"LOCAL_WORLD_SIZE", "2"},
                        {"MASTER_PORT", "29500"}});
  EXPECT_CONTAINS(e, "LOCAL_RANK='2'");
  e = error_of("local", {{"RANK", "0"}, {"WORLD_SIZE", "2"}});
  EXPECT_CONTAINS(e, "one-rank");
}

// fsdp-run's private run directory carries the Gloo rendezvous of a one-host job: no port needed.
TEST(CommEnv, RunDirReplacesTheGlooPort) {
  auto launch = resolve("gloo", {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"FSDP_RUN_DIR", "/tmp/r"}});
  EXPECT_EQ(launch.run_dir, "/tmp/r");
  EXPECT_EQ(launch.master_port, 0);
  const std::string e =
      error_of("gloo", {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"FSDP_RUN_DIR", "run"}});
  EXPECT_CONTAINS(e, "FSDP_RUN_DIR='run'");
  EXPECT_CONTAINS(e, "absolute");
}

TEST(CommEnv, GlooWithOneRankNeedsNoPort) {
  auto launch = resolve("gloo", {});
  EXPECT_EQ(launch.size, 1);
  EXPECT_EQ(launch.master_port, 0);
}

// ---- Single process: the local backend and the shared kernels --------------------------------

TEST(CommLocal, CollectivesCopyOrDoNothing) {
  CommPtr comm = make_local_comm();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->backend(), "local");
  for (DType dtype : kAllTypes) {
    Buffer in = filled(dtype, 3, 13), out(dtype, 13);
    comm->all_gather(in.data(), out.data(), 13, dtype);
    expect_all(out, [&](size_t i) { return in.get(i); });
    Buffer out2(dtype, 13);
    comm->reduce_scatter(in.data(), out2.data(), 13, dtype, ReduceOp::kAvg);
    expect_all(out2, [&](size_t i) { return in.get(i); });
    comm->all_reduce(in.data(), 13, dtype, ReduceOp::kAvg);
    comm->broadcast(in.data(), 13, dtype, 0);
    expect_all(in, [&](size_t i) { return value(dtype, 3, i); });
  }
  comm->barrier();
  EXPECT_THROW(comm->broadcast(nullptr, 0, DType::kFloat32, 1), CommError);
  CommPtr child = comm->split(5, 0);
  EXPECT_EQ(child->size(), 1);
  EXPECT_NE(child.get(), comm.get());
}

// A one-rank Gloo group started without MASTER_PORT rendezvous in memory instead of over TCP.
TEST(CommLocal, GlooWithOneRankAndNoStore) {
  if (!comm_internal::gloo_built()) GTEST_SKIP() << "built without Gloo";
  comm_internal::GlooSetup setup;
  setup.timeout = 20s;
  CommPtr comm = comm_internal::make_gloo_comm(setup);
  EXPECT_EQ(comm->backend(), "gloo");
  EXPECT_EQ(comm->size(), 1);
  check_every_collective(*comm);
  comm->barrier();
  CommPtr child = comm->split(1, 0);
  EXPECT_EQ(child->size(), 1);
  check_all_reduce(*child, DType::kFloat16, 7, ReduceOp::kAvg);
}

// Three ranks' boards over one directory: rank 2 stops after its first collective; rank 0's
// report on the second names who reached it and what rank 2 issued last. Subgroups keep apart.
TEST(CommProgress, ReportNamesWhoReachedTheCollectiveAndWhereOthersStopped) {
  char tmpl[] = "/tmp/fsdp-progress-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  {
    auto slots = comm_internal::directory_slots(dir, /*owner=*/true);
    std::vector<comm_internal::ProgressBoard> boards;
    for (int r = 0; r < 3; ++r) boards.emplace_back(slots, "world", r, 3);
    for (auto& b : boards) EXPECT_EQ(b.post("all_gather of 64 bytes"), 1u);
    EXPECT_EQ(boards[0].post("reduce_scatter of 32 bytes"), 2u);
    EXPECT_EQ(boards[1].post("reduce_scatter of 32 bytes"), 2u);
    EXPECT_EQ(boards[0].report(2),
              "; ranks that issued this collective (#2): 0, 1; rank 2 last issued #1 all_gather "
              "of 64 bytes");
    auto sub = boards[0].subgroup("split1/color0", 0, 2);
    EXPECT_EQ(sub->report(1),
              "; ranks that issued this collective (#1): none; rank 0 posted no collective; "
              "rank 1 posted no collective");
    EXPECT_EQ(sub->post("barrier"), 1u);
    EXPECT_EQ(boards[0].report(2).find("barrier"), std::string::npos);
  }
  EXPECT_FALSE(std::filesystem::exists(dir)) << "the owner leaves " << dir << " behind";
}

// A peer that issued the collective too, but then stopped (kill -STOP inside it) or died: the
// report names it by what this host's kernel says of its process. The peer here is a child
// process (`sleep`) posted as rank 1.
TEST(CommProgress, ReportNamesAPeerThatIsStoppedOrGone) {
  char tmpl[] = "/tmp/fsdp-progress-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  auto slots = comm_internal::directory_slots(tmpl, /*owner=*/true);
  comm_internal::ProgressBoard me(slots, "world", 0, 2), peer(slots, "world", 1, 2);
  EXPECT_EQ(me.post("barrier"), 1u);
  EXPECT_EQ(peer.post("barrier"), 1u);
  EXPECT_EQ(me.report(1), "; ranks that issued this collective (#1): 0, 1");  // it runs
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    execlp("sleep", "sleep", "30", static_cast<char*>(nullptr));
    _exit(127);
  }
  std::string where = slots->get("world/process/1");  // "boot-id pid-namespace pid"
  where = where.substr(0, where.rfind(' ') + 1) + std::to_string(child);
  slots->put("world/process/1", where);
  kill(child, SIGSTOP);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, WUNTRACED), child);
  const std::string pid = "(pid " + std::to_string(child) + ")";
  // Boards read where a peer runs once (it never changes): fresh ones see the child.
  EXPECT_EQ(comm_internal::ProgressBoard(slots, "world", 0, 2).report(1),
            "; ranks that issued this collective (#1): 0, 1; rank 1 " + pid +
                " is stopped (SIGSTOP or SIGTSTP)");
  kill(child, SIGKILL);
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(comm_internal::ProgressBoard(slots, "world", 0, 2).report(1),
            "; ranks that issued this collective (#1): 0, 1; rank 1 " + pid + " has exited");
}

TEST(CommKernels, DtypeSizesAndNames) {
  EXPECT_EQ(dtype_size(DType::kFloat32), 4u);
  EXPECT_EQ(dtype_size(DType::kBFloat16), 2u);
  EXPECT_EQ(dtype_size(DType::kFloat16), 2u);
  EXPECT_EQ(dtype_size(DType::kInt64), 8u);
  EXPECT_STREQ(dtype_name(DType::kBFloat16), "bf16");
  EXPECT_STREQ(dtype_name(DType::kFloat16), "fp16");
}

// Ties round to the even neighbour: in bf16, 1 + 2^-8 lies halfway between 1 and 1 + 2^-7;
// in fp16, 2048 + 1 lies halfway between 2048 and 2050.
TEST(CommKernels, HalfPrecisionSumsRoundToNearestEven) {
  Buffer a(DType::kBFloat16, 2), b(DType::kBFloat16, 2), c(DType::kBFloat16, 2);
  a.set(0, 1.0), a.set(1, 1.0078125);
  b.set(0, 0.00390625), b.set(1, 0.00390625);
  comm_internal::sum(c.data(), a.data(), b.data(), 2, DType::kBFloat16);
  EXPECT_EQ(c.get(0), 1.0);
  EXPECT_EQ(c.get(1), 1.015625);
  Buffer x(DType::kFloat16, 2), y(DType::kFloat16, 2);
  x.set(0, 2048), x.set(1, 2050);
  y.set(0, 1), y.set(1, 1);
  comm_internal::sum(x.data(), x.data(), y.data(), 2, DType::kFloat16);  // in place, as MPI does
  EXPECT_EQ(x.get(0), 2048);
  EXPECT_EQ(x.get(1), 2052);
  Buffer z(DType::kFloat16, 1);
  z.set(0, 65504);  // fp16's largest finite value; doubling overflows to infinity
  comm_internal::sum(z.data(), z.data(), z.data(), 1, DType::kFloat16);
  EXPECT_TRUE(std::isinf(z.get(0)));
}

TEST(CommKernels, AverageDividesInTheElementType) {
  Buffer i(DType::kInt64, 2);
  i.set(0, 7), i.set(1, -7);
  comm_internal::divide(i.data(), 2, DType::kInt64, 2);
  EXPECT_EQ(i.get(0), 3);
  EXPECT_EQ(i.get(1), -3);
  Buffer h(DType::kBFloat16, 1);
  h.set(0, 3);
  comm_internal::divide(h.data(), 1, DType::kBFloat16, 3);
  EXPECT_EQ(h.get(0), 1.0);
}

}  // namespace
}  // namespace fsdp
