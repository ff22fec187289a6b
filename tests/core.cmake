# Sharding runtime tests: parity against single-process training, memory bounds, bad input.
fsdp_test_executable(test_parity test_parity.cpp)
fsdp_test_executable(test_core test_core.cpp)
foreach(backend mpi gloo)
  foreach(np 1 2 3 4)
    fsdp_mpi_test(NAME parity_${backend}_np${np} EXE test_parity NP ${np} BACKEND ${backend}
                  TIMEOUT 600)
    fsdp_mpi_test(NAME core_${backend}_np${np} EXE test_core NP ${np} BACKEND ${backend})
  endforeach()
endforeach()
