// The attention kernels (fsdp/models/attention.h): the fused kernel of LibTorch 2.x against the
// explicit reference, on the kernel alone and through both models (loss and every gradient), and
// the kernel choice on every LibTorch (auto resolves by version, fused is refused on 1.13).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <string>

#include "compat.h"
#include "fsdp/models/attention.h"
#include "fsdp/models/gpt2.h"
#include "fsdp/models/llama.h"
#include "model_test_util.h"

namespace fsdp {
namespace {

#define SKIP_WITHOUT_FUSED_ATTENTION()                             \
  if (!compat::kHasFusedAttention)                                 \
  GTEST_SKIP() << "LibTorch " TORCH_VERSION                        \
                  " has no at::scaled_dot_product_attention (2.0 " \
                  "and later): only the explicit kernel exists here"

struct Qkv {
  at::Tensor q, k, v;
};

// [B=2, nh=3, T=37, hs=16], T odd so that no block size of a fused kernel divides it.
Qkv random_qkv(at::ScalarType dtype) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  auto draw = [&] {
    return at::randn({2, 3, 37, 16}, gen, at::kFloat).to(dtype).requires_grad_(true);
  };
  return {draw(), draw(), draw()};
}

// Output and the gradients of q, k, v for a fixed upstream gradient.
std::vector<at::Tensor> run(const Qkv& in, AttentionKernel kernel, bool softmax_in_fp32) {
  for (const auto& t : {in.q, in.k, in.v}) t.mutable_grad() = at::Tensor();
  at::Tensor y = causal_attention(in.q, in.k, in.v, kernel, softmax_in_fp32);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  y.backward(at::randn(y.sizes(), gen, at::kFloat).to(y.scalar_type()));
  return {y.detach(), in.q.grad(), in.k.grad(), in.v.grad()};
}

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

TEST(Attention, AutoIsFusedExactlyWhereTheLibTorchHasIt) {
  const Qkv in = random_qkv(at::kFloat);
  const auto expected =
      compat::kHasFusedAttention ? AttentionKernel::kFused : AttentionKernel::kExplicit;
  for (bool fp32_softmax : {false, true}) {
    const auto a = run(in, AttentionKernel::kAuto, fp32_softmax);
    const auto b = run(in, expected, fp32_softmax);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i], b[i])) << "tensor " << i;
  }
}

TEST(Attention, FusedIsRefusedOnlyWhereItIsMissing) {
  GPT2Config g = GPT2Config::tiny();
  LlamaConfig l = LlamaConfig::tiny();
  g.attention = l.attention = AttentionKernel::kFused;
  if (compat::kHasFusedAttention) {
    EXPECT_NO_THROW(g.validate());
    EXPECT_NO_THROW(l.validate());
    return;
  }
  try {
    g.validate();
    FAIL() << "GPT2Config accepted attention = fused on LibTorch " TORCH_VERSION;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("GPT2Config.attention = fused needs LibTorch 2.0"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(l.validate(), std::invalid_argument);
}

// fp32: the two kernels sum the same products in other orders (the fused one in blocks, with an
// online softmax). Each output is a convex combination of 37 rows of v (|v| < 5), so rounding
// differences stay within a few ulps of 5 times the terms summed: 37 * 5 * 2^-23 = 2.2e-5 at the
// very worst; 1e-5 leaves a factor of 100 over what we measure (about 1e-7). The gradients are
// sums of as many products of the same inputs and the upstream gradient (|dy| < 5), softmax
// Jacobian entries bounded by 1: the same argument holds relative to each gradient's largest
// element, so each tensor is compared relative to max(1, its largest magnitude).
TEST(Attention, FusedMatchesExplicitFp32) {
  SKIP_WITHOUT_FUSED_ATTENTION();
  const Qkv in = random_qkv(at::kFloat);
  for (bool fp32_softmax : {false, true}) {
    const auto fused = run(in, AttentionKernel::kFused, fp32_softmax);
    const auto ref = run(in, AttentionKernel::kExplicit, fp32_softmax);
    for (size_t i = 0; i < fused.size(); ++i) {
      const double scale = std::max(1.0, ref[i].abs().max().item<double>());
      EXPECT_LT(max_diff(fused[i], ref[i]) / scale, 1e-5) << "tensor " << i;
    }
  }
}

// bf16: both against the fp64 explicit reference on the same (bf16-rounded) inputs. The fused
// kernel accumulates in fp32 and rounds its output once (relative 2^-8 of |y| < 5: 0.02); the
// explicit one rounds the scores, the probabilities and the output, each to 2^-8. Both must be
// within 0.1 (5x one rounding of the output), and the fused kernel no worse than the explicit one
// give or take 1.5x: each figure is the maximum over 3552 outputs, which one unlucky rounding of
// 2^-8 * 5 = 0.02 can decide either way.
TEST(Attention, FusedIsNoLessExactThanExplicitInBf16) {
  SKIP_WITHOUT_FUSED_ATTENTION();
  const Qkv in = random_qkv(at::kBFloat16);
  Qkv ref{in.q.detach().to(at::kDouble), in.k.detach().to(at::kDouble),
          in.v.detach().to(at::kDouble)};
  const at::Tensor exact = causal_attention(ref.q, ref.k, ref.v, AttentionKernel::kExplicit, false);
  const double fused = max_diff(run(in, AttentionKernel::kFused, true)[0], exact);
  const double expl = max_diff(run(in, AttentionKernel::kExplicit, true)[0], exact);
  EXPECT_LT(fused, 0.1);
  EXPECT_LT(expl, 0.1);
  EXPECT_LE(fused, expl * 1.5) << "fused " << fused << ", explicit " << expl;
}

// A model's loss and every parameter's gradient under both kernels, same weights and batch; the
// relative tolerance covers the attention difference above carried through the blocks.
template <class Model, class Config>
void expect_models_agree(Config config) {
  const at::Tensor tokens = test::random_tokens(3, 29, config.vocab_size, 5);
  auto loss_and_grads = [&](AttentionKernel kernel) {
    config.attention = kernel;
    Model model(config);
    at::Tensor logits = model->forward(tokens);
    at::Tensor loss = at::cross_entropy_loss(logits.view({-1, logits.size(-1)}).slice(0, 0, -1),
                                             tokens.view({-1}).slice(0, 1));
    loss.backward();
    std::map<std::string, at::Tensor> out{{"loss", loss.detach()}};
    for (const auto& [name, p] : test::params_by_name(*model)) out[name] = p.grad();
    return out;
  };
  const auto fused = loss_and_grads(AttentionKernel::kFused);
  const auto ref = loss_and_grads(AttentionKernel::kExplicit);
  ASSERT_EQ(fused.size(), ref.size());
  for (const auto& [name, r] : ref) {
    const double scale = std::max(1.0, r.abs().max().template item<double>());
    EXPECT_LT(max_diff(fused.at(name), r) / scale, 1e-5) << name;
  }
}

TEST(Attention, Gpt2TrainsTheSameWithEitherKernel) {
  SKIP_WITHOUT_FUSED_ATTENTION();
  expect_models_agree<GPT2>(GPT2Config::tiny());
}

TEST(Attention, LlamaTrainsTheSameWithEitherKernel) {
  SKIP_WITHOUT_FUSED_ATTENTION();
  expect_models_agree<Llama>(LlamaConfig::tiny());  // grouped queries: 4 heads over 2 kv heads
}

}  // namespace
}  // namespace fsdp
