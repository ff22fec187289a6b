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
# Frozen parameters: their bytes, resharding during backward, checkpoints (test_frozen.cpp).
fsdp_test_executable(test_frozen test_frozen.cpp)
foreach(np 1 2 3)
  fsdp_mpi_test(NAME frozen_mpi_np${np} EXE test_frozen NP ${np} BACKEND mpi)
endforeach()
fsdp_mpi_test(NAME frozen_gloo_np2 EXE test_frozen NP 2 BACKEND gloo)
# Overlap (test_overlap.cpp): prefetched all-gathers and reductions complete while units compute,
# shown from each process's timestamps, with prefetch off as the control. Gloo only: its
# collectives run on a worker thread, where OpenMPI moves data only inside MPI calls.
fsdp_test_executable(test_overlap test_overlap.cpp)
fsdp_mpi_test(NAME overlap_gloo_np2 EXE test_overlap NP 2 BACKEND gloo)
# The bf16 parity tests again with oneDNN off (FSDP_TEST_ONEDNN=off): LibTorch 1.13's bf16 matmul
# takes oneDNN only on CPUs with AVX-512 and a native kernel with far larger rounding error
# elsewhere; this runs the kernel other machines get. fp32 matmul goes to BLAS either way.
foreach(np 1 2 3 4)
  fsdp_mpi_test(NAME parity_onednn_off_mpi_np${np} EXE test_parity NP ${np} BACKEND mpi
                FILTER "*Bf16*" ENV FSDP_TEST_ONEDNN=off TIMEOUT 600)
endforeach()
# The same parity tests on a GPU (FSDP_TEST_DEVICE=cuda): 1 to 4 ranks sharing the one GPU over
# MPI (CUDA tensors staged through pinned host buffers), and one rank over NCCL, which refuses two
# ranks on one GPU. Where there is no GPU they print the reason and report themselves skipped.
foreach(np 1 2 3 4)
  fsdp_mpi_test(NAME parity_cuda_mpi_np${np} EXE test_parity NP ${np} BACKEND mpi
                ENV FSDP_TEST_DEVICE=cuda TIMEOUT 600)
endforeach()
fsdp_mpi_test(NAME parity_cuda_nccl_np1 EXE test_parity NP 1 BACKEND nccl ENV FSDP_TEST_DEVICE=cuda)
# Deferred initialisation: shards materialised by param_init equal eager initialisation.
fsdp_test_executable(test_init test_init.cpp)
foreach(np 1 2 3 4)
  fsdp_mpi_test(NAME init_mpi_np${np} EXE test_init NP ${np} BACKEND mpi)
endforeach()
fsdp_mpi_test(NAME init_gloo_np3 EXE test_init NP 3 BACKEND gloo)
# The host allocator: exact counting, block reuse, raw allocations, its bound on cached blocks.
fsdp_unit_test(test_host_memory test_host_memory.cpp)
# CUDA in one process. test_cuda: the backend choice and the device-option errors, on every
# machine. cuda_gpu: NCCL at world size 1, host staging, a model sharded on the GPU; the shared test
# main reports it skipped, with the reason, where there is no GPU (FSDP_TEST_DEVICE=cuda).
fsdp_test_executable(test_cuda test_cuda.cpp)
add_test(NAME test_cuda COMMAND test_cuda --gtest_filter=CudaChoice.*:DeviceOption.*:Offload.OnTheCpu*)
add_test(NAME cuda_gpu COMMAND test_cuda --gtest_filter=CudaCollectives.*:Nccl.*:CudaSharding.*:Streams.*:Offload.OnTheGpu*)
set_tests_properties(cuda_gpu PROPERTIES ENVIRONMENT "FSDP_TEST_DEVICE=cuda;OMP_NUM_THREADS=1"
                                         SKIP_RETURN_CODE 77)
# A user's own modules and the mistakes users make with them (test_modules.cpp): reads between
# steps, wrapped blocks called directly, a model used after its sharding is gone.
fsdp_test_executable(test_modules test_modules.cpp)
foreach(np 1 2 3)
  fsdp_mpi_test(NAME modules_mpi_np${np} EXE test_modules NP ${np} BACKEND mpi)
endforeach()
fsdp_mpi_test(NAME modules_gloo_np2 EXE test_modules NP 2 BACKEND gloo)
