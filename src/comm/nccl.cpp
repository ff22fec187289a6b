// The NCCL backend: c10d::ProcessGroupNCCL from the CUDA LibTorch, over the same rendezvous store
// as Gloo (src/comm/store.h). Compiled only against a LibTorch with CUDA (no_nccl.cpp otherwise).
//
// Streams: ProcessGroupNCCL runs each collective on its own internal stream after the work queued
// on the caller's current stream, and its Work::wait() makes the current stream wait for the
// collective without blocking the host: the semantics include/fsdp/comm.h promises for device
// backends. Pointers into host memory (the small control messages of checkpoints and the trainer)
// are copied to the device and back around the collective, so every caller of the Comm interface
// works on an NCCL group; their wait blocks the host.
//
// Deadlines: our own wait never blocks on a device collective, so the comm's timeout is enforced
// where the host does wait (synchronize(), barrier, host-staged results), with the progress board's
// report of which ranks issued the collective. ProcessGroupNCCL's watchdog, set a little later,
// aborts a process whose collective hangs where no host waits.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <functional>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <vector>

#include "comm/internal.h"
#include "comm/progress.h"
#include "comm/scalar_type.h"

namespace fsdp {
namespace comm_internal {
namespace {

using Clock = std::chrono::steady_clock;

// Past our deadline, so that where the host waits our report (naming the missing ranks) comes
// first; the watchdog's abort is for hangs no host wait sees.
constexpr std::chrono::milliseconds kWatchdogGrace{30000};

bool is_device_memory(const void* ptr) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    (void)cudaGetLastError();  // a plain host pointer on an old driver: clear the sticky error
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

// One buffer of a collective as ProcessGroupNCCL takes it: the caller's device memory itself, or
// for host memory a device copy (`host` set: copied back by `copy_back`).
struct Operand {
  at::Tensor device;
  at::Tensor host;

  void copy_back() const {
    if (host.defined()) host.copy_(device);  // after the wait: the stream sync makes it complete
  }
};

class NcclWork : public Work {
 public:
  NcclWork(c10::intrusive_ptr<c10d::Work> work, std::vector<Operand> results, std::string what,
           std::function<std::string()> diagnose, std::chrono::milliseconds timeout)
      : work_(std::move(work)),
        results_(std::move(results)),
        what_(std::move(what)),
        diagnose_(std::move(diagnose)),
        timeout_(timeout) {
    for (const Operand& r : results_) staged_ |= r.host.defined();
  }

  // Host-staged results are read by the host: wait for them there (with the deadline).
  void wait() override {
    if (waited_) return;
    if (staged_) {
      synchronize();
      return;
    }
    order_current_stream();
  }

