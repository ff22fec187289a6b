# Fault tests (tests/faults.sh): a rank killed mid-step and a rank that skips a collective end the
# job within a bound, naming the rank or the collective; and two hosts made of network namespaces
# train with HYBRID_SHARD to the same result as one process (tests/multihost/two_hosts.sh; skipped
# with the reason where namespaces cannot be made); and the Gloo rendezvous store survives peers
# that send it garbage (tests/store_garbage.sh).
fsdp_test_executable(fault_child fault_child.cpp)
foreach(backend gloo mpi)
  math(EXPR port "${FSDP_TEST_PORT} + 1")
  math(EXPR next "${FSDP_TEST_PORT} + 2")  # faults.sh uses two consecutive ports
  set(FSDP_TEST_PORT ${next} CACHE INTERNAL "")
  fsdp_backend_test(BACKEND ${backend} NAME faults_${backend}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/faults.sh $<TARGET_FILE_DIR:fault_child> ${backend}
                   ${port})
  set_tests_properties(faults_${backend} PROPERTIES TIMEOUT 180)
endforeach()
fsdp_backend_test(BACKEND gloo NAME multihost_hybrid_gloo
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/multihost/two_hosts.sh $<TARGET_FILE_DIR:test_parity>)
set_tests_properties(multihost_hybrid_gloo PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
math(EXPR port "${FSDP_TEST_PORT} + 1")
set(FSDP_TEST_PORT ${port} CACHE INTERNAL "")
fsdp_backend_test(BACKEND gloo NAME store_garbage
                  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/store_garbage.sh $<TARGET_FILE:fsdp-demo>
                          ${port} $<BOOL:${FSDP_SANITIZE}>)
set_tests_properties(store_garbage PROPERTIES TIMEOUT 240)
