// Text shared by every backend's errors, so that a timeout reads the same whichever backend
// raised it, the MPI message-size knob, and the process's pending local error (note_local_error,
// which the MPI backend reads at exit): here, not in mpi.cpp, because builds without MPI and the
// tests reference them too.
#include <atomic>
#include <climits>
#include <sstream>

#include "comm/internal.h"

namespace fsdp {
namespace comm_internal {

const char* op_name(ReduceOp op) { return op == ReduceOp::kSum ? "sum" : "avg"; }

std::string describe(const Comm& comm, const std::string& kind) {
  std::ostringstream s;
  s << kind << " on rank " << comm.rank() << " of " << comm.size() << " [" << comm.backend()
    << "], context '" << comm.context() << "'";
  return s.str();
}

std::string describe(const Comm& comm, const std::string& kind, size_t count, DType dtype) {
  std::ostringstream s;
  s << kind << " of " << count << " x " << dtype_name(dtype) << " (" << count * dtype_size(dtype)
    << " bytes)";
  return describe(comm, s.str());
}

CommError timeout_error(const std::string& what, std::chrono::milliseconds timeout) {
  return CommError(
      "fsdp: timed out after " + std::to_string(timeout.count()) + " ms waiting for " + what +
      " (a peer rank may have failed, or ranks issued collectives in different orders)");
}

size_t& mpi_max_elements_per_call() {
  static size_t limit = INT_MAX;
  return limit;
}

namespace {
std::atomic<bool> g_local_error{false};
}  // namespace

void clear_local_error() noexcept { g_local_error.store(false); }

}  // namespace comm_internal

void note_local_error() noexcept { comm_internal::g_local_error.store(true); }
bool local_error_pending() noexcept { return comm_internal::g_local_error.load(); }

}  // namespace fsdp
