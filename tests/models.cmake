# Model tests: GPT-2's names and shapes against Hugging Face, causality, deterministic
# initialisation, the fsdp::forward seam, and golden numbers from PyTorch (tests/golden/).
fsdp_unit_test(test_gpt2 test_gpt2.cpp)
# -fPIC: the library's precompiled header is built with -fPIC and GCC refuses it (with a warning,
# then a slow compile) for an executable's -fPIE; the later flag wins. Also the library's warnings.
target_compile_options(test_gpt2 PRIVATE -fPIC -Wall -Wextra -Wno-unused-parameter)
