// The MPI backend (OpenMPI): every collective is nonblocking, on a communicator of our own: MPI-3's
// own call (all-reduce, broadcast, barrier) or a ring of ours over point-to-point calls
// (all-gather, reduce-scatter: [Note: MPI rings]). A progress thread tests the collectives in
// flight, so that their data moves while the issuing thread computes, and Work::wait, after a
// few polls of its own, sleeps until that thread sees its collective complete or the deadline
// passes ([Note: MPI progress]).
// It also owns the process's MPI lifetime: MPI is initialised on first use, and finalised at exit
// only if we initialised it (a program that brings its own MPI keeps control of it). MPI has no
// bf16/fp16, so those travel as 16-bit words reduced by user-defined ops.

// Only the C API: OpenMPI's deprecated C++ bindings would need libmpi_cxx at link time.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/internal.h"
#include "comm/progress.h"

#if defined(__SANITIZE_ADDRESS__)
// Sanitized builds only: OpenMPI unloads its plugins (mca_*.so) in MPI_Finalize, after which
// LeakSanitizer cannot name the module that allocated what they keep until exit, and
// tests/sanitize/lsan.supp cannot suppress it. This definition takes the place of libc's for the
// whole process (the executable comes first in symbol lookup), so every library stays loaded until
// the process exits, which follows MPI_Finalize anyway.
extern "C" int dlclose(void*) { return 0; }
#endif

namespace fsdp {
namespace comm_internal {
namespace {

using Clock = std::chrono::steady_clock;

std::string mpi_error_string(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(text, len);
}

// Our communicators return error codes (MPI_ERRORS_RETURN) instead of aborting the job, so every
// call is checked and a failure becomes a CommError the caller can report.
void check(int rc, const std::string& what) {
  if (rc != MPI_SUCCESS) throw CommError("fsdp: " + what + " failed: " + mpi_error_string(rc));
}

// MPI_Op callbacks: inout[i] = in[i] + inout[i].
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  sum(inout, in, inout, static_cast<size_t>(*len), DType::kBFloat16);
}
void fp16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  sum(inout, in, inout, static_cast<size_t>(*len), DType::kFloat16);
}

// Collectives whose deadline passed and that have not completed since. MPI cannot cancel them,
// and MPI_Finalize waits for the peers that never joined: a process with one left aborts the job
// at exit instead of hanging there.
std::atomic<int> g_abandoned{0};

// A collective of several rounds, each posted when the one before has completed (the ring
// reduce-scatter). Called under MpiRuntime::mu.
class Rounds {
 public:
  virtual ~Rounds() = default;
  // Once the previous round's requests (none, the first time) have completed: finishes that round
  // and posts the next one's requests into `requests`, or sets `done` when nothing is left to
  // post. `requests` may also stay empty while the collective waits for its turn (a ring behind
  // another). Returns an MPI error code.
  virtual int next(std::vector<MPI_Request>& requests, bool& done) = 0;
};

// A collective's requests, shared by its Work and the progress thread. `requests`, `rounds` and
// `error` are read and written under MpiRuntime::mu only; `complete` is also read outside it.
struct Requests {
  std::vector<MPI_Request> requests;
  std::unique_ptr<Rounds> rounds;  // null: `requests` are the whole collective
  std::atomic<bool> complete{false};
  int error = MPI_SUCCESS;  // what a test returned, if it failed

  // A collective abandoned after its deadline may still have receives posted into scratch its
  // rounds keep alive (a ring's lane): that is leaked rather than handed back to the allocator
  // under MPI's feet.
  ~Requests() {
    if (!complete) (void)rounds.release();
  }

