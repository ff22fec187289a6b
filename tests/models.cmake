# Model tests: GPT-2's names and shapes against Hugging Face, causality, deterministic
# initialisation, the fsdp::forward seam, and golden numbers from PyTorch (tests/golden/).
fsdp_unit_test(test_gpt2 test_gpt2.cpp)
