// The Gloo backend: the Gloo library over TCP, with rendezvous through a c10d::TCPStore that rank 0
// serves at MASTER_ADDR:MASTER_PORT, or, for a one-host job under fsdp-run, a c10d::FileStore in
// the run's private directory (nothing listens but Gloo's own loopback sockets). Gloo's collectives
// block the calling thread, so each Comm runs them, in issue order, on a worker thread of its own;
// the *_async calls queue a task and return a Work that waits for it with the comm's deadline. Gloo
// has no reduce-scatter that fits (contiguous chunks, any count), so reduce_scatter is a ring of
// our own over Gloo's point-to-point buffers ([Note: Gloo reduce-scatter]), and all_gather one too,
// to post its receives first ([Note: Gloo all-gather]). Gloo's own per-operation timer starts when
// the worker begins a collective, which for a prefetch is before anyone waits on it: its timeout is
// reported like ours, with what the progress board says about the other ranks.
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "comm/internal.h"
#include "comm/progress.h"
#include "comm/store.h"
#include "compat.h"

namespace fsdp {
namespace comm_internal {
namespace {

using Clock = std::chrono::steady_clock;

// Gloo's rendezvous reads and writes through its own Store interface; this forwards it to a c10d
// store (the adapter c10d's ProcessGroupGloo uses too).
class StoreAdapter : public gloo::rendezvous::Store {
 public:
  explicit StoreAdapter(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(key, std::vector<uint8_t>(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    std::vector<uint8_t> value = store_->get(key);
    return std::vector<char>(value.begin(), value.end());
  }
  void wait(const std::vector<std::string>& keys) override { store_->wait(keys); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    store_->wait(keys, timeout);
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

// The address peers reach this rank at: the interface named by GLOO_SOCKET_IFNAME if given,
// loopback when the whole job is on this host (a run directory, or MASTER_ADDR is loopback), else
// our hostname.
std::shared_ptr<gloo::transport::Device> make_device(const GlooSetup& setup) {
  gloo::transport::tcp::attr attr;
  if (!setup.iface.empty()) {
    attr.iface = setup.iface;
  } else if (!setup.run_dir.empty() || is_loopback(setup.master_addr)) {
    attr.hostname = "127.0.0.1";
  } else {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    attr.hostname = name;
  }
  return gloo::transport::tcp::CreateDevice(attr);
}

std::shared_ptr<gloo::Context> connect(gloo::rendezvous::Store& store, const std::string& prefix,
                                       int rank, int size,
                                       std::shared_ptr<gloo::transport::Device> device,
                                       std::chrono::milliseconds timeout) {
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(timeout);
  compat::connect_full_mesh<gloo::rendezvous::PrefixStore>(*context, prefix, store, device);
  return context;
}

// Completion of one queued collective, shared by the worker and the Work handed to the caller.
struct TaskState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::string error;  // empty on success
  std::string what;   // describe() at issue time
  // On a timeout: what the other ranks of the group last posted (see ProgressBoard).
  std::function<std::string()> diagnose;
  bool timed_out = false;  // Gloo's own timer fired: `error` reads as our timeout
  // For a task that was not run: the one whose failure broke the group.
  std::shared_ptr<TaskState> cause;

  void finish(std::string message) {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
      error = std::move(message);
    }
    cv.notify_all();
  }
};

class GlooWork : public Work {
 public:
  GlooWork(std::shared_ptr<TaskState> state, std::chrono::milliseconds timeout)
      : state_(std::move(state)), timeout_(timeout) {}

  void wait() override {
    std::unique_lock<std::mutex> lock(state_->mu);
    if (!state_->cv.wait_for(lock, timeout_, [&] { return state_->done; })) {
      lock.unlock();
      const std::string peers = state_->diagnose ? state_->diagnose() : std::string();
      throw CommError(timeout_error(state_->what, timeout_).what() + peers);
    }
    if (!state_->error.empty()) throw CommError(state_->error + peers_of_timeout());
  }

 private:
  // A timeout that Gloo's timer found (a prefetched collective, issued long before its wait), or
  // the one that broke the group before this task ran, names the missing ranks like ours does.
  std::string peers_of_timeout() const {
    const TaskState* t = state_->timed_out ? state_.get() : state_->cause.get();
    return t && t->timed_out && t->diagnose ? t->diagnose() : std::string();
  }

  std::shared_ptr<TaskState> state_;
  std::chrono::milliseconds timeout_;
};

// Runs queued collectives one at a time, in the order they were issued. After a Gloo failure the
// group's connections are in an unknown state, so later tasks fail at once instead of hanging.
class Worker {
 public:
  Worker() : thread_([this] { loop(); }) {}

  // Runs what is still queued (peers expect those collectives), then stops.
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  void post(std::shared_ptr<TaskState> state, std::chrono::milliseconds timeout,
            std::function<void()> run) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back({std::move(state), timeout, std::move(run)});
    }
    cv_.notify_all();
  }