  // Under MpiRuntime::mu: moves the collective on, and notes whether it is done (or failed).
  void test() {
    while (!complete) {
      int flag = 0;
      error = MPI_Testall(static_cast<int>(requests.size()), requests.data(), &flag,
                          MPI_STATUSES_IGNORE);
      if (error != MPI_SUCCESS || !flag) {
        complete = error != MPI_SUCCESS;
        return;
      }
      requests.clear();
      bool done = true;
      if (rounds) error = rounds->next(requests, done);
      complete = error != MPI_SUCCESS || done;
      if (requests.empty()) return;  // done, or waiting for another collective
    }
  }
};

// [Note: MPI progress] OpenMPI advances a nonblocking collective (libnbc's schedule, the TCP and
// shared-memory transfers under it) only inside MPI calls. Without help, a prefetched all-gather
// issued before a unit's compute would move nothing until the wait after it, and prefetch would
// hide no communication. This thread tests every collective in flight about every 100 us (20 us
// while a waiter sleeps), under the mutex that serialises all MPI calls (MPI_THREAD_SERIALIZED),
// and sleeps when none is. A waiter polls a little (a small collective completes within
// microseconds), then sleeps until this thread sees its collective complete, as a Gloo waiter
// sleeps until Gloo's worker is done.
// FSDP_MPI_PROGRESS=0 turns it off (for measuring what it buys: docs/comm.md).
class ProgressThread {
 public:
  static ProgressThread& get() {
    static ProgressThread* thread = new ProgressThread();  // leaked, as MpiRuntime
    return *thread;
  }
  static bool enabled() {
    static const bool on = [] {
      const char* v = std::getenv("FSDP_MPI_PROGRESS");
      return v == nullptr || std::strcmp(v, "0") != 0;
    }();
    return on;
  }
  void add(const std::shared_ptr<Requests>& r) {
    std::lock_guard<std::mutex> lock(list_mu_);
    if (stopping_) return;
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    live_.push_back(r);
    cv_.notify_one();
  }
  // Blocks until `r` completes, as seen by this thread's tests, or until `until`. A waiter that
  // polled instead (every 20 us, taking the MPI mutex and polling every transport) kept its CPU
  // busy the whole wait: where training threads share a CPU, that was the peer's compute time.
  void await(const Requests& r, Clock::time_point until) {
    std::unique_lock<std::mutex> lock(done_mu_);
    ++waiters_;
    done_cv_.wait_until(lock, until, [&] { return r.complete.load(); });
    --waiters_;
  }
  // Before MPI_Finalize: no MPI call may follow it.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(list_mu_);
      stopping_ = true;
      cv_.notify_one();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  void run();

  std::mutex list_mu_;
  std::condition_variable cv_;
  std::vector<std::weak_ptr<Requests>> live_;
  bool stopping_ = false;
  std::thread thread_;
  std::mutex done_mu_;  // orders a completion's notice after a waiter's check of it
  std::condition_variable done_cv_;
  std::atomic<int> waiters_{0};  // threads asleep in await()
};

// Finalises MPI when static objects are destroyed at exit, if init() initialised it.
struct FinalizeAtExit {
  bool ours = false;
  ~FinalizeAtExit() {
    ProgressThread::get().stop();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!ours || finalized) return;
    if (g_abandoned.load() > 0) {
      std::fprintf(stderr,
                   "fsdp: %d collective(s) timed out and never completed; aborting the MPI job "
                   "(MPI_Finalize would wait forever for the missing ranks)\n",
                   g_abandoned.load());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int size = 1, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (local_error_pending() && size > 1) {
      std::fprintf(stderr,
                   "fsdp: rank %d is ending after an error its peers may not have seen (no "
                   "collective completed since); aborting the MPI job rather than waiting in "
                   "MPI_Finalize for peers that may be inside a collective it left\n",
                   rank);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Finalize();
  }
};

// Process-wide MPI state. Deliberately leaked: communicators held by other static objects may be
// destroyed after this file's statics, and must still find the mutex alive.
class MpiRuntime {
 public:
  static MpiRuntime& get() {
    static MpiRuntime* runtime = new MpiRuntime();
    return *runtime;
  }

  // Serialises every MPI call: MPI_THREAD_SERIALIZED is all we ask for, and a Work may be waited
  // on from a thread other than the one that issued it.
  std::mutex mu;

  MPI_Datatype type(DType dtype) const {
    switch (dtype) {
      case DType::kFloat32:
        return MPI_FLOAT;
      case DType::kInt64:
        return MPI_INT64_T;
      case DType::kBFloat16:
      case DType::kFloat16:
        return MPI_UINT16_T;
    }
    throw CommError("fsdp: unknown DType");
  }

