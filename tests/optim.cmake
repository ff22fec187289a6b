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
