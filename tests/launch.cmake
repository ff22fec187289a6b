# fsdp-run's tests: test_launch (GoogleTest, no LibTorch) drives the fsdp-run binary with
# launch_child as a stand-in rank, and one end-to-end test trains fsdp-demo under it. Each test is
# its own CTest entry (launch.<Suite>.<Name>) so they stay short and may run in parallel.
include(GoogleTest)

add_executable(launch_child launch_child.cpp)
target_compile_options(launch_child PRIVATE -Wall -Wextra)

add_executable(test_launch test_launch.cpp)
target_link_libraries(test_launch PRIVATE fsdp_launch GTest::gtest_main)
target_compile_options(test_launch PRIVATE -Wall -Wextra)
target_compile_definitions(test_launch PRIVATE FSDP_RUN_EXE="$<TARGET_FILE:fsdp-run>"
                                               LAUNCH_CHILD_EXE="$<TARGET_FILE:launch_child>")
add_dependencies(test_launch fsdp-run launch_child)
# LaunchEndToEnd.FsdpDemoTrainsUnderGloo skips with the reason in a build without Gloo.
target_compile_definitions(test_launch PRIVATE FSDP_MISSING_GLOO="${FSDP_MISSING_GLOO}")
if(TARGET fsdp-demo)
  target_compile_definitions(test_launch PRIVATE FSDP_DEMO_EXE="$<TARGET_FILE:fsdp-demo>")
  add_dependencies(test_launch fsdp-demo)
endif()
gtest_discover_tests(test_launch TEST_PREFIX launch. PROPERTIES TIMEOUT 120 LABELS quick
                     DISCOVERY_TIMEOUT 30)