  MPI_Op sum_op(DType dtype) const {
    if (dtype == DType::kBFloat16) return bf16_sum_;
    if (dtype == DType::kFloat16) return fp16_sum_;
    return MPI_SUM;
  }

 private:
  MpiRuntime() {
    static FinalizeAtExit finalize;
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
      finalize.ours = true;
    }
    check(MPI_Op_create(&bf16_sum, 1, &bf16_sum_), "MPI_Op_create(bf16 sum)");
    check(MPI_Op_create(&fp16_sum, 1, &fp16_sum_), "MPI_Op_create(fp16 sum)");
  }

  MPI_Op bf16_sum_ = MPI_OP_NULL;
  MPI_Op fp16_sum_ = MPI_OP_NULL;
};

void ProgressThread::run() {
  std::vector<std::shared_ptr<Requests>> batch;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(list_mu_);
      cv_.wait(lock, [&] { return stopping_ || !live_.empty(); });
      if (stopping_) return;
      batch.clear();
      for (const auto& weak : live_) {
        if (auto r = weak.lock()) batch.push_back(std::move(r));
      }
    }
    bool pending = false, completed = false;
    {
      std::lock_guard<std::mutex> lock(MpiRuntime::get().mu);
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (finalized) return;  // a program that brought its own MPI ended it
      for (const auto& r : batch) {
        const bool was = r->complete;
        r->test();
        pending = pending || !r->complete;
        completed = completed || (!was && r->complete);
      }
    }
    if (completed) {
      { std::lock_guard<std::mutex> lock(done_mu_); }
      done_cv_.notify_all();
    }
    {
      std::lock_guard<std::mutex> lock(list_mu_);
      // Completed and abandoned-then-destroyed collectives leave the list.
      live_.erase(std::remove_if(live_.begin(), live_.end(),
                                 [](const std::weak_ptr<Requests>& weak) {
                                   auto r = weak.lock();
                                   return !r || r->complete;
                                 }),
                  live_.end());
    }
    batch.clear();
    // While a thread sleeps in await(), this one tests as often as that thread polled before it
    // slept (every 20 us; 100 us apart a collective's data moves in fewer, later pieces).
    if (pending) std::this_thread::sleep_for(std::chrono::microseconds(waiters_ > 0 ? 20 : 100));
  }
}

// One collective in flight: the requests it was split into, and what to do once all complete
// (dividing for an average). A deadline that passes leaves the requests pending: MPI cannot
// cancel a collective, but a later wait may still see it complete if the peers catch up.
class MpiWork : public Work {
 public:
  // `diagnose`, if given, tells on a timeout what the other ranks last issued (see ProgressBoard).
  MpiWork(std::shared_ptr<Requests> requests, std::function<void()> finish, std::string what,
          std::chrono::milliseconds timeout, std::function<std::string()> diagnose)
      : requests_(std::move(requests)),
        finish_(std::move(finish)),
        what_(std::move(what)),
        timeout_(timeout),
        diagnose_(std::move(diagnose)) {
    if (ProgressThread::enabled()) ProgressThread::get().add(requests_);
  }

  void wait() override {
    if (!error_.empty()) throw CommError(error_);
    if (done_) return;
    const auto deadline = Clock::now() + timeout_;
    for (int polls = 0; !test(); ++polls) {
      const auto now = Clock::now();
      if (now >= deadline) {
        if (!abandoned_) ++g_abandoned;
        abandoned_ = true;
        throw CommError(timeout_error(what_, timeout_).what() + (diagnose_ ? diagnose_() : ""));
      }
      if (polls >= kEagerPolls && ProgressThread::enabled()) {
        // Tested again every 10 ms all the same: a wait is also what moves the rings on.
        ProgressThread::get().await(*requests_, std::min(deadline, now + kRecheck));
      } else {
        back_off(polls);
      }
    }
    if (abandoned_) --g_abandoned;  // the peers caught up after all
    abandoned_ = false;
    clear_local_error();
    if (finish_) finish_();
    done_ = true;
  }

