# Model tests: names and shapes against Hugging Face, causality, deterministic initialisation, the
# fsdp::forward seam, and golden numbers from PyTorch (tests/golden/). Llama's, which also run its
# parity against one process under mpirun, are in llama.cmake.
fsdp_unit_test(test_gpt2 test_gpt2.cpp)
include(${CMAKE_CURRENT_SOURCE_DIR}/llama.cmake)
fsdp_unit_test(test_attention test_attention.cpp)  # fused against explicit attention (2.x)
# The fused, chunked head and cross entropy against the unfused path (issue 48, item 1).
fsdp_unit_test(test_fused_loss test_fused_loss.cpp)
