# Llama: one binary, two kinds of CTest entries. `test_llama` runs the model tests (suite Llama) in
# one process; `llama_parity_<backend>_np<N>` run the sharding tests (LlamaSharding, LlamaParity)
# under mpirun. The binary links the runtime and its optimizer, so it needs those layers too.
if("comm" IN_LIST FSDP_LAYERS AND "core" IN_LIST FSDP_LAYERS AND "optim" IN_LIST FSDP_LAYERS)
  fsdp_test_executable(test_llama test_llama.cpp)
  add_test(NAME test_llama COMMAND test_llama --gtest_filter=Llama.*)
  set_tests_properties(test_llama PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1")
  foreach(backend mpi gloo)
    foreach(np 1 2 3 4)
      fsdp_mpi_test(NAME llama_parity_${backend}_np${np} EXE test_llama NP ${np}
                    BACKEND ${backend} FILTER "LlamaSharding.*:*LlamaParity.*" TIMEOUT 600)
    endforeach()
  endforeach()
endif()