 private:
  bool test() {
    bool complete;
    int rc;
    {
      std::lock_guard<std::mutex> lock(MpiRuntime::get().mu);
      requests_->test();
      complete = requests_->complete;
      rc = requests_->error;
    }
    if (rc != MPI_SUCCESS) {
      error_ = "fsdp: " + what_ + " failed: " + mpi_error_string(rc);
      throw CommError(error_);
    }
    return complete;
  }

  // OpenMPI progresses nonblocking collectives only inside MPI calls, so poll eagerly at first;
  // then sleep a little, because ranks often share cores and a spinning waiter starves its peers.
  static constexpr int kEagerPolls = 100;
  static constexpr std::chrono::milliseconds kRecheck{10};
  static void back_off(int polls) {
    if (polls < kEagerPolls) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(polls < 2000 ? 20 : 200));
    }
  }

  std::shared_ptr<Requests> requests_;
  std::function<void()> finish_;
  std::string what_;
  std::chrono::milliseconds timeout_;
  std::function<std::string()> diagnose_;
  bool done_ = false;
  bool abandoned_ = false;  // counted in g_abandoned
  std::string error_;
};

// Calls `issue(offset, n)` for consecutive pieces of [0, count) no longer than the per-call limit.
template <typename F>
void in_pieces(size_t count, F issue) {
  const size_t limit = std::max<size_t>(1, mpi_max_elements_per_call());
  for (size_t offset = 0; offset < count; offset += limit) {
    issue(offset, std::min(limit, count - offset));
  }
}

char* at(void* base, size_t elements, DType dtype) {
  return static_cast<char*>(base) + elements * dtype_size(dtype);
}
const char* at(const void* base, size_t elements, DType dtype) {
  return static_cast<const char*>(base) + elements * dtype_size(dtype);
}

// [Note: MPI rings] The all-gather and the reduce-scatter are rings of our own over MPI's
// point-to-point calls, as Gloo's are ([Note: Gloo reduce-scatter], [Note: Gloo all-gather]).
// OpenMPI's nonblocking reduce-scatter (libnbc's MPI_Ireduce_scatter_block) reduces the whole
// buffer to rank 0 along a binomial tree and then scatters it: on 2 ranks three times the bytes a
// ring moves over the link. Its all-gather posts each receive before the matching send, which
// over TCP loses up to a link's queue of time whenever the ranks start it apart: see the
// handshake below. In step s of N - 1, rank r sends to r + 1 and receives from r - 1:
//  - all-gather: sends chunk (r - s) mod N of `out` (its own input first) and receives chunk
//    (r - s - 1) mod N straight into `out`;
//  - reduce-scatter: sends its running sum of chunk (r - s - 1) mod N and receives that of chunk
//    (r - s - 2) mod N into scratch, adding its own input's chunk; the last chunk received is its
//    own, summed over every rank, added into `out`.
// A step is one round of Rounds, posted when the one before completes, its sum done by whichever
// thread sees that (the progress thread, or a waiter).
//
// A communicator has two lanes, one per kind: a lane runs its rings one at a time, in issue order.
// Every rank issues them in the same order, so every rank runs the same ring, and one pair of
// scratch chunks (alternating: one sent while the other receives) serves all the reduce-scatters,
// as Gloo's worker does. Gathers have a lane of their own so that a prefetched gather is not queued
// behind the reductions (it was, in a first version with one lane: FSDP's prefetch got slower).
// One tag serves each lane: MPI matches messages from one sender in the order they were sent, and
// each rank posts its receives in step order. Testing any ring moves every lane of the process on,
// so that a wait completes whatever order the waits come in, with no progress thread too.
//
// The handshake: a message past the eager limit (64 KiB over OpenMPI's TCP transport) starts with
// a request to send, which the receiver answers, once it has the matching receive posted, with a
// clear to send that travels on the same connection as the receiver's own outgoing data. A rank
// that posted its receive first, and found the peer's request already there, answers before its
// own request goes out; the peer then starts streaming its data, and only after that reads our
// request, so its answer waits behind its data: on 2 ranks (where the peer we send to is the peer
// we receive from) our data then started up to a full socket buffer later (up to 50 ms on
// a 70 ms exchange at 1 Gbit/s, measured). Posting the sends first puts our request ahead of our
// answer on the wire, and the peer answers it before it has any data to send.
constexpr int kReduceScatterTag = 0x40, kAllGatherTag = 0x41;

