# Model tests: names and shapes against Hugging Face, causality, deterministic initialisation, the
# fsdp::forward seam, and golden numbers from PyTorch (tests/golden/). Llama's, which also run its
# parity against one process under mpirun, are in llama.cmake.
fsdp_unit_test(test_gpt2 test_gpt2.cpp)
include(${CMAKE_CURRENT_SOURCE_DIR}/llama.cmake)
fsdp_unit_test(test_attention test_attention.cpp)  # fused against explicit attention (2.x)
# The fused, chunked head and cross entropy against the unfused path (issue 48, item 1).
fsdp_unit_test(test_fused_loss test_fused_loss.cpp)
# The fused element-wise nodes (RMSNorm, gated activations, RoPE) against the composite ops, on the
# CPU, and with FSDP_TEST_DEVICE=cuda their CUDA kernels (skipped with the reason without a GPU).
fsdp_test_executable(test_fused_ops test_fused_ops.cpp)
add_test(NAME test_fused_ops COMMAND test_fused_ops)
add_test(NAME fused_ops_cuda COMMAND test_fused_ops)
set_tests_properties(fused_ops_cuda PROPERTIES ENVIRONMENT FSDP_TEST_DEVICE=cuda SKIP_RETURN_CODE 77)
# bf16 products on the CPU through fp32 GEMMs against ATen's own and fp64 (fsdp/models/matmul.h).
fsdp_unit_test(test_matmul test_matmul.cpp)
