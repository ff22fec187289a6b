// GPT-2 model tests: Hugging Face names, shapes and parameter count; forward shape and causality;
// initialisation that depends only on (seed, parameter name); the fsdp::forward seam around each
// block; configuration and input errors.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "fsdp/hooks.h"
#include "fsdp/models/gpt2.h"
#include "model_test_util.h"

namespace fsdp {
namespace {

using test::params_by_name;
using test::random_tokens;
using test::ScalingHooks;

// The parameter names and shapes of transformers' GPT2LMHeadModel (lm_head.weight is tied to
// transformer.wte.weight and so not listed), in its registration order.
std::vector<std::pair<std::string, std::vector<int64_t>>> hf_gpt2_params(const GPT2Config& c) {
  const int64_t C = c.n_embd;
  std::vector<std::pair<std::string, std::vector<int64_t>>> out = {
      {"transformer.wte.weight", {c.vocab_size, C}},
      {"transformer.wpe.weight", {c.n_positions, C}}};
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string h = "transformer.h." + std::to_string(i) + ".";
    out.push_back({h + "ln_1.weight", {C}});
    out.push_back({h + "ln_1.bias", {C}});
    out.push_back({h + "attn.c_attn.weight", {C, 3 * C}});
    out.push_back({h + "attn.c_attn.bias", {3 * C}});
    out.push_back({h + "attn.c_proj.weight", {C, C}});
    out.push_back({h + "attn.c_proj.bias", {C}});
    out.push_back({h + "ln_2.weight", {C}});
    out.push_back({h + "ln_2.bias", {C}});
    out.push_back({h + "mlp.c_fc.weight", {C, 4 * C}});
    out.push_back({h + "mlp.c_fc.bias", {4 * C}});
    out.push_back({h + "mlp.c_proj.weight", {4 * C, C}});
    out.push_back({h + "mlp.c_proj.bias", {C}});
  }
  out.push_back({"transformer.ln_f.weight", {C}});
  out.push_back({"transformer.ln_f.bias", {C}});
  return out;
}

TEST(GPT2, NamesShapesAndCountMatchHuggingFace124M) {
  GPT2 model(GPT2Config::gpt2_124m());
  const auto expected = hf_gpt2_params(model->config());
  const auto named = model->named_parameters();
  ASSERT_EQ(named.size(), expected.size());
  int64_t count = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(named[i].key(), expected[i].first);
    EXPECT_EQ(named[i].value().sizes().vec(), expected[i].second) << expected[i].first;
    count += named[i].value().numel();
  }
  EXPECT_EQ(count, 124439808);  // GPT-2 small with tied embeddings
  EXPECT_EQ(model->parameters().size(), expected.size());
  EXPECT_EQ(model->blocks().size(), 12u);
}

TEST(GPT2, ForwardShape) {
  GPT2 model(GPT2Config::tiny());
  at::Tensor logits = model->forward(random_tokens(3, 10, 256, 1));
  EXPECT_EQ(logits.sizes().vec(), (std::vector<int64_t>{3, 10, 256}));
  EXPECT_EQ(logits.scalar_type(), at::kFloat);
}

TEST(GPT2, LogitsAtTDoNotSeeLaterTokens) {
  GPT2 model(GPT2Config::tiny());
  init_gpt2_weights(*model, 5);
  torch::NoGradGuard no_grad;
  const int64_t T = 12, t = 6;
  at::Tensor idx = random_tokens(2, T, 256, 2);
  at::Tensor changed = idx.clone();
  changed.narrow(1, t + 1, T - t - 1).random_(256);
  changed.select(1, t + 1).add_(1).remainder_(256);  // surely different at t + 1
  at::Tensor a = model->forward(idx), b = model->forward(changed);
  EXPECT_TRUE(at::allclose(a.narrow(1, 0, t + 1), b.narrow(1, 0, t + 1), 0, 1e-6));
  EXPECT_FALSE(at::allclose(a.narrow(1, t + 1, 1), b.narrow(1, t + 1, 1), 0, 1e-6));
}

