// Stands in for mpi.cpp in builds without MPI (FSDP_WITH_MPI=OFF or MPI not found), so that
// asking for the backend fails with a clear error instead of a link error.
#include "comm/internal.h"

namespace fsdp {
namespace comm_internal {

bool mpi_built() { return false; }

CommPtr make_mpi_comm(const MpiSetup&) {
  throw CommError(
      "fsdp.cpp was built without MPI: rebuild with -DFSDP_WITH_MPI=ON and OpenMPI "
      "installed, or choose the \"gloo\" backend");
}

}  // namespace comm_internal
}  // namespace fsdp
