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
# The bf16 parity tests again with oneDNN off (FSDP_TEST_ONEDNN=off): LibTorch 1.13's bf16 matmul
# takes oneDNN only on CPUs with AVX-512 and a native kernel with far larger rounding error
# elsewhere; this runs the kernel other machines get. fp32 matmul goes to BLAS either way.
foreach(np 1 2 3 4)
  fsdp_mpi_test(NAME parity_onednn_off_mpi_np${np} EXE test_parity NP ${np} BACKEND mpi
                FILTER "*Bf16*" ENV FSDP_TEST_ONEDNN=off TIMEOUT 600)
endforeach()
# Deferred initialisation: shards materialised by param_init equal eager initialisation.
fsdp_test_executable(test_init test_init.cpp)
foreach(np 1 2 3 4)
  fsdp_mpi_test(NAME init_mpi_np${np} EXE test_init NP ${np} BACKEND mpi)
endforeach()
fsdp_mpi_test(NAME init_gloo_np3 EXE test_init NP 3 BACKEND gloo)
# The host allocator: exact counting, block reuse, raw allocations, its bound on cached blocks.
fsdp_unit_test(test_host_memory test_host_memory.cpp)