 private:
  struct Task {
    std::shared_ptr<TaskState> state;
    std::chrono::milliseconds timeout{0};  // what Gloo was told
    std::function<void()> run;
  };

  void loop() {
    for (;;) {
      Task task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task.state->finish(run(task));
    }
  }

  std::string run(Task& task) {
    if (!failure_.empty()) {
      task.state->cause = failed_;
      return "fsdp: " + task.state->what + " was not run: the group failed earlier: " + failure_;
    }
    try {
      task.run();
      return "";
    } catch (const std::exception& e) {
      failed_ = task.state;
      if (is_timeout(e)) {
        task.state->timed_out = true;
        const std::string message = timeout_error(task.state->what, task.timeout).what();
        failure_ = message.substr(std::strlen("fsdp: "));
        return message;
      }
      failure_ = task.state->what + ": " + e.what();
      return "fsdp: " + task.state->what + " failed: " + e.what();
    }
  }

  // Gloo's IoException for an operation that outlived its timeout ("Timed out waiting 2000ms for
  // recv operation to complete").
  static bool is_timeout(const std::exception& e) {
    return std::strstr(e.what(), "Timed out") != nullptr;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::string failure_;                // touched by the worker thread only
  std::shared_ptr<TaskState> failed_;  // the task that failed first; worker thread only
  std::thread thread_;                 // last: starts after the members above exist
};

// Storage type Gloo sees for each DType; the reduce function does the arithmetic.
template <typename F>
void with_storage(DType dtype, F f) {
  switch (dtype) {
    case DType::kFloat32:
      return f(float{});
    case DType::kInt64:
      return f(int64_t{});
    case DType::kBFloat16:
    case DType::kFloat16:
      return f(uint16_t{});
  }
}

// Gloo's own collectives use slot prefixes 0x01 to 0x08 (gloo/types.h).
constexpr uint8_t kRingReduceScatterSlotPrefix = 0x40;
constexpr uint8_t kRingAllGatherSlotPrefix = 0x41;

// [Note: Gloo all-gather] gloo::allgather is a ring that posts each step's send before its
// receive, and got 77% of a shaped 1 Gbit/s link between 2 hosts (fsdp-bench-comm; 85% at
// 10 Gbit/s), the only collective short of the link's rate, which the time model does not price.
// This ring posts the receive first, as the reduce-scatter below does: in step s of N - 1, rank
// r sends to r + 1 chunk (r - s) mod N of `out` (its own first, then the one it received last)
// and receives from r - 1 chunk (r - s - 1) mod N in place.
void ring_all_gather(gloo::Context& ctx, const char* in, char* out, size_t bytes,
                     std::chrono::milliseconds timeout) {
  const int n = ctx.size, r = ctx.rank;
  std::memcpy(out + static_cast<size_t>(r) * bytes, in, bytes);
  if (n == 1 || bytes == 0) return;  // every rank has the same count: all return here, or none
  const auto chunk = [&](int i) { return static_cast<size_t>(((i % n) + n) % n) * bytes; };
  const uint64_t slot = gloo::Slot::build(kRingAllGatherSlotPrefix, 0);
  auto buffer = ctx.createUnboundBuffer(out, bytes * n);
  for (int step = 0; step + 1 < n; ++step) {
    buffer->recv((r + n - 1) % n, slot, chunk(r - step - 1), bytes);
    buffer->send((r + 1) % n, slot, chunk(r - step), bytes);
    if (!buffer->waitRecv(timeout)) throw CommError("all_gather's receive was aborted");
    if (!buffer->waitSend(timeout)) throw CommError("all_gather's send was aborted");
  }
}

// [Note: Gloo reduce-scatter] Gloo has no reduce-scatter of equal contiguous chunks of any
// length, so this is a ring over its own point-to-point buffers (what its ring all-reduce does in
// its first half). In step s of N - 1, rank r sends to r + 1 its running sum of chunk
// (r - s - 1) mod N (in the first step, its input's chunk) and receives from r - 1 that of chunk
// (r - s - 2) mod N, adding its own input's chunk; the last chunk received is its own, summed
// over every rank, and is added straight into `out`. Each rank sends and receives (N - 1) / N of
// the input once, half of what an all-reduce moves. Two scratch chunks alternate, one being sent
// while the other receives. The sum follows the ring: chunk r adds rank r + 1's first and its own
// last, the same order every step.
void ring_reduce_scatter(gloo::Context& ctx, const char* in, char* out, size_t count, DType dtype,
                         std::vector<char>& scratch, std::chrono::milliseconds timeout) {
  const int n = ctx.size, r = ctx.rank;
  const size_t bytes = count * dtype_size(dtype);
  if (n == 1 || bytes == 0) {  // every rank has the same count: all return here, or none
    if (out != in) std::memcpy(out, in, bytes);
    return;
  }
  if (scratch.size() < 2 * bytes) scratch.resize(2 * bytes);
  const auto chunk = [&](int i) { return static_cast<size_t>(((i % n) + n) % n) * bytes; };
  const uint64_t slot = gloo::Slot::build(kRingReduceScatterSlotPrefix, 0);
  auto input = ctx.createUnboundBuffer(const_cast<char*>(in), bytes * n);
  std::unique_ptr<gloo::transport::UnboundBuffer> partial[2] = {
      ctx.createUnboundBuffer(scratch.data(), bytes),
      ctx.createUnboundBuffer(scratch.data() + bytes, bytes)};
  gloo::transport::UnboundBuffer* sending = input.get();
  size_t send_offset = chunk(r - 1);
  for (int step = 0; step + 1 < n; ++step) {
    gloo::transport::UnboundBuffer& receiving = *partial[step % 2];
    // The receive first: posted after the send, both ranks' sends waited for each other's
    // receive and a 2-rank ring took as long as an all-reduce on a shaped link.
    receiving.recv((r + n - 1) % n, slot, 0, bytes);
    sending->send((r + 1) % n, slot, send_offset, bytes);
    if (!receiving.waitRecv(timeout)) throw CommError("reduce_scatter's receive was aborted");
    char* sum_to = step + 2 == n ? out : static_cast<char*>(receiving.ptr);
    sum(sum_to, receiving.ptr, in + chunk(r - step - 2), count, dtype);
    if (!sending->waitSend(timeout)) throw CommError("reduce_scatter's send was aborted");
    sending = &receiving;
    send_offset = 0;
  }
}

class GlooComm : public Comm {
 public:
  // `board` is null for a lone rank, which has nobody to report on.
  GlooComm(std::shared_ptr<gloo::rendezvous::Store> store, std::string prefix,
           std::shared_ptr<gloo::transport::Device> device, std::shared_ptr<gloo::Context> context,
           std::shared_ptr<ProgressBoard> board)
      : store_(std::move(store)),
        prefix_(std::move(prefix)),
        device_(std::move(device)),
        context_(std::move(context)),
        board_(std::move(board)),
        worker_(std::make_unique<Worker>()) {}

