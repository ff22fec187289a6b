# Optimizer tests: AdamW and SGD over flat shards against torch::optim on ordinary parameters,
# global-norm clipping against torch::nn::utils::clip_grad_norm_, the LR schedule, bad input.
fsdp_unit_test(test_optim test_optim.cpp)
