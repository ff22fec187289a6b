// Stands in for gloo.cpp in builds without Gloo (FSDP_WITH_GLOO=OFF or Gloo not found), so that
// asking for the backend fails with a clear error instead of a link error.
#include "comm/internal.h"

namespace fsdp {
namespace comm_internal {

bool gloo_built() { return false; }

CommPtr make_gloo_comm(const GlooSetup&) {
  throw CommError(
      "fsdp.cpp was built without Gloo: rebuild with -DFSDP_WITH_GLOO=ON and "
      "libgloo-dev installed, or choose the \"mpi\" backend");
}

}  // namespace comm_internal
}  // namespace fsdp
