// The sharding runtime's bookkeeping: memory bounds from the accounting, shard sizes, the state
// after forward under each strategy, and errors for bad input (which must come before any
// collective, on every rank alike, so that nothing hangs).
#include <gtest/gtest.h>

#include "fsdp/fsdp.h"
#include "test_util.h"

namespace fsdp {
namespace {

GPT2Config small_config() {
  GPT2Config c;
  c.vocab_size = 97;
  c.n_positions = 16;
  c.n_embd = 48;
  c.n_layer = 3;
  c.n_head = 4;
  return c;
}

struct Sharded {
  GPT2 model;
  std::shared_ptr<FullyShardedModel> fsdp;
};

Sharded shard_small(ShardingStrategy strategy) {
  GPT2 model(small_config());
  init_gpt2_weights(*model, 7);
  auto fsdp =
      fully_shard(model.ptr(), test::world(),
                  ShardingOptions().strategy(strategy).wrap(WrapPolicy::by_type({"GPT2Block"})));
  return {model, fsdp};
}

at::Tensor step_tokens(int64_t rows) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(99);
  return at::randint(small_config().vocab_size, {rows, small_config().n_positions + 1}, gen,
                     at::kLong);
}

void train_step(Sharded& s) {
  at::Tensor t = step_tokens(2);
  const int64_t T = small_config().n_positions;
  gpt2_loss(fsdp::forward(s.model, t.narrow(1, 0, T)), t.narrow(1, 1, T)).backward();
}

int64_t unit_bytes(const UnitInfo& u) { return u.padded_numel * 4; }

int64_t param_count(GPT2& model) {
  int64_t count = 0;
  for (const auto& p : model->parameters()) count += p.numel();
  return count;
}

TEST(Memory, FullShardGathersAtMostTwoUnitsPlusRoot) {
  Sharded s = shard_small(ShardingStrategy::kFullShard);
  auto units = s.fsdp->units();
  ASSERT_EQ(units.size(), 4u);  // three blocks and the root
  int64_t largest = 0;
  for (size_t i = 0; i + 1 < units.size(); ++i) largest = std::max(largest, unit_bytes(units[i]));
  const int64_t root = unit_bytes(units.back());
  const int n = test::world()->size();
  for (int step = 0; step < 3; ++step) {
    s.fsdp->reset_peak_memory();
    train_step(s);
    MemoryStats m = s.fsdp->memory();
    if (n > 1) {
      EXPECT_LE(m.peak_gathered_param_bytes, root + 2 * largest);
      EXPECT_GE(m.peak_gathered_param_bytes, root + largest);  // the accounting saw the gathers
    } else {
      EXPECT_EQ(m.peak_gathered_param_bytes, 0);  // one fp32 shard is the full parameter
    }
    EXPECT_EQ(m.gathered_param_bytes, 0) << "everything resharded after backward";
    EXPECT_EQ(m.grad_buffer_bytes, 0) << "gradient buffers released after backward";
  }
}

TEST(Memory, ShardedStateIsAboutOneNth) {
  Sharded s = shard_small(ShardingStrategy::kFullShard);
  const int n = test::world()->size();
  int64_t total = 0, padded = 0;
  for (const auto& u : s.fsdp->units()) {
    total += u.numel;
    padded += u.padded_numel;
    EXPECT_EQ(u.padded_numel % n, 0);
    EXPECT_LT(u.padded_numel - u.numel, n);
  }
  EXPECT_EQ(total, param_count(s.model));
  MemoryStats m = s.fsdp->memory();
  EXPECT_EQ(m.sharded_param_bytes, padded * 4 / n);
  EXPECT_EQ(m.sharded_grad_bytes, padded * 4 / n);
  EXPECT_LE(m.sharded_param_bytes, (total * 4) / n + 4 * 4);  // padding: < 1 element per unit
}

TEST(Memory, NoShardKeepsFullReplicas) {
  Sharded s = shard_small(ShardingStrategy::kNoShard);
  EXPECT_EQ(s.fsdp->memory().sharded_param_bytes, param_count(s.model) * 4);
  train_step(s);
  EXPECT_EQ(s.fsdp->memory().peak_gathered_param_bytes, 0);
}

// After forward, before backward: FULL_SHARD-like strategies hold only the root's parameters,
// SHARD_GRAD_OP-like ones hold every unit's.
void expect_gathered_after_forward(ShardingOptions options, bool all_units) {
  if (test::world()->size() == 1) GTEST_SKIP() << "nothing is gathered with one fp32 shard";
  GPT2 model(small_config());
  auto sharded =
      fully_shard(model.ptr(), test::world(), options.wrap(WrapPolicy::by_type({"GPT2Block"})));
  at::Tensor t = step_tokens(2);
  const int64_t T = small_config().n_positions;
  at::Tensor loss = gpt2_loss(fsdp::forward(model, t.narrow(1, 0, T)), t.narrow(1, 1, T));
  const int shards = sharded->shard_group().size();
  int64_t expected = unit_bytes(sharded->units().back());  // the root
  if (all_units) {
    for (const auto& u : sharded->units()) expected += unit_bytes(u);
    expected -= unit_bytes(sharded->units().back());
  }
  EXPECT_EQ(sharded->memory().gathered_param_bytes, shards > 1 ? expected : 0);
  loss.backward();
  EXPECT_EQ(sharded->memory().gathered_param_bytes, 0);
}

TEST(State, ShardGradOpKeepsBlocksUntilBackward) {
  expect_gathered_after_forward(ShardingOptions().strategy(ShardingStrategy::kShardGradOp), true);
}

TEST(State, FullShardFreesBlocksAfterForward) {
  expect_gathered_after_forward(ShardingOptions().strategy(ShardingStrategy::kFullShard), false);
}

TEST(State, HybridStrategiesFollowTheirInnerStrategy) {
  if (test::world()->size() % 2 != 0) GTEST_SKIP() << "needs an even world size";
  auto hybrid = [](ShardingStrategy s) {
    return ShardingOptions().strategy(s).shard_group_size(2);
  };
  expect_gathered_after_forward(hybrid(ShardingStrategy::kHybridShard), false);
  expect_gathered_after_forward(hybrid(ShardingStrategy::kHybridShardZero2), true);
}

TEST(State, EvalForwardReshardsEverything) {
  Sharded s = shard_small(ShardingStrategy::kShardGradOp);
  at::Tensor t = step_tokens(2);
  torch::NoGradGuard no_grad;
  at::Tensor logits = fsdp::forward(s.model, t.narrow(1, 0, small_config().n_positions));
  EXPECT_EQ(logits.size(2), small_config().vocab_size);
  EXPECT_EQ(s.fsdp->memory().gathered_param_bytes, 0);
}

// Two wrapped blocks share one weight: it must live in a single unit (the root, gathered
// throughout), and training must match plain autograd.
struct TiedBlockImpl : torch::nn::Module {
  TiedBlockImpl(at::Tensor shared, int64_t dim) {
    w = register_parameter("w", shared);
    b = register_parameter("b", torch::zeros({dim}));
  }
  at::Tensor forward(const at::Tensor& x) { return torch::tanh(x.matmul(w) + b); }
  at::Tensor w, b;
};
TORCH_MODULE(TiedBlock);

struct TiedNetImpl : torch::nn::Module {
  explicit TiedNetImpl(int64_t dim) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
    at::Tensor shared = at::randn({dim, dim}, gen);
    a = register_module("a", TiedBlock(shared, dim));
    b = register_module("b", TiedBlock(shared, dim));
    head = register_parameter("head", at::randn({dim}, gen));
  }
  at::Tensor forward(const at::Tensor& x) {
    return (fsdp::forward(b, fsdp::forward(a, x)) * head).sum();
  }
  TiedBlock a{nullptr}, b{nullptr};
  at::Tensor head;
};
TORCH_MODULE(TiedNet);