TEST(GPT2, InitIsDeterministicPerSeed) {
  GPT2 a(GPT2Config::tiny()), b(GPT2Config::tiny()), c(GPT2Config::tiny());
  init_gpt2_weights(*a, 11);
  init_gpt2_weights(*b, 11);
  init_gpt2_weights(*c, 12);
  auto pa = params_by_name(*a), pb = params_by_name(*b), pc = params_by_name(*c);
  for (const auto& [name, p] : pa) {
    EXPECT_TRUE(at::equal(p, pb[name])) << name;
    const bool random = p.dim() >= 2;
    EXPECT_EQ(at::equal(p, pc[name]), !random) << name;
  }
}

TEST(GPT2, InitDependsOnlyOnSeedAndName) {
  GPT2Config c2 = GPT2Config::tiny(), c3 = GPT2Config::tiny();
  c3.n_layer = 3;
  GPT2 a(c2), b(c3);
  init_gpt2_weights(*a, 3);
  init_gpt2_weights(*b, 3);
  auto pa = params_by_name(*a), pb = params_by_name(*b);
  // Residual projections are drawn from the same N(0, 1) sample scaled by 0.02/sqrt(2 n_layer).
  const double ratio = std::sqrt(2.0 * 3) / std::sqrt(2.0 * 2);
  for (const auto& [name, p] : pa) {
    ASSERT_TRUE(pb.count(name)) << name;
    if (name.find("c_proj.weight") != std::string::npos) {
      EXPECT_TRUE(at::allclose(p, pb[name] * ratio, 1e-6, 0)) << name;
    } else {
      EXPECT_TRUE(at::equal(p, pb[name])) << name;
    }
  }
}

TEST(GPT2, InitStatistics) {
  GPT2Config c = GPT2Config::tiny();
  c.n_embd = 128;
  GPT2 model(c);
  init_gpt2_weights(*model, 9);
  auto p = params_by_name(*model);
  EXPECT_NEAR(p["transformer.wte.weight"].std().item<double>(), 0.02, 0.001);
  EXPECT_NEAR(p["transformer.h.1.mlp.c_fc.weight"].std().item<double>(), 0.02, 0.001);
  EXPECT_NEAR(p["transformer.h.1.mlp.c_proj.weight"].std().item<double>(), 0.01, 0.0005);
  EXPECT_TRUE(at::equal(p["transformer.h.0.ln_1.weight"], at::ones({128})));
  EXPECT_TRUE(at::equal(p["transformer.h.0.attn.c_attn.bias"], at::zeros({384})));
}

TEST(GPT2, LossAtInitIsNearLogV) {
  GPT2 model(GPT2Config::tiny());
  init_gpt2_weights(*model, 21);
  at::Tensor idx = random_tokens(4, 33, 256, 3);
  at::Tensor loss = gpt2_loss(model->forward(idx.narrow(1, 0, 32)), idx.narrow(1, 1, 32));
  EXPECT_NEAR(loss.item<double>(), std::log(256.0), 0.05);
}

TEST(GPT2, BackwardReachesEveryParameterAndTiedEmbeddingGetsBothPaths) {
  GPT2 model(GPT2Config::tiny());
  at::Tensor idx = random_tokens(2, 9, 256, 4);
  gpt2_loss(model->forward(idx.narrow(1, 0, 8)), idx.narrow(1, 1, 8)).backward();
  for (const auto& item : model->named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
  }
  // Rows of tokens absent from the input still get gradient through the output projection.
  at::Tensor wte_grad = model->transformer()->wte->weight.grad();
  EXPECT_GT(wte_grad.abs().sum(1).gt(0).sum().item<int64_t>(), 16);
}

