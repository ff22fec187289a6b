// Helpers shared by the multi-rank tests: the process-wide group under test.
#pragma once

#include "fsdp/comm.h"

namespace fsdp {
namespace test {

// The group every rank of this test run belongs to, joined on first use with the backend named
// by FSDP_TEST_BACKEND ("mpi", "gloo"; default "auto") and a 60 s collective timeout.
CommPtr world();
// Name of the backend under test.
std::string backend_under_test();
void shutdown();

}  // namespace test
}  // namespace fsdp
