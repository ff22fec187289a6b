// Stands in for nccl.cpp in builds against a LibTorch without CUDA, so that asking for the NCCL
// backend fails with a clear error instead of a link error.
#include "comm/internal.h"

namespace fsdp {
namespace comm_internal {

bool nccl_built() { return false; }

CommPtr make_nccl_comm(const NcclSetup&) {
  throw CommError(
      "fsdp.cpp was built without NCCL: the LibTorch it was built against has no CUDA (build "
      "against a CUDA LibTorch, e.g. a PyTorch CUDA wheel's), or choose the \"mpi\" or \"gloo\" "
      "backend");
}

}  // namespace comm_internal
}  // namespace fsdp
