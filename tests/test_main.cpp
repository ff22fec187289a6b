// GoogleTest entry point shared by the multi-rank test binaries: one intra-op thread per rank
// (tests run several ranks on two cores), and the group torn down before the process exits.
#include <gtest/gtest.h>

#include "test_util.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  at::set_num_threads(1);
  int rc = RUN_ALL_TESTS();
  fsdp::test::shutdown();
  return rc;
}
