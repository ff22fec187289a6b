// What the comm backends share and nothing above comm/ sees: the element-wise sum and average
// kernels (MPI's user-defined ops and Gloo's reduce functions both call them, so bf16 and fp16
// round the same way everywhere), the text that errors and timeouts print, and the factories
// through which rendezvous.cpp reaches the backends compiled into this build.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "comm/store.h"
#include "fsdp/comm.h"

namespace fsdp {
namespace comm_internal {

// out[i] = a[i] + b[i] for `n` elements of `dtype`; `out` may alias `a` or `b`. bf16 and fp16 add
// in float and round back to nearest-even.
void sum(void* out, const void* a, const void* b, size_t n, DType dtype);
// data[i] /= divisor, in float for bf16/fp16 and by integer division for int64.
void divide(void* data, size_t n, DType dtype, int divisor);

const char* op_name(ReduceOp op);

// "all_reduce(avg) of 13 x bf16 (26 bytes) on rank 1 of 4 [mpi], context 'unit 3 forward'":
// captured when a collective is issued, because the context label may change before the wait.
std::string describe(const Comm& comm, const std::string& kind, size_t count, DType dtype);
// The same for a collective without data (barrier, split).
std::string describe(const Comm& comm, const std::string& kind);

// The error a wait throws when its deadline passes.
CommError timeout_error(const std::string& what, std::chrono::milliseconds timeout);

// A collective completed on this process: its peers are in step with it (note_local_error).
void clear_local_error() noexcept;

// Largest element count the MPI backend passes to one MPI call (MPI counts are int); longer
// messages are split into several calls. Process-wide and mutable so that tests can lower it to
// exercise the split path with small buffers.
size_t& mpi_max_elements_per_call();

// Backends, each compiled from a real or a stub source file (see CMakeLists.txt).
struct MpiSetup {
  int expected_size = -1;  // what the launcher's environment says; -1 when it says nothing
  std::string run_dir;     // FSDP_RUN_DIR: where the progress board lives; empty: one of our own
  std::chrono::milliseconds timeout{300000};
};
bool mpi_built();
CommPtr make_mpi_comm(const MpiSetup& setup);

struct GlooSetup : StoreSetup {
  std::string iface;  // network interface to bind (GLOO_SOCKET_IFNAME); empty: by address
};
bool gloo_built();
CommPtr make_gloo_comm(const GlooSetup& setup);

struct NcclSetup : StoreSetup {
  int device = 0;  // the CUDA device this rank's collectives run on (its LOCAL_RANK)
};
bool nccl_built();
CommPtr make_nccl_comm(const NcclSetup& setup);

}  // namespace comm_internal
}  // namespace fsdp
