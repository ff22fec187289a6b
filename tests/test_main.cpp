// GoogleTest entry point shared by the multi-rank test binaries: one intra-op thread per rank
// (tests run several ranks on two cores), oneDNN off when FSDP_TEST_ONEDNN=off, tensors on fsdp's
// host allocator as fsdp-train runs them (fsdp/host_memory.h), and the group torn down before the
// process exits. A run on a device this machine lacks (FSDP_TEST_DEVICE=cuda without a GPU) exits
// 77, which CTest reports as skipped, after printing why.
#include <gtest/gtest.h>

#include <iostream>

#include "fsdp/host_memory.h"
#include "test_util.h"

int main(int argc, char** argv) {
  const std::string skip = fsdp::test::device_skip_reason();
  if (!skip.empty()) {
    std::cout << "skipped: " << skip << std::endl;
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  at::set_num_threads(1);
  fsdp::test::apply_onednn_setting();
  fsdp::install_host_allocator();
  int rc = RUN_ALL_TESTS();
  fsdp::test::shutdown();
  return rc;
}