  // The worker goes first: it may still be running a collective on the context.
  ~GlooComm() override { worker_.reset(); }

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }
  std::string backend() const override { return "gloo"; }

  WorkPtr all_gather_async(const void* in, void* out, size_t count, DType dtype) override {
    const size_t bytes = count * dtype_size(dtype);
    auto ctx = context_;
    const auto timeout = this->timeout();
    return post(describe(*this, "all_gather", count, dtype), count, [=] {
      ring_all_gather(*ctx, static_cast<const char*>(in), static_cast<char*>(out), bytes, timeout);
    });
  }

  WorkPtr reduce_scatter_async(const void* in, void* out, size_t count, DType dtype,
                               ReduceOp op) override {
    auto ctx = context_;
    const auto timeout = this->timeout();
    auto scratch = scratch_;
    const std::string kind = std::string("reduce_scatter(") + op_name(op) + ")";
    return post(describe(*this, kind, count, dtype), count, [=] {
      ring_reduce_scatter(*ctx, static_cast<const char*>(in), static_cast<char*>(out), count, dtype,
                          *scratch, timeout);
      if (op == ReduceOp::kAvg) divide(out, count, dtype, ctx->size);
    });
  }

  WorkPtr all_reduce_async(void* data, size_t count, DType dtype, ReduceOp op) override {
    auto ctx = context_;
    const auto timeout = this->timeout();
    const std::string kind = std::string("all_reduce(") + op_name(op) + ")";
    return post(describe(*this, kind, count, dtype), count, [=] {
      all_reduce(ctx, nullptr, data, count, dtype, timeout);
      if (op == ReduceOp::kAvg) divide(data, count, dtype, ctx->size);
    });
  }