TEST(TiedParameters, StayInOneUnitAndTrainLikeOneProcess) {
  constexpr int64_t kDim = 5;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  const at::Tensor x = at::randn({6, kDim}, gen);
  TiedNet reference(kDim);
  reference->forward(x).backward();
  std::map<std::string, at::Tensor> expected;
  for (const auto& p : reference->named_parameters()) {
    expected[p.key()] = (p.value() - 0.1 * p.value().grad()).detach();
  }

  TiedNet net(kDim);
  auto sharded = fully_shard(net.ptr(), test::world(),
                             ShardingOptions().wrap(WrapPolicy::by_type({"TiedBlock"})));
  auto units = sharded->units();
  ASSERT_EQ(units.size(), 3u);
  const auto& root_names = units.back().param_names;
  EXPECT_NE(std::find(root_names.begin(), root_names.end(), "a.w"), root_names.end());
  for (size_t i = 0; i + 1 < units.size(); ++i) EXPECT_EQ(units[i].param_names.size(), 1u);

  std::vector<ShardedParam> params = sharded_params(*sharded);
  SGDOptions sgd;
  sgd.lr = 0.1;
  SGD opt(params, sgd);
  // Every rank feeds the same batch, so the averaged gradient equals the single-process one.
  fsdp::forward(net, x).backward();
  opt.step();
  auto got = sharded->gather_full_params();
  for (const auto& [name, value] : expected) {
    ASSERT_TRUE(got.count(name)) << name;
    EXPECT_TRUE(at::allclose(got.at(name), value, 1e-5, 1e-6)) << name;
  }
}

