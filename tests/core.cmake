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
# Deferred initialisation: shards materialised by param_init equal eager initialisation.
fsdp_test_executable(test_init test_init.cpp)
foreach(np 1 2 3 4)
  fsdp_mpi_test(NAME init_mpi_np${np} EXE test_init NP ${np} BACKEND mpi)
endforeach()
fsdp_mpi_test(NAME init_gloo_np3 EXE test_init NP 3 BACKEND gloo)
# The host allocator: exact counting, block reuse, raw allocations, its bound on cached blocks.
fsdp_unit_test(test_host_memory test_host_memory.cpp)