  WorkPtr broadcast_async(void* data, size_t count, DType dtype, int root) override {
    const std::string what =
        describe(*this, "broadcast(root " + std::to_string(root) + ")", count, dtype);
    if (root < 0 || root >= size()) throw CommError("fsdp: bad root in " + what);
    auto ctx = context_;
    const auto timeout = this->timeout();
    const size_t bytes = count * dtype_size(dtype);
    return post(what, count, [=] {
      gloo::BroadcastOptions opts(ctx);
      opts.setOutput(static_cast<uint8_t*>(data), bytes);
      opts.setRoot(root);
      opts.setTimeout(timeout);
      gloo::broadcast(opts);
    });
  }

  void barrier() override {
    auto ctx = context_;
    const auto timeout = this->timeout();
    post(describe(*this, "barrier"), 1, [=] {
      gloo::BarrierOptions opts(ctx);
      opts.setTimeout(timeout);
      gloo::barrier(opts);
    })->wait();
  }

  std::shared_ptr<Comm> split(int color, int key) override;

 private:
  // Queues `run` behind everything issued before it; a zero-length collective moves no data and
  // completes at once.
  WorkPtr post(std::string what, size_t count, std::function<void()> run) {
    auto state = std::make_shared<TaskState>();
    state->what = std::move(what);
    if (board_ && size() > 1)
      state->diagnose = ProgressBoard::post_and_diagnose(board_, state->what);
    if (count == 0) {
      state->finish("");
    } else {
      worker_->post(state, timeout(), std::move(run));
    }
    return std::make_shared<GlooWork>(std::move(state), timeout());
  }

  static void all_reduce(const std::shared_ptr<gloo::Context>& ctx, void* in, void* out,
                         size_t count, DType dtype, std::chrono::milliseconds timeout) {
    with_storage(dtype, [&](auto tag) {
      using T = decltype(tag);
      gloo::AllreduceOptions opts(ctx);
      if (in) opts.setInput(static_cast<T*>(in), count);
      opts.setOutput(static_cast<T*>(out), count);
      opts.setReduceFunction(
          [dtype](void* c, const void* a, const void* b, size_t n) { sum(c, a, b, n, dtype); });
      opts.setTimeout(timeout);
      gloo::allreduce(opts);
    });
  }