TEST(BadInput, UnknownStrategyName) {
  EXPECT_THROW(parse_sharding_strategy("FULLY_SHARDED"), std::invalid_argument);
  EXPECT_EQ(parse_sharding_strategy("shard_grad_op"), ShardingStrategy::kShardGradOp);
  EXPECT_EQ(parse_sharding_strategy("3"), ShardingStrategy::kNoShard);
  try {
    parse_sharding_strategy("7");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("FULL_SHARD"), std::string::npos) << e.what();
  }
}

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    FAIL() << "expected an error mentioning '" << needle << "'";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(BadInput, WrapPolicyMatchingNothing) {
  GPT2 model(small_config());
  expect_error(
      [&] {
        fully_shard(model.ptr(), test::world(),
                    ShardingOptions().wrap(WrapPolicy::by_type({"LlamaBlock"})));
      },
      "matched no module");
  expect_error(
      [&] {
        fully_shard(model.ptr(), test::world(),
                    ShardingOptions().wrap(WrapPolicy::by_name({"transformer.h.9"})));
      },
      "transformer.h.9");
  expect_error(
      [&] {
        fully_shard(model.ptr(), test::world(),
                    ShardingOptions().wrap(WrapPolicy::by_size(1000000000)));
      },
      "matched no module");
}

TEST(BadInput, WorldLargerThanParameterCount) {
  const int n = test::world()->size();
  if (n == 1) GTEST_SKIP() << "needs a world size above the parameter count";
  auto tiny = std::make_shared<torch::nn::LinearImpl>(torch::nn::LinearOptions(1, 1).bias(false));
  expect_error([&] { fully_shard(tiny, test::world()); },
               "larger than the model's parameter count");
}

TEST(BadInput, HybridMeshMustDivideTheWorld) {
  const int n = test::world()->size();
  if (n < 2) GTEST_SKIP() << "needs two ranks or more";
  GPT2 model(small_config());
  expect_error(
      [&] {
        fully_shard(
            model.ptr(), test::world(),
            ShardingOptions().strategy(ShardingStrategy::kHybridShard).shard_group_size(n + 1));
      },
      "does not divide the world size");
  expect_error(
      [&] {
        fully_shard(
            model.ptr(), test::world(),
            ShardingOptions().strategy(ShardingStrategy::kHybridShard).shard_group_size(-2));
      },
      "shard_group_size must be positive");
  expect_error(
      [&] { fully_shard(model.ptr(), test::world(), ShardingOptions().shard_group_size(2)); },
      "applies to HYBRID_SHARD and HYBRID_SHARD_ZERO2 only");
}

TEST(Memory, HybridShardsWithinTheGroup) {
  const int n = test::world()->size();
  if (n % 2 != 0) GTEST_SKIP() << "needs an even world size";
  GPT2 model(small_config());
  auto sharded = fully_shard(model.ptr(), test::world(),
                             ShardingOptions()
                                 .strategy(ShardingStrategy::kHybridShard)
                                 .shard_group_size(2)
                                 .wrap(WrapPolicy::by_type({"GPT2Block"})));
  int64_t padded = 0;
  for (const auto& u : sharded->units()) padded += u.padded_numel;
  EXPECT_EQ(sharded->shard_group().size(), 2);
  EXPECT_EQ(sharded->memory().sharded_param_bytes, padded * 4 / 2);
}

TEST(BadInput, Fp16ComputeIsRefused) {
  GPT2 model(small_config());
  expect_error(
      [&] {
        fully_shard(model.ptr(), test::world(), ShardingOptions().param_dtype(DType::kFloat16));
      },
      "param_dtype fp16 is not supported");
}

TEST(BadInput, ShardingTwice) {
  Sharded s = shard_small(ShardingStrategy::kFullShard);
  expect_error([&] { fully_shard(s.model.ptr(), test::world()); }, "already sharded");
}

}  // namespace
}  // namespace fsdp