struct Ring {
  bool gather;  // else a reduce-scatter
  const char* in;
  char* out;
  size_t count;  // elements per chunk: each rank's share
  DType dtype;
  int step = -1;  // the step whose requests are out; -1 before the first
  bool done = false;
  int error = MPI_SUCCESS;
};

class RingLane {
 public:
  RingLane(MPI_Comm comm, int rank, int size, int tag)
      : comm_(comm), rank_(rank), size_(size), tag_(tag) {}

  // Under MpiRuntime::mu.
  void enqueue(std::shared_ptr<Ring> ring) { queue_.push_back(std::move(ring)); }
  bool idle() const { return queue_.empty(); }

  // Under MpiRuntime::mu: moves the ring at the head on, starting the next when it is done. An
  // error ends the head ring, where its own Work reports it.
  void advance() {
    while (!queue_.empty()) {
      int flag = 0;
      const int rc = MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &flag,
                                 MPI_STATUSES_IGNORE);
      if (rc == MPI_SUCCESS && !flag) return;
      requests_.clear();
      Ring& ring = *queue_.front();
      ring.error = rc == MPI_SUCCESS ? (ring.gather ? gather_step(ring) : reduce_step(ring)) : rc;
      if (ring.error != MPI_SUCCESS) ring.done = true;
      if (!ring.done) return;
      queue_.pop_front();
    }
  }

 private:
  // Where chunk i (mod N) of a buffer of N chunks starts, in elements.
  size_t chunk(const Ring& ring, int i) const {
    return static_cast<size_t>(((i % size_) + size_) % size_) * ring.count;
  }

  // Finishes `ring`'s current step and posts the next one, or marks it done. The first step
  // sends the rank's own chunk straight from `in`, and its copy into `out` waits for that step to
  // complete: the thread that issues the gather (under FSDP, the compute's) copies nothing.
  int gather_step(Ring& ring) {
    if (ring.step == 0) {
      char* own = at(ring.out, chunk(ring, rank_), ring.dtype);
      if (own != ring.in) std::memmove(own, ring.in, ring.count * dtype_size(ring.dtype));
    }
    if (ring.step + 2 == size_) {
      ring.done = true;
      return MPI_SUCCESS;
    }
    ++ring.step;
    const char* send =
        ring.step == 0 ? ring.in : at(ring.out, chunk(ring, rank_ - ring.step), ring.dtype);
    return post(send, at(ring.out, chunk(ring, rank_ - ring.step - 1), ring.dtype), ring);
  }

  int reduce_step(Ring& ring) {
    const size_t bytes = ring.count * dtype_size(ring.dtype);
    const char* send = at(ring.in, chunk(ring, rank_ - 1), ring.dtype);
    if (ring.step < 0) {
      if (scratch_.size() < 2 * bytes) scratch_.resize(2 * bytes);
    } else {
      char* received = scratch_.data() + (ring.step % 2) * bytes;
      const bool last = ring.step + 2 == size_;
      sum(last ? ring.out : received, received,
          at(ring.in, chunk(ring, rank_ - ring.step - 2), ring.dtype), ring.count, ring.dtype);
      if (last) {
        ring.done = true;
        return MPI_SUCCESS;
      }
      send = received;
    }
    ++ring.step;
    return post(send, scratch_.data() + (ring.step % 2) * bytes, ring);
  }

  // One step's messages, the sends first (the handshake, in the note above), each in pieces no
  // longer than an int count.
  int post(const char* send, char* receive, const Ring& ring) {
    const MPI_Datatype type = MpiRuntime::get().type(ring.dtype);
    int rc = MPI_SUCCESS;
    in_pieces(ring.count, [&](size_t offset, size_t n) {
      if (rc != MPI_SUCCESS) return;
      requests_.emplace_back(MPI_REQUEST_NULL);
      rc = MPI_Isend(at(send, offset, ring.dtype), static_cast<int>(n), type, (rank_ + 1) % size_,
                     tag_, comm_, &requests_.back());
    });
    in_pieces(ring.count, [&](size_t offset, size_t n) {
      if (rc != MPI_SUCCESS) return;
      requests_.emplace_back(MPI_REQUEST_NULL);
      rc = MPI_Irecv(at(receive, offset, ring.dtype), static_cast<int>(n), type,
                     (rank_ + size_ - 1) % size_, tag_, comm_, &requests_.back());
    });
    return rc;
  }

  MPI_Comm comm_;
  int rank_, size_, tag_;
  std::deque<std::shared_ptr<Ring>> queue_;  // the head is running
  std::vector<MPI_Request> requests_;        // the head's current step
  std::vector<char> scratch_;                // reduce-scatters only
};