// gpt2_loss is its own autograd function (chunks of rows in fp32; it keeps the logits and makes
// their gradient, no more). Checked against LibTorch's cross entropy after a cast to fp32, both
// measured against the same in fp64: each lse sums V terms, in another order than LibTorch's, so
// the two differ by rounding that grows with V (at 131072 entries 1.3e-6 of the loss and 2.5e-5
// of a gradient element); ours may be off fp64 by at most twice LibTorch's own error, plus 4 ulps.
// bf16 logits: both round the same fp32 gradient once, but a differently summed lse can land a
// value across a rounding step, one bf16 ulp (2^-8 relative). Targets of -100 are ignored, as
// there.
void expect_libtorch_cross_entropy(int64_t B, int64_t T, int64_t V, at::ScalarType dtype) {
  SCOPED_TRACE(std::to_string(B) + " x " + std::to_string(T) + " x " + std::to_string(V) + " " +
               c10::toString(dtype));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  const at::Tensor base = at::randn({B, T, V}, gen, at::kFloat).mul(4);
  at::Tensor targets = at::randint(V, {B, T}, gen, at::kLong);
  targets[B - 1][T / 2] = -100;
  targets[0][0] = -100;
  // Three leaves of their own: ours, LibTorch's in fp32, LibTorch's in fp64.
  at::Tensor ours = base.to(dtype).clone().requires_grad_(true);
  at::Tensor theirs = base.to(dtype).clone().requires_grad_(true);
  at::Tensor exact = base.to(dtype).to(at::kDouble).requires_grad_(true);
  const auto libtorch = [&](const at::Tensor& x, at::ScalarType t) {
    return at::cross_entropy_loss(x.reshape({-1, V}).to(t), targets.reshape({-1}));
  };
  at::Tensor loss = gpt2_loss(ours, targets);
  at::Tensor reference = libtorch(theirs, at::kFloat);
  at::Tensor reference64 = libtorch(exact, at::kDouble);
  EXPECT_EQ(loss.scalar_type(), at::kFloat);
  const double l64 = reference64.item<double>(), eps = 1.2e-7;
  EXPECT_LE(std::abs(loss.item<double>() - l64),
            2 * std::abs(reference.item<double>() - l64) + 4 * eps * l64);
  (loss * 3).backward();
  (reference * 3).backward();
  (reference64 * 3).backward();
  EXPECT_EQ(ours.grad().scalar_type(), dtype);
  if (dtype == at::kFloat) {
    const double ours_error =
        (ours.grad().to(at::kDouble) - exact.grad()).abs().max().item<double>();
    const double their_error =
        (theirs.grad().to(at::kDouble) - exact.grad()).abs().max().item<double>();
    const double largest = exact.grad().abs().max().item<double>();
    EXPECT_LE(ours_error, 2 * their_error + 4 * eps * largest);
  } else {
    EXPECT_TRUE(at::allclose(ours.grad().to(at::kFloat), theirs.grad().to(at::kFloat), 8e-3, 1e-7));
  }
  EXPECT_EQ(ours.grad()[0][0].abs().sum().item<double>(), 0);  // an ignored position
}

TEST(GPT2, LossAndGradientAreLibTorchsCrossEntropy) {
  expect_libtorch_cross_entropy(3, 5, 301, at::kFloat);
  expect_libtorch_cross_entropy(3, 5, 301, at::kBFloat16);
  // Rows of 128 Ki entries: 128 in each 64 MiB chunk of fp32 scratch, so two chunks, the second
  // of 2 rows.
  expect_libtorch_cross_entropy(1, 130, 131072, at::kFloat);
}

TEST(GPT2, RunsInBFloat16) {
  GPT2 model(GPT2Config::tiny());
  model->to(at::kBFloat16);
  at::Tensor idx = random_tokens(2, 9, 256, 6);
  at::Tensor logits = model->forward(idx.narrow(1, 0, 8));
  EXPECT_EQ(logits.scalar_type(), at::kBFloat16);
  at::Tensor loss = gpt2_loss(logits, idx.narrow(1, 1, 8));
  EXPECT_EQ(loss.scalar_type(), at::kFloat);
  EXPECT_NEAR(loss.item<double>(), std::log(256.0), 0.1);
}

// Golden numbers from tests/golden/gpt2_reference.py: an independent PyTorch transcription of
// Hugging Face's GPT2LMHeadModel, fed weights both sides compute from the same formula.
at::Tensor golden_formula(int64_t k, at::IntArrayRef shape, double scale, double offset) {
  const int64_t n = c10::multiply_integers(shape);
  return at::arange(n, at::kDouble)
      .mul(0.1)
      .add(k)
      .sin()
      .mul(scale)
      .add(offset)
      .to(at::kFloat)
      .view(shape);
}

