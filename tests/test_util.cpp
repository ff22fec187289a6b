// The multi-rank tests' group: one per process, created lazily so that single-process tests in the
// same binary never start a rendezvous.
#include "test_util.h"

#include <cstdlib>

namespace fsdp {
namespace test {
namespace {
CommPtr& world_slot() {
  static CommPtr comm;
  return comm;
}
}  // namespace

std::string backend_under_test() {
  const char* b = std::getenv("FSDP_TEST_BACKEND");
  return b ? b : "auto";
}

CommPtr world() {
  CommPtr& comm = world_slot();
  if (!comm) {
    CommOptions options;
    options.backend = backend_under_test();
    options.timeout = std::chrono::seconds(60);
    comm = init_comm(options);
  }
  return comm;
}

void shutdown() { world_slot().reset(); }

}  // namespace test
}  // namespace fsdp