// Every lane of the process, under MpiRuntime::mu; a communicator's go when it is destroyed.
std::vector<std::weak_ptr<RingLane>>& all_lanes() {
  static auto* lanes = new std::vector<std::weak_ptr<RingLane>>();  // leaked, as MpiRuntime
  return *lanes;
}

std::shared_ptr<RingLane> new_lane(MPI_Comm comm, int rank, int size, int tag) {
  auto lane = std::make_shared<RingLane>(comm, rank, size, tag);
  auto& lanes = all_lanes();
  lanes.erase(std::remove_if(lanes.begin(), lanes.end(),
                             [](const std::weak_ptr<RingLane>& l) { return l.expired(); }),
              lanes.end());
  lanes.push_back(lane);
  return lane;
}

// One ring's part in its Requests: every test moves every lane on, until the ring is done. It
// keeps its lane alive: an abandoned ring's receives may still be posted into the lane's scratch.
class RingRounds : public Rounds {
 public:
  RingRounds(std::shared_ptr<RingLane> lane, std::shared_ptr<Ring> ring)
      : lane_(std::move(lane)), ring_(std::move(ring)) {}
  int next(std::vector<MPI_Request>&, bool& done) override {
    for (const auto& weak : all_lanes()) {
      if (auto lane = weak.lock()) lane->advance();
    }
    done = ring_->done;
    return ring_->error;
  }

 private:
  std::shared_ptr<RingLane> lane_;
  std::shared_ptr<Ring> ring_;
};

class MpiComm : public Comm {
 public:
  // Takes ownership of `comm`. `board` may be null: no side channel reaches every rank.
  MpiComm(MPI_Comm comm, std::shared_ptr<ProgressBoard> board)
      : comm_(comm), board_(std::move(board)) {
    std::lock_guard<std::mutex> lock(MpiRuntime::get().mu);
    check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    gathers_ = new_lane(comm_, rank_, size_, kAllGatherTag);
    reductions_ = new_lane(comm_, rank_, size_, kReduceScatterTag);
  }

  ~MpiComm() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;  // destroyed by a static after MPI_Finalize: nothing left to free
    std::lock_guard<std::mutex> lock(MpiRuntime::get().mu);
    MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  bool progresses_in_background() const override { return ProgressThread::enabled(); }

  // Both rings ([Note: MPI rings]).
  WorkPtr all_gather_async(const void* in, void* out, size_t count, DType dtype) override {
    const std::string what = describe(*this, "all_gather", count, dtype);
    return ring(true, in, out, count, dtype, nullptr, what);
  }

  WorkPtr reduce_scatter_async(const void* in, void* out, size_t count, DType dtype,
                               ReduceOp op) override {
    const std::string what =
        describe(*this, std::string("reduce_scatter(") + op_name(op) + ")", count, dtype);
    return ring(false, in, out, count, dtype, averager(out, count, dtype, op), what);
  }

  WorkPtr all_reduce_async(void* data, size_t count, DType dtype, ReduceOp op) override {
    const std::string what =
        describe(*this, std::string("all_reduce(") + op_name(op) + ")", count, dtype);
    const MPI_Datatype type = MpiRuntime::get().type(dtype);
    const MPI_Op sum = MpiRuntime::get().sum_op(dtype);
    std::vector<MPI_Request> requests;
    in_pieces(count, [&](size_t offset, size_t n) {
      void* piece = at(data, offset, dtype);
      issue(requests, what, [&](MPI_Request* r) {
        return MPI_Iallreduce(MPI_IN_PLACE, piece, static_cast<int>(n), type, sum, comm_, r);
      });
    });
    return finish(std::move(requests), averager(data, count, dtype, op), what);
  }

