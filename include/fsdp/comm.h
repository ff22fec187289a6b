// The communication layer's contract: a small, torch-free interface to a group of ranks.
//
// Everything above comm/ (the sharding runtime, optimizers, checkpoints) talks to other ranks only
// through `Comm`. Buffers are raw pointers with an element count and a `DType`; the caller owns
// them and keeps them alive, unmodified, until the returned `Work` has been waited on.
// Backends: "mpi" (OpenMPI), "gloo" (the Gloo library over a c10d TCPStore rendezvous), "nccl"
// (c10d's ProcessGroupNCCL, in builds against a CUDA LibTorch) and "local" (one rank: every
// collective is a copy or a no-op). `init_comm` picks one from the environment the ranks were
// started in (see rendezvous in src/comm/rendezvous.cpp).
//
// Memory and streams. `device()` says where a backend's collectives work: host memory (MPI, Gloo,
// local) or the memory of one CUDA device (NCCL). Pointers into host memory may be given to every
// backend (NCCL copies them through its device and back, for the small control messages of
// checkpoints and the trainer); CUDA memory is given to NCCL only, and the sharding runtime copies
// CUDA tensors through pinned host buffers for the host backends (src/core/collectives.h). On a
// device backend a collective is ordered after the work already queued on the calling thread's
// current stream, and `Work::wait()` makes the *current* stream wait for it without blocking the
// host (ProcessGroupNCCL's semantics); `Work::synchronize()` blocks the host. On host backends
// both block until the collective is complete.
//
// Thread-safety: a Comm is used by one thread at a time; collectives must be issued in the same
// order on every rank of the group. Every wait has a deadline (CommOptions::timeout): when it
// expires, `wait` throws CommError naming the collective, its size and the caller's context label.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace fsdp {

enum class DType { kFloat32, kBFloat16, kFloat16, kInt64 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);

enum class ReduceOp { kSum, kAvg };

// Where a backend's collectives read and write natively.
enum class CommDevice { kCpu, kCuda };

// Thrown for every communication failure: timeouts, a peer that went away, a backend error.
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Handle on an asynchronous collective. `wait` blocks until it completes (or throws CommError on
// failure or timeout), or on a device backend orders the current stream after it (see above);
// calling it again returns at once.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  // Blocks the host until the collective is complete, on every backend.
  virtual void synchronize() { wait(); }
};
using WorkPtr = std::shared_ptr<Work>;

class Comm {
 public:
  virtual ~Comm() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;
  // Whether an issued collective moves while the caller computes (Gloo's worker, NCCL's kernels,
  // the MPI backend's progress thread), so that prefetch can hide it; false: it moves only while
  // waited on (MPI with FSDP_MPI_PROGRESS=0). The time model reads it.
  virtual bool progresses_in_background() const { return true; }
  // kCpu for the host backends; kCuda for NCCL, whose device is `device_index()`.
  virtual CommDevice device() const { return CommDevice::kCpu; }
  virtual int device_index() const { return -1; }

  // Gathers `count` elements from every rank: rank r's `in` lands at out[r*count, (r+1)*count).
  // `out` holds size()*count elements and must not overlap `in`.
  virtual WorkPtr all_gather_async(const void* in, void* out, size_t count, DType dtype) = 0;
  // `in` holds size()*count elements; rank r receives in `out` (count elements) the sum (or
  // average) over all ranks of their chunk r. `out` must not overlap `in`.
  virtual WorkPtr reduce_scatter_async(const void* in, void* out, size_t count, DType dtype,
                                       ReduceOp op) = 0;
  // In place over `data` (count elements).
  virtual WorkPtr all_reduce_async(void* data, size_t count, DType dtype, ReduceOp op) = 0;
  // In place: every rank ends with `root`'s `data`.
  virtual WorkPtr broadcast_async(void* data, size_t count, DType dtype, int root) = 0;
  virtual void barrier() = 0;

  // Collective over this group: ranks with the same `color` form a new group, ordered by `key`.
  virtual std::shared_ptr<Comm> split(int color, int key) = 0;

  // A short label ("unit 3 forward, step 12") that errors and timeouts report, so a user can tell
  // which collective a rank was stuck in.
  void set_context(std::string label) { context_ = std::move(label); }
  const std::string& context() const { return context_; }

  // Deadline for each wait on this group's collectives. init_comm sets it from
  // CommOptions::timeout; split children start with their parent's. Read when a collective is
  // issued, so a caller may shorten it around one risky phase and restore it after.
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Ranks of this group on this node, as the launcher reported it (torchrun's LOCAL_WORLD_SIZE,
  // OpenMPI's OMPI_COMM_WORLD_LOCAL_SIZE); 0 when unknown (split groups, a lone process).
  // HYBRID_SHARD's default shard group is one node.
  void set_local_size(int local_size) { local_size_ = local_size; }
  int local_size() const { return local_size_; }

  // Blocking forms.
  void all_gather(const void* in, void* out, size_t count, DType dtype) {
    all_gather_async(in, out, count, dtype)->wait();
  }
  void reduce_scatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op) {
    reduce_scatter_async(in, out, count, dtype, op)->wait();
  }
  void all_reduce(void* data, size_t count, DType dtype, ReduceOp op) {
    all_reduce_async(data, count, dtype, op)->wait();
  }
  void broadcast(void* data, size_t count, DType dtype, int root) {
    broadcast_async(data, count, dtype, root)->wait();
  }

 private:
  std::string context_;
  std::chrono::milliseconds timeout_{300000};
  int local_size_ = 0;
};
using CommPtr = std::shared_ptr<Comm>;

struct CommOptions {
  // "auto" (default): "mpi" when started by mpirun, "gloo" when RANK/WORLD_SIZE are set
  // (torchrun-style), "local" when neither is; with `device` "cuda", "nccl" instead of "gloo" and
  // "local" (under mpirun it stays "mpi", whose ranks may share one GPU). Or one of "mpi",
  // "gloo", "nccl", "local" explicitly.
  std::string backend = "auto";
  // "cpu" (default) or "cuda": where the job's tensors live. With "cuda", NCCL (when chosen)
  // works on GPU LOCAL_RANK (torchrun's and fsdp-run's variable; OpenMPI's local rank under
  // mpirun).
  std::string device = "cpu";
  // Deadline for every wait on a collective. Default: 5 minutes.
  std::chrono::milliseconds timeout{300000};
};

// Joins the group the environment describes. Throws CommError naming the missing or bad variable.
CommPtr init_comm(const CommOptions& options = {});

// A one-rank group; collectives copy or do nothing.
CommPtr make_local_comm();

// Marks that this process raised an error its peers may not have seen: fsdp's own checks call it
// (an FSDP_CHECK that fails, an op on a sharded parameter), and a program may, for an error of its
// own on one rank. The next collective this process completes clears it. A process that exits with
// it set under the MPI backend aborts the job (MPI_Abort) rather than wait in MPI_Finalize for
// peers that may be inside a collective it left, which would hang them until their collective
// timeout; on Gloo and NCCL its exit already fails their collectives. Thread-safe.
void note_local_error() noexcept;
bool local_error_pending() noexcept;

}  // namespace fsdp
