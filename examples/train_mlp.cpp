// A model of the user's own, sharded with fsdp.cpp and trained for a few steps: a residual MLP
// learning a fixed random linear map. It shows everything a program needs: join the ranks,
// call the blocks to shard through fsdp::forward, fully_shard with a wrap policy, step an
// optimizer over this rank's shards, accumulate with no_sync, clip the global norm.
//
// Run: mpirun -np 2 train_mlp [steps]   (or one process: ./train_mlp)
// Exits 1 unless the loss, averaged over ranks, falls to a fifth of its first value: CI runs it.
#include <fsdp/fsdp.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

// --- the user's model: no FSDP code but the fsdp::forward call sites ---------------------------

struct ResidualBlockImpl : torch::nn::Module {
  explicit ResidualBlockImpl(int64_t width)
      : norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})))),
        up(register_module("up", torch::nn::Linear(width, 4 * width))),
        down(register_module("down", torch::nn::Linear(4 * width, width))) {}
  torch::Tensor forward(const torch::Tensor& x) { return x + down(torch::gelu(up(norm(x)))); }
  torch::nn::LayerNorm norm;
  torch::nn::Linear up, down;
};
TORCH_MODULE(ResidualBlock);

struct RegressorImpl : torch::nn::Module {
  RegressorImpl(int64_t in, int64_t width, int64_t out, int depth)
      : input(register_module("input", torch::nn::Linear(in, width))),
        blocks(register_module("blocks", torch::nn::ModuleList())),
        output(register_module("output", torch::nn::Linear(width, out))) {
    for (int i = 0; i < depth; ++i) {
      layers.emplace_back(width);
      blocks->push_back(layers.back());
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = input(x);
    for (auto& layer : layers) {
      // The seam: a plain call while nothing is sharded; gathers and frees the block once it is.
      h = fsdp::forward(layer, h);
    }
    return output(h);
  }
  torch::nn::Linear input;
  torch::nn::ModuleList blocks;  // registers the layers under "blocks.<i>"
  torch::nn::Linear output;
  std::vector<ResidualBlock> layers;
};
TORCH_MODULE(Regressor);

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 60;
  constexpr int64_t kIn = 32, kWidth = 64, kOut = 8, kBatch = 32, kMicroBatches = 2;
  try {
    fsdp::CommPtr world = fsdp::init_comm();  // MPI under mpirun, Gloo under torchrun variables
    torch::manual_seed(0);                    // the same initial model on every rank
    Regressor model(kIn, kWidth, kOut, /*depth=*/4);
    const torch::Tensor target_map = torch::randn({kIn, kOut}) / std::sqrt(double(kIn));

    auto sharded = fsdp::fully_shard(model.ptr(), world,
                                     fsdp::ShardingOptions()
                                         .strategy(fsdp::ShardingStrategy::kFullShard)
                                         .wrap(fsdp::WrapPolicy::by_type({"ResidualBlock"})));
    std::vector<fsdp::ShardedParam> params = fsdp::sharded_params(*sharded);
    fsdp::AdamWOptions adam;
    adam.lr = 3e-3;
    fsdp::AdamW opt(params, adam);

    torch::manual_seed(1 + world->rank());  // each rank its own data
    float first = 0, last = 0;
    for (int step = 0; step < steps; ++step) {
      opt.zero_grad();
      float loss_sum = 0;
      for (int m = 0; m < kMicroBatches; ++m) {
        // Gradients stay local for all but the last micro-batch, then are reduce-scattered.
        sharded->set_requires_gradient_sync(m == kMicroBatches - 1);
        torch::Tensor x = torch::randn({kBatch, kIn});
        torch::Tensor loss = torch::mse_loss(fsdp::forward(model, x), x.matmul(target_map));
        (loss / kMicroBatches).backward();
        loss_sum += loss.item<float>() / kMicroBatches;
      }
      fsdp::clip_grad_norm(params, 1.0, sharded->shard_group());
      opt.step();
      world->all_reduce(&loss_sum, 1, fsdp::DType::kFloat32, fsdp::ReduceOp::kAvg);
      if (step == 0) first = loss_sum;
      last = loss_sum;
      if (world->rank() == 0 && (step % 10 == 0 || step == steps - 1)) {
        std::printf("step %3d  loss %.5f\n", step, loss_sum);
      }
    }
    const bool learned = last < 0.2f * first;
    if (world->rank() == 0) {
      std::printf("%d ranks (%s): loss %.4f -> %.4f, %s\n", world->size(), world->backend().c_str(),
                  first, last, learned ? "learned" : "did NOT learn");
    }
    return learned ? 0 : 1;
  } catch (const std::exception& e) {
    // Returning ends the job cleanly even when only this rank failed: after an error of fsdp's
    // that no collective has followed, the MPI backend aborts the job at exit rather than wait
    // for peers still inside a collective (a Gloo or NCCL exit fails theirs). For an error of
    // your own on one rank, call fsdp::note_local_error() before returning.
    std::fprintf(stderr, "train_mlp: %s\n", e.what());
    return 2;
  }
}