  WorkPtr broadcast_async(void* data, size_t count, DType dtype, int root) override {
    const std::string what =
        describe(*this, "broadcast(root " + std::to_string(root) + ")", count, dtype);
    if (root < 0 || root >= size_) throw CommError("fsdp: bad root in " + what);
    const MPI_Datatype type = MpiRuntime::get().type(dtype);
    std::vector<MPI_Request> requests;
    in_pieces(count, [&](size_t offset, size_t n) {
      void* piece = at(data, offset, dtype);
      issue(requests, what, [&](MPI_Request* r) {
        return MPI_Ibcast(piece, static_cast<int>(n), type, root, comm_, r);
      });
    });
    return finish(std::move(requests), nullptr, what);
  }

  void barrier() override {
    const std::string what = describe(*this, "barrier");
    std::vector<MPI_Request> requests;
    issue(requests, what, [&](MPI_Request* r) { return MPI_Ibarrier(comm_, r); });
    finish(std::move(requests), nullptr, what)->wait();
  }

  std::shared_ptr<Comm> split(int color, int key) override {
    if (color < 0) throw CommError("fsdp: split color must be >= 0, got " + std::to_string(color));
    // MPI_Comm_split blocks without a deadline; gathering the colors first, under one, makes
    // sure every rank has arrived before we enter it.
    std::vector<int64_t> mine = {color, key};
    std::vector<int64_t> all(2 * size_);
    all_gather(mine.data(), all.data(), 2, DType::kInt64);
    MPI_Comm child;
    {
      std::lock_guard<std::mutex> lock(MpiRuntime::get().mu);
      check(MPI_Comm_split(comm_, color, key, &child), "MPI_Comm_split");
    }
    const std::string name = "split" + std::to_string(splits_++) + "/color" + std::to_string(color);
    auto comm = std::make_shared<MpiComm>(child, nullptr);
    if (board_) comm->board_ = board_->subgroup(name, comm->rank(), comm->size());
    comm->set_timeout(timeout());
    return comm;
  }

 private:
  template <typename F>
  void issue(std::vector<MPI_Request>& requests, const std::string& what, F call) {
    MPI_Request request = MPI_REQUEST_NULL;
    int rc;
    {
      std::lock_guard<std::mutex> lock(MpiRuntime::get().mu);
      rc = call(&request);
    }
    if (rc != MPI_SUCCESS) {
      throw CommError("fsdp: issuing " + what + " failed: " + mpi_error_string(rc));
    }
    requests.push_back(request);
  }

  // An all-gather (`gather`) or a reduce-scatter of `count` elements a rank, queued on its lane.
  WorkPtr ring(bool gather, const void* in, void* out, size_t count, DType dtype,
               std::function<void()> done, const std::string& what) {
    const size_t bytes = count * dtype_size(dtype);
    if (size_ == 1 || bytes == 0) {  // every rank has the same count: all return here, or none
      if (out != in) std::memmove(out, in, bytes);
      return finish(std::vector<MPI_Request>{}, std::move(done), what);
    }
    auto ring = std::make_shared<Ring>();
    ring->gather = gather;
    ring->in = static_cast<const char*>(in);
    ring->out = static_cast<char*>(out);
    ring->count = count;
    ring->dtype = dtype;
    const auto& lane = gather ? gathers_ : reductions_;
    auto requests = std::make_shared<Requests>();
    requests->rounds = std::make_unique<RingRounds>(lane, ring);
    {
      std::lock_guard<std::mutex> lock(MpiRuntime::get().mu);
      // Posts its first step where the lane is idle, and nothing else: a completed step of the
      // ring ahead would have its sum or copy done here, on the thread that issues (under FSDP,
      // the compute's; 1-3 ms a collective measured); the progress thread or a wait moves it on.
      const bool idle = lane->idle();
      lane->enqueue(ring);
      if (idle) lane->advance();
    }
    return finish(std::move(requests), std::move(done), what);
  }