  void synchronize() override {
    order_current_stream();
    if (!work_) return;
    const auto deadline = Clock::now() + timeout_;
    while (!work_->isCompleted()) {
      if (Clock::now() > deadline) {
        throw CommError(timeout_error(what_, timeout_).what() + (diagnose_ ? diagnose_() : ""));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    for (const Operand& r : results_) r.copy_back();
    results_.clear();
  }

 private:
  void order_current_stream() {
    if (waited_ || !work_) {
      waited_ = true;
      return;
    }
    try {
      work_->wait();
    } catch (const std::exception& e) {
      throw CommError("fsdp: " + what_ + " failed: " + e.what());
    }
    waited_ = true;
  }

  c10::intrusive_ptr<c10d::Work> work_;  // null for a collective with nothing to move
  std::vector<Operand> results_;
  std::string what_;
  std::function<std::string()> diagnose_;
  std::chrono::milliseconds timeout_;
  bool staged_ = false;
  bool waited_ = false;
};

class NcclComm : public Comm {
 public:
  NcclComm(c10::intrusive_ptr<c10d::Store> store, std::string prefix, int rank, int size,
           int device, std::shared_ptr<ProgressBoard> board, std::chrono::milliseconds timeout)
      : store_(std::move(store)),
        prefix_(std::move(prefix)),
        rank_(rank),
        size_(size),
        device_(device),
        board_(std::move(board)) {
    set_timeout(timeout);
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout + kWatchdogGrace;
    pg_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(
        c10::make_intrusive<c10d::PrefixStore>(prefix_, store_), rank, size, options);
  }

  // Releases the communicators now (ProcessGroupNCCL warns when destroyed without it).
  ~NcclComm() override {
    try {
      pg_->shutdown();
    } catch (const std::exception&) {
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  CommDevice device() const override { return CommDevice::kCuda; }
  int device_index() const override { return device_; }

  WorkPtr all_gather_async(const void* in, void* out, size_t count, DType dtype) override {
    const std::string what = describe(*this, "all_gather", count, dtype);
    if (count == 0) return finished(what);
    Operand i = operand(const_cast<void*>(in), count, dtype, /*read=*/true);
    Operand o = operand(out, count * size_, dtype, /*read=*/false);
    return issue(what, {o}, [&] { return pg_->_allgather_base(o.device, i.device); });
  }

  WorkPtr reduce_scatter_async(const void* in, void* out, size_t count, DType dtype,
                               ReduceOp op) override {
    const std::string what =
        describe(*this, std::string("reduce_scatter(") + op_name(op) + ")", count, dtype);
    if (count == 0) return finished(what);
    Operand i = operand(const_cast<void*>(in), count * size_, dtype, /*read=*/true);
    Operand o = operand(out, count, dtype, /*read=*/false);
    c10d::ReduceScatterOptions opts;
    opts.reduceOp = reduce_op(op);
    return issue(what, {o}, [&] { return pg_->_reduce_scatter_base(o.device, i.device, opts); });
  }

  WorkPtr all_reduce_async(void* data, size_t count, DType dtype, ReduceOp op) override {
    const std::string what =
        describe(*this, std::string("all_reduce(") + op_name(op) + ")", count, dtype);
    if (count == 0) return finished(what);
    Operand d = operand(data, count, dtype, /*read=*/true);
    c10d::AllreduceOptions opts;
    opts.reduceOp = reduce_op(op);
    return issue(what, {d}, [&] {
      std::vector<at::Tensor> tensors = {d.device};
      return pg_->allreduce(tensors, opts);
    });
  }

  WorkPtr broadcast_async(void* data, size_t count, DType dtype, int root) override {
    const std::string what =
        describe(*this, "broadcast(root " + std::to_string(root) + ")", count, dtype);
    if (root < 0 || root >= size_) throw CommError("fsdp: bad root in " + what);
    if (count == 0) return finished(what);
    Operand d = operand(data, count, dtype, /*read=*/true);
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    return issue(what, {d}, [&] {
      std::vector<at::Tensor> tensors = {d.device};
      return pg_->broadcast(tensors, opts);
    });
  }

  // An all-reduce of one element through the host, rather than ProcessGroupNCCL's barrier, which
  // guesses a device from the rank when no collective has run yet.
  void barrier() override {
    int64_t token = 0;
    all_reduce_async(&token, 1, DType::kInt64, ReduceOp::kSum)->synchronize();
  }

  std::shared_ptr<Comm> split(int color, int key) override;

 private:
  static c10d::ReduceOp reduce_op(ReduceOp op) {
    return op == ReduceOp::kSum ? c10d::ReduceOp::SUM : c10d::ReduceOp::AVG;
  }

  // The caller's buffer as a device tensor: its own memory when it is on the device, else a copy
  // (of its contents when the collective reads them).
  Operand operand(void* ptr, size_t count, DType dtype, bool read) const {
    const int64_t n = static_cast<int64_t>(count);
    const at::ScalarType type = to_scalar_type(dtype);
    const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(device_));
    if (is_device_memory(ptr)) {
      return {at::from_blob(ptr, {n}, at::TensorOptions().dtype(type).device(device)), {}};
    }
    at::Tensor host = at::from_blob(ptr, {n}, at::TensorOptions().dtype(type));
    at::Tensor copy = read ? host.to(device) : at::empty({n}, host.options().device(device));
    return {copy, host};
  }

  WorkPtr issue(const std::string& what, std::vector<Operand> results,
                const std::function<c10::intrusive_ptr<c10d::Work>()>& run) {
    std::function<std::string()> diagnose;
    if (board_ && size_ > 1) diagnose = ProgressBoard::post_and_diagnose(board_, what);
    c10::intrusive_ptr<c10d::Work> work;
    try {
      work = run();
    } catch (const std::exception& e) {
      throw CommError("fsdp: " + what + " failed: " + e.what());
    }
    return std::make_shared<NcclWork>(std::move(work), std::move(results), what,
                                      std::move(diagnose), timeout());
  }

  WorkPtr finished(const std::string& what) const {
    return std::make_shared<NcclWork>(nullptr, std::vector<Operand>{}, what, nullptr, timeout());
  }

  c10::intrusive_ptr<c10d::Store> store_;
  std::string prefix_;
  int rank_, size_, device_;
  std::shared_ptr<ProgressBoard> board_;
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> pg_;
  int splits_ = 0;
};

// As Gloo's split: everyone's (color, key) through this group, then a process group per color
// under its own store prefix (NCCL sets up a communicator per group on its first collective).
std::shared_ptr<Comm> NcclComm::split(int color, int key) {
  if (color < 0) throw CommError("fsdp: split color must be >= 0, got " + std::to_string(color));
  std::vector<int64_t> mine = {color, key};
  std::vector<int64_t> all(2 * size_);
  all_gather(mine.data(), all.data(), 2, DType::kInt64);
  std::vector<std::pair<int64_t, int>> members;  // (key, parent rank) of our color
  for (int r = 0; r < size_; ++r) {
    if (all[2 * r] == color) members.emplace_back(all[2 * r + 1], r);
  }
  std::sort(members.begin(), members.end());
  const int new_rank = static_cast<int>(
      std::find(members.begin(), members.end(), std::pair<int64_t, int>(key, rank_)) -
      members.begin());
  const std::string name = "split" + std::to_string(splits_++) + "/color" + std::to_string(color);
  const int child_size = static_cast<int>(members.size());
  auto child = std::make_shared<NcclComm>(
      store_, prefix_ + "/" + name, new_rank, child_size, device_,
      board_ ? board_->subgroup(name, new_rank, child_size) : nullptr, timeout());
  return child;
}

void check_device(const NcclSetup& setup) {
  const int count = static_cast<int>(c10::cuda::device_count());
  if (count == 0) {
    throw CommError(
        "fsdp: the nccl backend needs a CUDA device, and none is visible to this process "
        "(CUDA_VISIBLE_DEVICES, driver)");
  }
  if (setup.device < 0 || setup.device >= count) {
    throw CommError("fsdp: rank " + std::to_string(setup.rank) + " would use CUDA device " +
                    std::to_string(setup.device) + " (its LOCAL_RANK), but this host has " +
                    std::to_string(count) +
                    " visible: start at most one rank per GPU, or use the mpi backend (its ranks "
                    "may share a GPU)");
  }
}

}  // namespace

bool nccl_built() { return true; }

CommPtr make_nccl_comm(const NcclSetup& setup) {
  check_device(setup);
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(setup.device));
  const std::string where = "rank " + std::to_string(setup.rank) + " of " +
                            std::to_string(setup.size) + " on cuda:" + std::to_string(setup.device);
  try {
    if (setup.master_port == 0 && setup.run_dir.empty()) {
      // One rank and no rendezvous address: an in-process store is all it needs.
      return std::make_shared<NcclComm>(c10::make_intrusive<c10d::HashStore>(), "fsdp", 0, 1,
                                        setup.device, nullptr, setup.timeout);
    }
    SharedStore& shared = shared_store(setup);
    const std::string prefix = "fsdp/init" + std::to_string(shared.inits++);
    auto board = std::make_shared<ProgressBoard>(shared.progress, prefix, setup.rank, setup.size);
    auto comm = std::make_shared<NcclComm>(shared.store, prefix, setup.rank, setup.size,
                                           setup.device, std::move(board), setup.timeout);
    comm->barrier();  // every rank's communicator exists before anyone leaves the store
    return comm;
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {
    throw CommError("fsdp: NCCL set-up failed (" + where + "): " + e.what());
  }
}

}  // namespace comm_internal
}  // namespace fsdp
