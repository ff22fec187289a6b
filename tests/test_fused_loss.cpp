// The fused, chunked head and cross entropy (fsdp/models/fused_loss.h) against the unfused path it
// replaces (the head's matmul, then gpt2_loss / token_loss_sum): the loss and the gradients of the
// hidden states and the weight, mean and sum, with ignored targets, chunks that do not divide the
// rows, fp32 and bf16.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "factory/model_factory.h"
#include "fsdp/comm.h"
#include "fsdp/config/config.h"
#include "fsdp/fully_shard.h"
#include "fsdp/models/fused_loss.h"
#include "fsdp/models/gpt2.h"

namespace fsdp {
namespace {

struct Result {
  at::Tensor loss, grad_hidden, grad_weight;
};

Result run(bool fused, const at::Tensor& hidden0, const at::Tensor& weight0,
           const at::Tensor& targets, bool mean, int64_t chunk) {
  at::Tensor hidden = hidden0.clone().requires_grad_(true);
  at::Tensor weight = weight0.clone().requires_grad_(true);
  at::Tensor loss;
  if (fused) {
    loss = linear_cross_entropy(hidden, weight, targets, mean, chunk);
  } else {
    const at::Tensor logits = at::matmul(hidden, weight.t());
    loss = mean ? gpt2_loss(logits, targets) : token_loss_sum(logits, targets);
  }
  (loss * 0.75).backward();  // an upstream gradient other than one
  return {loss.detach(), hidden.grad(), weight.grad()};
}

// max |a - b| over max |b|: a relative error that a few near-zero entries do not dominate.
double rel(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>() /
         std::max(1e-30, b.to(at::kFloat).abs().max().item<double>());
}

// fp32: the two paths do the same arithmetic in another grouping (chunks of rows; the weight's
// gradient summed chunk by chunk), so they agree to a few fp32 ulps: 1e-5 relative.
// bf16: both round the logits' gradient to bf16 and multiply in bf16, but a bf16 matmul's result
// depends on its shape where LibTorch 1.13 has no oneDNN kernel (CPUs without AVX-512: a native
// kernel that rounds partial sums: a 5-row chunk differs from the whole by 1.3 % on an EPYC). So
// each is held against the fp32 computation from the same bf16 inputs: the fused path's error may
// not exceed twice the unfused one's, nor 3e-2 where the unfused one is smaller than that (the
// native kernel's error on the 5-row chunks here: 1.1-1.3 % of the largest gradient, measured on
// an AMD EPYC without AVX-512; GPUs and oneDNN accumulate bf16 products in fp32).
TEST(LinearCrossEntropy, EqualsTheUnfusedPath) {
  torch::manual_seed(3);
  const int64_t N = 37, C = 16, V = 101;
  at::Tensor targets = torch::randint(0, V, {N}, torch::kLong);
  targets.index_put_({torch::rand({N}) < 0.3}, -100);
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    const at::Tensor hidden = torch::randn({N, C}).to(dtype);
    const at::Tensor weight = (torch::randn({V, C}) * 0.5).to(dtype);
    const double tol = dtype == at::kFloat ? 1e-5 : 3e-2;
    for (const bool mean : {true, false}) {
      for (const int64_t chunk : {int64_t{5}, int64_t{0}, N}) {
        SCOPED_TRACE(std::string(dtype == at::kFloat ? "fp32" : "bf16") +
                     (mean ? ", mean" : ", sum") + ", chunk " + std::to_string(chunk));
        const Result a = run(true, hidden, weight, targets, mean, chunk);
        const Result b = run(false, hidden, weight, targets, mean, chunk);
        if (dtype == at::kFloat) {
          EXPECT_LT(rel(a.loss, b.loss), tol);
          EXPECT_LT(rel(a.grad_hidden, b.grad_hidden), tol);
          EXPECT_LT(rel(a.grad_weight, b.grad_weight), tol);
        } else {
          const Result ref =
              run(false, hidden.to(at::kFloat), weight.to(at::kFloat), targets, mean, chunk);
          auto bound = [&](const at::Tensor& unfused, const at::Tensor& exact) {
            return std::max(2 * rel(unfused, exact), tol);
          };
          EXPECT_LT(rel(a.loss, ref.loss), bound(b.loss, ref.loss));
          EXPECT_LT(rel(a.grad_hidden, ref.grad_hidden), bound(b.grad_hidden, ref.grad_hidden));
          EXPECT_LT(rel(a.grad_weight, ref.grad_weight), bound(b.grad_weight, ref.grad_weight));
        }
        EXPECT_EQ(a.grad_hidden.scalar_type(), dtype);
        EXPECT_EQ(a.grad_weight.scalar_type(), dtype);
      }
    }
  }
}

TEST(LinearCrossEntropy, NoTargetIsZeroLossAndGradient) {
  const at::Tensor hidden = torch::randn({6, 8}), weight = torch::randn({11, 8});
  const at::Tensor none = torch::full({6}, -100, torch::kLong);
  const Result r = run(true, hidden, weight, none, /*mean=*/false, 4);
  EXPECT_EQ(r.loss.item<double>(), 0.0);
  EXPECT_EQ(r.grad_hidden.abs().max().item<double>(), 0.0);
  EXPECT_EQ(r.grad_weight.abs().max().item<double>(), 0.0);
}

// The gradients are taken in forward and handed over by the first backward; a second backward of a
// retained graph recomputes them from the saved rows (the fp16 path's way), the same numbers.
TEST(LinearCrossEntropy, ASecondBackwardRecomputes) {
  torch::manual_seed(4);
  const at::Tensor hidden0 = torch::randn({9, 8}), weight0 = torch::randn({13, 8});
  const at::Tensor targets = torch::randint(0, 13, {9}, torch::kLong);
  at::Tensor hidden = hidden0.clone().requires_grad_(true);
  at::Tensor weight = weight0.clone().requires_grad_(true);
  const at::Tensor loss = linear_cross_entropy(hidden, weight, targets, /*mean=*/true, 4);
  (loss * 0.5).backward({}, /*retain_graph=*/true);
  const at::Tensor once_hidden = hidden.grad().clone(), once_weight = weight.grad().clone();
  (loss * 0.5).backward();
  EXPECT_LT(rel(hidden.grad(), 2 * once_hidden), 1e-6);
  EXPECT_LT(rel(weight.grad(), 2 * once_weight), 1e-6);
  const Result unfused = run(false, hidden0, weight0, targets, /*mean=*/true, 4);
  EXPECT_LT(rel(once_hidden, unfused.grad_hidden * (0.5 / 0.75)), 1e-5);
}

// fp16 takes the gradient in backward, with the upstream gradient (the loss scale) applied before
// it is rounded. Here a mean over 1,024 rows of 40,000-way softmaxes makes logits' gradients of
// about 1 / (1024 x 40000) = 2.4e-8, below half fp16's smallest step (6e-8): rounded before the
// scale they would be zero and so would the weight's gradient; scaled by 2^16 first, as the
// unfused path does, they survive and the two paths agree. LibTorch 1.13 has no fp16 matmul on
// the CPU.
TEST(LinearCrossEntropy, Fp16ScalesBeforeRounding) {
  const at::Tensor probe = torch::ones({2, 2}, torch::kHalf);
  try {
    (void)at::matmul(probe, probe);
  } catch (const std::exception&) {
    GTEST_SKIP() << "this LibTorch (" << TORCH_VERSION << ") has no fp16 matmul on the CPU";
  }
  torch::manual_seed(6);
  const int64_t N = 1024, C = 16, V = 40000;
  const at::Tensor hidden = (torch::randn({N, C}) * 0.1).to(torch::kHalf);
  const at::Tensor weight = (torch::randn({V, C}) * 0.1).to(torch::kHalf);
  const at::Tensor targets = torch::randint(0, V, {N}, torch::kLong);
  auto grads = [&](bool fused) {
    at::Tensor h = hidden.clone().requires_grad_(true), w = weight.clone().requires_grad_(true);
    const at::Tensor loss = fused ? linear_cross_entropy(h, w, targets, true, 256)
                                  : gpt2_loss(at::matmul(h, w.t()), targets);
    (loss * 65536.0).backward();
    return std::make_pair(h.grad().to(at::kFloat), w.grad().to(at::kFloat));
  };
  const auto [fused_h, fused_w] = grads(true);
  const auto [plain_h, plain_w] = grads(false);
  ASSERT_GT(plain_w.abs().max().item<double>(), 0);
  EXPECT_LT(rel(fused_h, plain_h), 1e-2);
  EXPECT_LT(rel(fused_w, plain_w), 1e-2);
}

TEST(LinearCrossEntropy, ShapesAreChecked) {
  EXPECT_THROW(linear_cross_entropy(torch::randn({4, 8}), torch::randn({11, 7}),
                                    torch::zeros({4}, torch::kLong), true),
               std::invalid_argument);
  EXPECT_THROW(linear_cross_entropy(torch::randn({4, 8}), torch::randn({11, 8}),
                                    torch::zeros({5}, torch::kLong), true),
               std::invalid_argument);
  // At most 64 MiB of fp32 logits, from 128 rows on a multiple of 128, the rows split evenly.
  EXPECT_EQ(linear_cross_entropy_chunk_rows(128256, 16384), 128);  // 130 fit
  EXPECT_EQ(linear_cross_entropy_chunk_rows(50257, 1024), 256);    // 333 fit: 4 chunks
  EXPECT_EQ(linear_cross_entropy_chunk_rows(50257, 100), 100);
  EXPECT_EQ(linear_cross_entropy_chunk_rows(1 << 24, 10), 1);     // 64 MiB: one row of 16 M
  EXPECT_EQ(linear_cross_entropy_chunk_rows(1 << 20, 1000), 16);  // 16 fit, below the tile
  // On a GPU 512 MiB: a 1B Llama's 16,384 rows in 16 chunks of 1,024 (1,046 fit).
  EXPECT_EQ(linear_cross_entropy_chunk_rows(128256, 16384, /*gpu=*/true), 1024);
  EXPECT_EQ(linear_cross_entropy_chunk_rows(50257, 8192, /*gpu=*/true), 2048);  // 2,670 fit
}

// Through a sharded model (FULL_SHARD, each block a unit, the root resharded after forward): the
// fused loss runs inside the root's forward, so the head's weight is gathered there and again for
// its backward. GPT-2 (tied) and Llama tied and untied, packed rows too: the loss and every
// shard's gradient equal the unfused path's (fp32; 1e-5 relative, summation order only).
TEST(LinearCrossEntropy, InsideAShardedModelEqualsTheUnfusedPath) {
  for (const std::string& shape : std::vector<std::string>{"gpt2", "llama", "llama-tied"}) {
    SCOPED_TRACE(shape);
    std::vector<ConfigOverride> o = {{"model.n_layer", "2"}, {"data.seq_len", "16"}};
    if (shape == "gpt2") {
      o.insert(o.end(),
               {{"model.n_embd", "32"}, {"model.n_head", "4"}, {"model.vocab_size", "97"}});
    } else {
      o.insert(o.end(), {{"model.type", "llama"},
                         {"model.dim", "32"},
                         {"model.n_head", "4"},
                         {"model.n_kv_head", "2"},
                         {"model.intermediate_size", "48"},
                         {"model.vocab_size", "97"},
                         {"model.tie_embeddings", shape == "llama-tied" ? "true" : "false"}});
    }
    const TrainConfig c = load_config("", o);
    torch::manual_seed(5);
    const at::Tensor ids = torch::randint(0, 97, {2, 16}, torch::kLong);
    at::Tensor targets = torch::randint(0, 97, {2, 16}, torch::kLong);
    targets.index_put_({torch::rand({2, 16}) < 0.25}, -100);
    std::vector<int64_t> pos;
    for (int64_t row = 0; row < 2; ++row) {
      for (int64_t j = 0; j < 16; ++j) pos.push_back(j < 6 ? j : j - 6);  // two sequences a row
    }
    const at::Tensor positions = torch::tensor(pos, torch::kLong).view({2, 16});
    auto run = [&](bool fused, bool packed) {
      CausalLM lm = build_model(c);
      ShardingOptions s = c.sharding_options().param_init(lm.param_init);
      s.wrap(WrapPolicy::by_type({shape == "gpt2" ? "GPT2Block" : "LlamaDecoderLayer"}));
      auto sharded = fully_shard(lm.module, make_local_comm(), s);
      const SequenceLayout layout =
          packed ? packed_layout(positions, c10::Device(c10::kCPU)) : SequenceLayout{};
      at::Tensor loss = fused ? lm.loss(ids, layout, LossTargets{targets, true})
                              : gpt2_loss(lm.forward_packed(ids, layout), targets);
      loss.backward();
      std::vector<at::Tensor> grads{loss.detach()};
      for (const UnitShard& u : sharded->shards()) grads.push_back(u.grad.clone());
      return grads;
    };
    for (const bool packed : {false, true}) {
      const auto a = run(true, packed), b = run(false, packed);
      ASSERT_EQ(a.size(), b.size());
      EXPECT_LT(rel(a[0], b[0]), 1e-5) << (packed ? "packed" : "plain");
      for (size_t i = 1; i < a.size(); ++i) {
        EXPECT_LT(rel(a[i], b[i]), 1e-5) << (packed ? "packed" : "plain") << ", unit " << i - 1;
      }
    }
  }
}

}  // namespace
}  // namespace fsdp