  // Posts the collective on the board before waiting can start, so that peers that time out
  // see this rank got here.
  WorkPtr finish(std::vector<MPI_Request> requests, std::function<void()> done,
                 const std::string& what) {
    auto collective = std::make_shared<Requests>();
    collective->requests = std::move(requests);
    return finish(std::move(collective), std::move(done), what);
  }
  WorkPtr finish(std::shared_ptr<Requests> requests, std::function<void()> done,
                 const std::string& what) {
    std::function<std::string()> diagnose;
    if (board_ && size_ > 1) {
      diagnose = ProgressBoard::post_and_diagnose(board_, what);
    } else if (size_ > 1) {
      diagnose = [] {
        return std::string(
            "; which ranks reached it is unknown: the ranks span several hosts "
            "and MPI gives them no shared side channel");
      };
    }
    return std::make_shared<MpiWork>(std::move(requests), std::move(done), what, timeout(),
                                     std::move(diagnose));
  }

  std::function<void()> averager(void* data, size_t count, DType dtype, ReduceOp op) const {
    if (op != ReduceOp::kAvg) return nullptr;
    const int n = size_;
    return [data, count, dtype, n] { divide(data, count, dtype, n); };
  }

  MPI_Comm comm_;
  std::shared_ptr<ProgressBoard> board_;
  int rank_ = 0;
  int size_ = 1;
  int splits_ = 0;
  std::shared_ptr<RingLane> gathers_, reductions_;  // this communicator's rings, by kind
};

// Where the world's progress board lives: fsdp-run's run directory; else, when every rank runs on
// this host, a directory rank 0 makes under /tmp and removes when the job's comms are gone. Ranks
// on several hosts under a bare mpirun share no place to post, so they get no board.
// `group` tells apart the worlds of several init_comm calls in one job.
std::shared_ptr<ProgressBoard> world_board(MPI_Comm world, const std::string& run_dir,
                                           const std::string& group) {
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  if (!run_dir.empty()) {
    return std::make_shared<ProgressBoard>(directory_slots(run_dir + "/progress", false), group,
                                           rank, size);
  }
  int host_size = 0;
  {
    std::lock_guard<std::mutex> lock(MpiRuntime::get().mu);
    MPI_Comm host;
    check(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host),
          "MPI_Comm_split_type");
    MPI_Comm_size(host, &host_size);
    MPI_Comm_free(&host);
  }
  if (host_size != size) return nullptr;
  char dir[256] = {};
  if (rank == 0) {
    std::snprintf(dir, sizeof(dir), "%s/fsdp-mpi-XXXXXX", P_tmpdir);
    if (mkdtemp(dir) == nullptr) dir[0] = '\0';  // no board, but the job runs
  }
  {
    std::lock_guard<std::mutex> lock(MpiRuntime::get().mu);
    check(MPI_Bcast(dir, sizeof(dir), MPI_CHAR, 0, world), "MPI_Bcast(progress directory)");
  }
  if (dir[0] == '\0') return nullptr;
  return std::make_shared<ProgressBoard>(directory_slots(dir, rank == 0), group, rank, size);
}

}  // namespace

bool mpi_built() { return true; }

CommPtr make_mpi_comm(const MpiSetup& setup) {
  MpiRuntime& runtime = MpiRuntime::get();
  MPI_Comm world;
  {
    // Our own communicator, so that a program's MPI traffic never matches ours.
    std::lock_guard<std::mutex> lock(runtime.mu);
    check(MPI_Comm_dup(MPI_COMM_WORLD, &world), "MPI_Comm_dup(MPI_COMM_WORLD)");
  }
  // Counted like Gloo's inits: every rank calls init_comm the same number of times.
  static int inits = 0;
  const std::string group = "mpi/init" + std::to_string(inits++);
  auto comm = std::make_shared<MpiComm>(world, world_board(world, setup.run_dir, group));
  comm->set_timeout(setup.timeout);
  if (setup.expected_size > 0 && comm->size() != setup.expected_size) {
    throw CommError("fsdp: MPI reports " + std::to_string(comm->size()) +
                    " ranks but the launcher's environment says " +
                    std::to_string(setup.expected_size) +
                    " (was the program started without mpirun?)");
  }
  return comm;
}

}  // namespace comm_internal
}  // namespace fsdp