TEST(GPT2, GoldenAgainstPyTorch) {
  GPT2Config c;
  c.vocab_size = 97;
  c.n_positions = 16;
  c.n_embd = 32;
  c.n_layer = 2;
  c.n_head = 4;
  GPT2 model(c);
  {
    torch::NoGradGuard no_grad;
    int64_t k = 0;
    for (auto& item : model->named_parameters()) {
      const std::string& name = item.key();
      double scale = 0.3, offset = 0;
      if (name == "transformer.wte.weight") scale = 0.15;
      if (name.find("c_proj.weight") != std::string::npos) scale = 0.2;
      if (name.find(".bias") != std::string::npos) scale = 0.05;
      if (name.find("ln_") != std::string::npos && name.find(".weight") != std::string::npos) {
        scale = 0.1;
        offset = 1.0;
      }
      item.value().copy_(golden_formula(k++, item.value().sizes(), scale, offset));
    }
  }
  const int64_t B = 2, T = 12;
  at::Tensor tokens = at::empty({B, T + 1}, at::kLong);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t <= T; ++t) tokens[b][t] = (b * 31 + t * 17 + 5) % c.vocab_size;
  }
  at::Tensor logits = model->forward(tokens.narrow(1, 0, T));
  const double loss = gpt2_loss(logits, tokens.narrow(1, 1, T)).item<double>();
  EXPECT_NEAR(loss, 6.54617119, 1e-5);
  EXPECT_NEAR(logits[0][0][0].item<double>(), 0.518634677, 1e-5);
  EXPECT_NEAR(logits[0][5][17].item<double>(), 2.88531208, 1e-5);
  EXPECT_NEAR(logits[1][11][96].item<double>(), 2.09789062, 1e-5);
  EXPECT_NEAR(logits[1][7][40].item<double>(), -2.27090549, 1e-5);
}

TEST(GPT2, BlocksAreCalledThroughFsdpForward) {
  GPT2 model(GPT2Config::tiny());
  init_gpt2_weights(*model, 8);
  torch::NoGradGuard no_grad;
  at::Tensor idx = random_tokens(2, 8, 256, 7);
  at::Tensor plain = model->forward(idx);

  const torch::nn::Module* block0 = model->blocks()[0].get();
  auto identity = std::make_shared<ScalingHooks>(1.0);
  set_module_hooks(block0, identity);
  at::Tensor hooked = model->forward(idx);
  EXPECT_EQ(identity->pre, 1);
  EXPECT_EQ(identity->post, 1);
  EXPECT_TRUE(at::equal(plain, hooked));

  auto scaling = std::make_shared<ScalingHooks>(2.0);
  set_module_hooks(block0, scaling);
  at::Tensor scaled = model->forward(idx);
  set_module_hooks(block0, nullptr);
  EXPECT_EQ(scaling->post, 1);
  EXPECT_FALSE(at::allclose(plain, scaled));
  EXPECT_TRUE(at::equal(plain, model->forward(idx)));  // removed: plain call again
}

void expect_invalid(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected std::invalid_argument mentioning " << needle;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(GPT2, ValidateNamesTheBadField) {
  auto with = [](const std::function<void(GPT2Config&)>& edit) {
    GPT2Config c = GPT2Config::tiny();
    edit(c);
    return c;
  };
  expect_invalid([&] { with([](GPT2Config& c) { c.n_head = 3; }).validate(); }, "n_embd (64)");
  expect_invalid([&] { with([](GPT2Config& c) { c.vocab_size = 0; }).validate(); }, "vocab_size");
  expect_invalid([&] { with([](GPT2Config& c) { c.n_positions = -1; }).validate(); },
                 "n_positions");
  expect_invalid([&] { with([](GPT2Config& c) { c.n_layer = 0; }).validate(); }, "n_layer");
  expect_invalid([&] { with([](GPT2Config& c) { c.layer_norm_eps = 0; }).validate(); },
                 "layer_norm_eps");
  expect_invalid([&] { GPT2 m(with([](GPT2Config& c) { c.n_head = 0; })); }, "n_head");
  GPT2Config::gpt2_124m().validate();
  GPT2Config::tiny().validate();
}

TEST(GPT2, ForwardRejectsBadInput) {
  GPT2 model(GPT2Config::tiny());
  expect_invalid([&] { model->forward(random_tokens(1, 65, 256, 1)); }, "n_positions = 64");
  expect_invalid([&] { model->forward(random_tokens(1, 8, 256, 1).to(at::kInt)); }, "int64");
  expect_invalid([&] { model->forward(at::zeros({8}, at::kLong)); }, "[B, T]");
}

}  // namespace
}  // namespace fsdp