  std::shared_ptr<gloo::rendezvous::Store> store_;
  std::string prefix_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  std::shared_ptr<ProgressBoard> board_;
  int splits_ = 0;
  // reduce_scatter's two chunks in flight, kept between calls: fresh pages cost more than the
  // reuse. Used by the worker thread only.
  std::shared_ptr<std::vector<char>> scratch_ = std::make_shared<std::vector<char>>();
  std::unique_ptr<Worker> worker_;
};

std::shared_ptr<Comm> GlooComm::split(int color, int key) {
  if (color < 0) throw CommError("fsdp: split color must be >= 0, got " + std::to_string(color));
  const std::string what = describe(*this, "split(color " + std::to_string(color) + ")");
  // Everyone's (color, key), to find this rank's place in its new group.
  std::vector<int64_t> mine = {color, key};
  std::vector<int64_t> all(2 * size());
  all_gather(mine.data(), all.data(), 2, DType::kInt64);
  std::vector<std::pair<int64_t, int>> members;  // (key, parent rank) of our color
  for (int r = 0; r < size(); ++r) {
    if (all[2 * r] == color) members.emplace_back(all[2 * r + 1], r);
  }
  std::sort(members.begin(), members.end());
  const int new_rank = static_cast<int>(
      std::find(members.begin(), members.end(), std::pair<int64_t, int>(key, rank())) -
      members.begin());
  const std::string name = "split" + std::to_string(splits_++) + "/color" + std::to_string(color);
  const std::string prefix = prefix_ + "/" + name;
  const int child_size = static_cast<int>(members.size());
  std::shared_ptr<gloo::Context> context;
  try {
    context = connect(*store_, prefix, new_rank, child_size, device_, timeout());
  } catch (const std::exception& e) {
    throw CommError("fsdp: " + what + " failed: " + e.what());
  }
  // Every group connected before anyone leaves: rank 0 serves the store other groups may still be
  // reading.
  barrier();
  auto child =
      std::make_shared<GlooComm>(store_, prefix, device_, std::move(context),
                                 board_ ? board_->subgroup(name, new_rank, child_size) : nullptr);
  child->set_timeout(timeout());
  return child;
}

}  // namespace

bool gloo_built() { return true; }

CommPtr make_gloo_comm(const GlooSetup& setup) {
  const std::string where =
      "rank " + std::to_string(setup.rank) + " of " + std::to_string(setup.size) + " via " +
      (setup.run_dir.empty() ? setup.master_addr + ":" + std::to_string(setup.master_port)
                             : setup.run_dir + "/store");
  std::shared_ptr<gloo::rendezvous::Store> store;
  std::string prefix;
  std::shared_ptr<gloo::Context> context;
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<ProgressBoard> board;
  try {
    if (setup.master_port == 0 && setup.run_dir.empty()) {
      // One rank and no rendezvous address: an in-process store is all it needs.
      store = std::make_shared<gloo::rendezvous::HashStore>();
      prefix = "fsdp";
    } else {
      SharedStore& shared = shared_store(setup);
      store = std::make_shared<StoreAdapter>(shared.store);
      prefix = "fsdp/init" + std::to_string(shared.inits++);
      board = std::make_shared<ProgressBoard>(shared.progress, prefix, setup.rank, setup.size);
    }
    device = make_device(setup);
    context = connect(*store, prefix, setup.rank, setup.size, device, setup.timeout);
  } catch (const std::exception& e) {
    throw CommError("fsdp: Gloo rendezvous failed (" + where + "): " + e.what());
  }
  auto comm =
      std::make_shared<GlooComm>(store, prefix, device, std::move(context), std::move(board));
  comm->set_timeout(setup.timeout);
  comm->barrier();  // as in split: nobody leaves while others still read the store
  return comm;
}

}  // namespace comm_internal
}  // namespace fsdp
