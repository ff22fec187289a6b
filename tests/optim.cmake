# Optimizer tests: AdamW and SGD over flat shards against torch::optim on ordinary parameters,
# global-norm clipping against torch::nn::utils::clip_grad_norm_, the LR schedule, bad input.
fsdp_unit_test(test_optim test_optim.cpp)
# The fused AdamW kernel's narrower variants, on a CPU that would choose a wider one: ATen's own
# kernels and ours capped alike (ATEN_CPU_CAPABILITY), fused against the op-by-op path.
# The widest variant built, for the test that checks which one runs (FusedAdamWKernel).
list(GET FSDP_ADAMW_VARIANTS -1 widest)
target_compile_definitions(test_optim PRIVATE FSDP_ADAMW_WIDEST="${widest}")
if("AVX2" IN_LIST FSDP_ADAMW_VARIANTS)
  foreach(isa default avx2)
    add_test(NAME test_optim_fused_${isa} COMMAND test_optim --gtest_filter=*Fused*)
    set_tests_properties(test_optim_fused_${isa} PROPERTIES
                         ENVIRONMENT "OMP_NUM_THREADS=1;ATEN_CPU_CAPABILITY=${isa}")
  endforeach()
  set(adamw_objects "")
  foreach(isa ${FSDP_ADAMW_VARIANTS})
    list(APPEND adamw_objects $<TARGET_OBJECTS:fsdp_adamw_${isa}>)
  endforeach()
  add_test(NAME adamw_kernel_symbols
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/kernel_symbols.sh ${adamw_objects})
endif()
# The fp16 loss scaler over sharded gradients (fp32 shards, so on every LibTorch): unscaling, the
# skip every rank takes together when one rank's shard holds an inf, growth and backoff, its
# checkpointed state, the underflow error. World size 3 over MPI puts the inf on one rank of three.
if("comm" IN_LIST FSDP_LAYERS AND "models" IN_LIST FSDP_LAYERS)
  fsdp_test_executable(test_grad_scaler test_grad_scaler.cpp)
  fsdp_mpi_test(NAME grad_scaler_mpi_np1 EXE test_grad_scaler NP 1 BACKEND mpi)
  fsdp_mpi_test(NAME grad_scaler_mpi_np3 EXE test_grad_scaler NP 3 BACKEND mpi)
  fsdp_mpi_test(NAME grad_scaler_gloo_np2 EXE test_grad_scaler NP 2 BACKEND gloo)
endif()
