# Comm layer tests. One binary: suite Comm runs on every backend and world size 1-4 under mpirun;
# CommTimeout (a rank left alone in a collective) gets entries of its own, so that a wedged group
# could never take the other tests down with it; the single-process suites run without mpirun.
fsdp_test_executable(test_comm test_comm.cpp)
target_compile_options(test_comm PRIVATE -Wall -Wextra -Wno-unused-parameter)
# A backend this build lacks gets skipped entries that say why (fsdp_mpi_test).
foreach(backend mpi gloo)
  foreach(np 1 2 3 4)
    fsdp_mpi_test(NAME comm_${backend}_np${np} EXE test_comm NP ${np} BACKEND ${backend}
                  FILTER "Comm.*" TIMEOUT 90)
  endforeach()
  foreach(np 2 3)
    fsdp_mpi_test(NAME comm_timeout_${backend}_np${np} EXE test_comm NP ${np} BACKEND ${backend}
                  FILTER "CommTimeout.*" TIMEOUT 60)
  endforeach()
endforeach()
# MPI without the progress thread: collectives move only inside waits, so a wait must move the
# ones issued before it, of either lane (the rings' lanes, [Note: MPI rings]).
foreach(np 2 3)
  fsdp_mpi_test(NAME comm_mpi_noprogress_np${np} EXE test_comm NP ${np} BACKEND mpi
                FILTER "Comm.*" TIMEOUT 90 ENV FSDP_MPI_PROGRESS=0)
endforeach()
add_test(NAME comm_unit COMMAND test_comm "--gtest_filter=CommEnv.*:CommLocal.*:CommKernels.*:CommProgress.*")
set_tests_properties(comm_unit PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1" TIMEOUT 60)
