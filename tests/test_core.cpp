// The sharding runtime's bookkeeping: memory bounds from the accounting, shard sizes, the state
// after forward under each strategy, and errors for bad input (which must come before any
// collective, on every rank alike, so that nothing hangs).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "compat.h"
#include "core/split_reduce.h"
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

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    FAIL() << "expected an error mentioning '" << needle << "'";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
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

// ---- Buffer pool, prefetch, reshard_after_forward ---------------------------------------------

Sharded shard_small_with(ShardingOptions options) {
  GPT2 model(small_config());
  init_gpt2_weights(*model, 7);
  auto fsdp =
      fully_shard(model.ptr(), test::world(), options.wrap(WrapPolicy::by_type({"GPT2Block"})));
  return {model, fsdp};
}

// Bytes gathered at the end of a forward (peak and still held) and at the end of its backward
// (peak): the accounting the prefetch tests compare with unit sizes.
struct PassPeaks {
  int64_t forward_peak = 0, after_forward = 0, backward_peak = 0;
};

PassPeaks train_step_peaks(Sharded& s) {
  at::Tensor t = step_tokens(2);
  const int64_t T = small_config().n_positions;
  PassPeaks p;
  s.fsdp->reset_peak_memory();
  at::Tensor loss = gpt2_loss(fsdp::forward(s.model, t.narrow(1, 0, T)), t.narrow(1, 1, T));
  p.forward_peak = s.fsdp->memory().peak_gathered_param_bytes;
  p.after_forward = s.fsdp->memory().gathered_param_bytes;
  s.fsdp->reset_peak_memory();
  loss.backward();
  p.backward_peak = s.fsdp->memory().peak_gathered_param_bytes;
  return p;
}

// Gathered parameters, gradient buffers and reduction scratch come from the pool: after the
// first step no block is new, and the pool holds what one step needs at once, not a step's worth
// of allocations. bf16 parameters and reductions add the cast buffers to the pool's traffic.
TEST(Pool, NoFreshBuffersAfterTheFirstStep) {
  if (test::world()->size() == 1) GTEST_SKIP() << "one fp32 shard gathers nothing";
  Sharded s = shard_small_with(ShardingOptions()
                                   .strategy(ShardingStrategy::kFullShard)
                                   .param_dtype(DType::kBFloat16)
                                   .forward_prefetch(true));
  train_step(s);
  train_step(s);  // the first step only records the unit order; the second prefetches
  const MemoryStats after_two = s.fsdp->memory();
  for (int step = 0; step < 3; ++step) train_step(s);
  const MemoryStats m = s.fsdp->memory();
  EXPECT_GT(after_two.pool_fresh_blocks, 0);
  EXPECT_EQ(m.pool_fresh_blocks, after_two.pool_fresh_blocks) << "a later step allocated afresh";
  EXPECT_EQ(m.pool_bytes, after_two.pool_bytes);
  // Each step takes about 2 blocks per unit (gathered bf16 parameters twice, the bf16 shard copy
  // twice, the gradient buffer, the reduce-scatter's fp32 copy and output): 5 steps of 4 units
  // would be ~100 blocks without reuse.
  EXPECT_LT(m.pool_fresh_blocks, 20);
}

int64_t block_bytes(const Sharded& s, int64_t elem = 4) {
  return s.fsdp->units().front().padded_numel * elem;
}
int64_t root_bytes(const Sharded& s) { return unit_bytes(s.fsdp->units().back()); }

// Forward prefetch gathers the next units while one computes; the rate limit caps how many are
// gathered ahead. Three equal blocks: with depth 3, block 0's forward starts blocks 1 and 2.
TEST(Prefetch, ForwardGathersAheadWithinTheLimit) {
  if (test::world()->size() == 1) GTEST_SKIP() << "one fp32 shard gathers nothing";
  struct Case {
    bool forward;
    int depth, limit;
    int blocks;  // gathered at once at the forward's peak
  };
  for (const Case c :
       {Case{false, 1, 2, 1}, Case{true, 1, 2, 2}, Case{true, 3, 0, 3}, Case{true, 3, 1, 2}}) {
    SCOPED_TRACE("forward_prefetch " + std::to_string(c.forward) + ", depth " +
                 std::to_string(c.depth) + ", limit " + std::to_string(c.limit));
    Sharded s = shard_small_with(ShardingOptions()
                                     .strategy(ShardingStrategy::kFullShard)
                                     .forward_prefetch(c.forward)
                                     .backward_prefetch(BackwardPrefetch::kNoPrefetch)
                                     .prefetch_depth(c.depth)
                                     .limit_all_gathers(c.limit));
    const PassPeaks first = train_step_peaks(s);
    EXPECT_EQ(first.forward_peak, root_bytes(s) + block_bytes(s)) << "step 0 only records";
    for (int step = 1; step < 3; ++step) {
      const PassPeaks p = train_step_peaks(s);
      EXPECT_EQ(p.forward_peak, root_bytes(s) + c.blocks * block_bytes(s));
      EXPECT_EQ(p.after_forward, root_bytes(s));
    }
    // Forward order: root, h.0, h.1, h.2; each unit's forward prefetches what follows it.
    EXPECT_EQ(s.fsdp->memory().used_prefetches, c.forward ? 2 * 3 : 0);
    EXPECT_EQ(s.fsdp->memory().unused_prefetches, 0);
  }
}

// Backward order: root, h.2, h.1, h.0. BACKWARD_PRE gathers the next block when a unit's backward
// begins (the root's starts h.2): three prefetches a step, two blocks held at the peak.
// BACKWARD_POST gathers it once the unit's gradients are computed and its parameters freed: two
// prefetches (h.1 and h.0; the root finishes last), one block at a time. NO_PREFETCH: none.
TEST(Prefetch, BackwardPreAndPost) {
  if (test::world()->size() == 1) GTEST_SKIP() << "one fp32 shard gathers nothing";
  struct Case {
    BackwardPrefetch mode;
    int blocks, prefetches;
  };
  for (const Case c :
       {Case{BackwardPrefetch::kNoPrefetch, 1, 0}, Case{BackwardPrefetch::kBackwardPre, 2, 3},
        Case{BackwardPrefetch::kBackwardPost, 1, 2}}) {
    SCOPED_TRACE(to_string(c.mode));
    Sharded s = shard_small_with(
        ShardingOptions().strategy(ShardingStrategy::kFullShard).backward_prefetch(c.mode));
    train_step_peaks(s);
    const PassPeaks p = train_step_peaks(s);
    EXPECT_EQ(p.backward_peak, root_bytes(s) + c.blocks * block_bytes(s));
    const MemoryStats m = s.fsdp->memory();
    EXPECT_EQ(m.gathered_param_bytes, 0);
    EXPECT_EQ(m.used_prefetches, c.prefetches);
    EXPECT_EQ(m.unused_prefetches, 0);
  }
}

// A unit's reshard_after_forward overrides the strategy, the root's included.
TEST(ReshardAfterForward, PerUnitOverridesTheStrategy) {
  if (test::world()->size() == 1) GTEST_SKIP() << "one fp32 shard gathers nothing";
  Sharded keep = shard_small_with(ShardingOptions()
                                      .strategy(ShardingStrategy::kFullShard)
                                      .reshard_after_forward("transformer.h.1", false));
  EXPECT_EQ(train_step_peaks(keep).after_forward, root_bytes(keep) + block_bytes(keep));
  Sharded free_root = shard_small_with(ShardingOptions()
                                           .strategy(ShardingStrategy::kShardGradOp)
                                           .reshard_after_forward("(root)", true)
                                           .reshard_after_forward("transformer.h.0", true));
  EXPECT_EQ(train_step_peaks(free_root).after_forward, 2 * block_bytes(free_root));
  EXPECT_EQ(free_root.fsdp->memory().gathered_param_bytes, 0);
}

// ---- Activation checkpointing ------------------------------------------------------------------

// A block that counts its forward runs and takes a non-tensor argument (copied for the rerun)
// and a dropout-like random mask (the rerun must draw the same one).
struct CountingBlockImpl : torch::nn::Module {
  explicit CountingBlockImpl(int64_t dim) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
    w = register_parameter("w", at::randn({dim, dim}, gen) / 3);
  }
  at::Tensor forward(const at::Tensor& x, double scale) {
    ++runs;
    const at::Tensor keep = at::rand(x.sizes()) > 0.2;
    return torch::tanh(x.matmul(w)) * keep * scale;
  }
  at::Tensor w;
  int runs = 0;
};
TORCH_MODULE(CountingBlock);

struct CountingNetImpl : torch::nn::Module {
  explicit CountingNetImpl(int64_t dim) {
    a = register_module("a", CountingBlock(dim));
    b = register_module("b", CountingBlock(dim));
    head = register_parameter("head", torch::ones({dim}));
  }
  at::Tensor forward(const at::Tensor& x) {
    return (fsdp::forward(b, fsdp::forward(a, x * head, 0.5), 2.0) * head).sum();
  }
  CountingBlock a{nullptr}, b{nullptr};
  at::Tensor head;
};
TORCH_MODULE(CountingNet);

// Checkpointed blocks run their forward twice per step (once more in backward) and give the
// gradients of the plain run exactly: same kernels, same inputs, same random mask. Every block
// (checkpoint_units "*"), and every second one (checkpoint_every 2: the first block only, of two).
TEST(ActivationCheckpointing, RecomputesAndGivesTheSameGradients) {
  constexpr int64_t kDim = 7;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(17);
  const at::Tensor x = at::randn({5, kDim}, gen);
  std::map<int, std::map<std::string, at::Tensor>> params;  // by checkpoint_every; 0: none
  for (const int every : {0, 1, 2}) {
    CountingNet net(kDim);
    ShardingOptions options = ShardingOptions().wrap(WrapPolicy::by_type({"CountingBlock"}));
    if (every > 0) options.checkpoint_units({"*"}).checkpoint_every(every);
    auto sharded = fully_shard(net.ptr(), test::world(), options);
    std::vector<ShardedParam> shards = sharded_params(*sharded);
    SGD sgd(shards, SGDOptions{0.1});
    for (int step = 0; step < 2; ++step) {
      at::manual_seed(100 + step);  // the same masks in every run
      sgd.zero_grad();
      fsdp::forward(net, x).backward();
      sgd.step();
    }
    EXPECT_EQ(net->a->runs, every > 0 ? 4 : 2) << "checkpoint_every " << every;
    EXPECT_EQ(net->b->runs, every == 1 ? 4 : 2) << "checkpoint_every " << every;
    params[every] = sharded->gather_full_params();
  }
  for (const int every : {1, 2}) {
    for (const auto& [name, value] : params[0]) {
      EXPECT_TRUE(at::equal(value, params[every][name])) << name << ", every " << every;
    }
  }
}

TEST(BadInput, CheckpointUnitsMustNameBlocks) {
  CountingNet net(3);
  auto by_block = [] { return ShardingOptions().wrap(WrapPolicy::by_type({"CountingBlock"})); };
  expect_error([&] { fully_shard(net.ptr(), test::world(), by_block().checkpoint_units({"c"})); },
               "checkpoint_units names 'c', which is not a unit");
  expect_error(
      [&] { fully_shard(net.ptr(), test::world(), by_block().checkpoint_units({"(root)"})); },
      "checkpoint_units names the root");
  expect_error(
      [&] { fully_shard(net.ptr(), test::world(), ShardingOptions().checkpoint_units({"*"})); },
      "no wrapped units to checkpoint");
  expect_error(
      [&] {
        fully_shard(net.ptr(), test::world(),
                    by_block().checkpoint_units({"*"}).checkpoint_every(0));
      },
      "checkpoint_every must be at least 1, got 0");
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

// The gradient buffer is written, not zeroed and then added to (FlatParam::accumulate_grad), so
// what no gradient reaches must be zeroed before anyone reads it. Each block has a weight its
// forward never uses and a frozen one; the buffer's bytes come from the pool, where the gathered
// parameters' buffer of the same size went before. Over three steps of two micro-batches (the
// first under no_sync, whose .grad views are read), SGD leaves both exactly as they were and
// moves the used weights as one process does (every rank feeds the same batch). A hook the user
// registers on a weight after sharding still sees each gradient (LibTorch 1.13 runs a leaf's
// hooks inside its accumulator, which the buffer's hook bypasses: compat::leaf_grad_hooks).
struct PartlyUsedBlockImpl : torch::nn::Module {
  PartlyUsedBlockImpl(int64_t dim, uint64_t seed) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    used = register_parameter("used", at::randn({dim, dim}, gen));
    unused = register_parameter("unused", at::randn({dim, dim}, gen));
    frozen = register_parameter("frozen", at::randn({dim}, gen), /*requires_grad=*/false);
  }
  at::Tensor forward(const at::Tensor& x) { return at::tanh(at::matmul(x, used) + frozen); }
  at::Tensor used, unused, frozen;
};
TORCH_MODULE(PartlyUsedBlock);

struct PartlyUsedNetImpl : torch::nn::Module {
  explicit PartlyUsedNetImpl(int64_t dim) {
    a = register_module("a", PartlyUsedBlock(dim, 3));
    b = register_module("b", PartlyUsedBlock(dim, 4));
  }
  at::Tensor forward(const at::Tensor& x) {
    return fsdp::forward(b, fsdp::forward(a, x)).pow(2).sum();
  }
  PartlyUsedBlock a{nullptr}, b{nullptr};
};
TORCH_MODULE(PartlyUsedNet);

TEST(GradientBuffer, WhatNoGradientReachesIsZero) {
  constexpr int64_t kDim = 7;  // 105 elements a block: padded on 2 and 4 ranks
  constexpr double kLr = 0.05;
  auto batch = [](int step, int micro) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(100 + 10 * step + micro);
    return at::randn({3, kDim}, gen);
  };
  PartlyUsedNet reference(kDim);
  PartlyUsedNet net(kDim);
  auto sharded = fully_shard(net.ptr(), test::world(),
                             ShardingOptions().wrap(WrapPolicy::by_type({"PartlyUsedBlock"})));
  SGDOptions sgd;
  sgd.lr = kLr;
  SGD opt(sharded_params(*sharded), sgd);
  const auto initial = sharded->gather_full_params();
  int hook_saw = 0;
  net->a->used.register_hook([&](const at::Tensor& g) { hook_saw += g.defined() ? 1 : 0; });
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    for (auto& p : reference->parameters()) p.mutable_grad().reset();
    opt.zero_grad();
    for (int micro = 0; micro < 2; ++micro) {
      reference->forward(batch(step, micro)).backward();
      sharded->set_requires_gradient_sync(micro == 1);
      fsdp::forward(net, batch(step, micro)).backward();
      if (micro == 0) {
        for (const at::Tensor& unused : {net->a->unused, net->b->unused}) {
          ASSERT_TRUE(unused.grad().defined());
          EXPECT_EQ(unused.grad().abs().max().item<float>(), 0.0f);
        }
      }
    }
    opt.step();
    at::NoGradGuard no_grad;
    for (auto& p : reference->parameters()) {
      if (p.grad().defined()) p.sub_(kLr * p.grad());
    }
  }
  EXPECT_EQ(hook_saw, 6);  // every micro-batch
  const auto got = sharded->gather_full_params();
  for (const auto& p : reference->named_parameters()) {
    SCOPED_TRACE(p.key());
    if (p.key().size() > 5 && p.key().compare(p.key().size() - 5, 5, ".used") == 0) {
      // fp32 sums of the same terms in another order (the ranks' averaging).
      EXPECT_TRUE(at::allclose(got.at(p.key()), p.value(), 1e-5, 1e-6));
    } else {
      EXPECT_TRUE(at::equal(got.at(p.key()), initial.at(p.key())));
    }
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

TEST(BadInput, PrefetchAndReshardOptions) {
  GPT2 model(small_config());
  auto by_block = [] { return ShardingOptions().wrap(WrapPolicy::by_type({"GPT2Block"})); };
  expect_error([&] { fully_shard(model.ptr(), test::world(), by_block().prefetch_depth(0)); },
               "prefetch_depth must be at least 1");
  expect_error([&] { fully_shard(model.ptr(), test::world(), by_block().limit_all_gathers(-1)); },
               "limit_all_gathers must be >= 0");
  expect_error(
      [&] {
        fully_shard(model.ptr(), test::world(),
                    by_block().reshard_after_forward("transformer.h.9", false));
      },
      "reshard_after_forward names 'transformer.h.9', which is not a unit");
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

// The root's reduction split ([Note: split root reduction]) gives the gradients the whole
// reduction gives, in every strategy, with no_sync micro-batches before the synchronised one. Its
// traffic: with a vocabulary the batches touch little of, the late part goes as rows (all-gathers
// of a few rows, the reduce-scatters and all-reduces exactly those of the whole reduction, so the
// root's is not sent twice); with one they touch most of, the late part goes whole, the root's
// reduction twice, and only the row counts are gathered besides. Every step alike. The early part
// in pieces (root_reduction_chunks: 1, 2, and 5, more than the 3 blocks, the rest sent at the end)
// sums the same and sends the same bytes, in one more collective per piece and stage.
struct SplitRun {
  std::vector<at::Tensor> grads;  // per step, every unit's gradient shard, concatenated
  std::vector<int64_t> gathered, scattered, all_reduced;  // bytes per step
  std::vector<int64_t> collectives;                       // per step
};

SplitRun train_for_split(const GPT2Config& config, ShardingOptions options, bool split,
                         int pieces = 1) {
  GPT2 model(config);
  init_gpt2_weights(*model, 7);
  auto counts = std::make_shared<TrafficCounts>();
  auto sharded = fully_shard(model.ptr(), count_traffic(test::world(), counts),
                             options.wrap(WrapPolicy::by_type({"GPT2Block"}))
                                 .split_root_reduction(split)
                                 .root_reduction_chunks(pieces));
  const int rank = test::world()->rank();
  const int64_t T = config.n_positions;
  SplitRun run;
  for (int step = 0; step < 3; ++step) {
    for (auto& shard : sharded->shards()) shard.grad.zero_();
    counts->reset();
    for (int micro = 0; micro < 2; ++micro) {
      sharded->set_requires_gradient_sync(micro == 1);
      auto gen = at::make_generator<at::CPUGeneratorImpl>(100 * step + 10 * rank + micro);
      at::Tensor t = at::randint(config.vocab_size, {1, T + 1}, gen, at::kLong);
      gpt2_loss(fsdp::forward(model, t.narrow(1, 0, T)), t.narrow(1, 1, T)).backward();
    }
    std::vector<at::Tensor> grads;
    for (auto& shard : sharded->shards()) grads.push_back(shard.grad.clone());
    run.grads.push_back(at::cat(grads));
    run.gathered.push_back(counts->all_gather_bytes);
    run.scattered.push_back(counts->reduce_scatter_bytes);
    run.all_reduced.push_back(counts->all_reduce_bytes);
    run.collectives.push_back(counts->collectives);
  }
  return run;
}

void expect_split_matches(const GPT2Config& config, bool sparse) {
  const int n = test::world()->size();
  std::vector<std::pair<std::string, ShardingOptions>> cases = {
      {"FULL_SHARD", ShardingOptions()},
      {"SHARD_GRAD_OP", ShardingOptions().strategy(ShardingStrategy::kShardGradOp)},
      {"NO_SHARD", ShardingOptions().strategy(ShardingStrategy::kNoShard)}};
  if (n == 4) {
    cases.emplace_back(
        "HYBRID_SHARD",
        ShardingOptions().strategy(ShardingStrategy::kHybridShard).shard_group_size(2));
  }
  int64_t root = 0;
  for (const auto& u : unit_sizes(*GPT2(config), WrapPolicy::by_type({"GPT2Block"}))) {
    root = u.numel;  // the root is last
  }
  for (const auto& [name, options] : cases) {
    SCOPED_TRACE(name + ", world " + std::to_string(n));
    const SplitRun whole = train_for_split(config, options, false);
    const SplitRun one_piece = train_for_split(config, options, true, 1);
    // A reduction's stages: a reduce-scatter, an all-reduce, or (HYBRID) both.
    const int stages = name == "HYBRID_SHARD" ? 2 : 1;
    for (const int pieces : {1, 2, 5}) {
      SCOPED_TRACE(std::to_string(pieces) + " pieces");
      const SplitRun split =
          pieces == 1 ? one_piece : train_for_split(config, options, true, pieces);
      for (size_t step = 0; step < whole.grads.size(); ++step) {
        SCOPED_TRACE("step " + std::to_string(step));
        // fp32 sums of the same terms in another order.
        EXPECT_TRUE(at::allclose(split.grads[step], whole.grads[step], 1e-5, 1e-7))
            << (split.grads[step] - whole.grads[step]).abs().max().item<double>();
        if (n == 1) {  // one rank: nothing is reduced, nothing split
          EXPECT_EQ(split.gathered[step], whole.gathered[step]);
          EXPECT_EQ(split.collectives[step], whole.collectives[step]);
          continue;
        }
        const int64_t reduced = split.scattered[step] + split.all_reduced[step];
        const int64_t whole_reduced = whole.scattered[step] + whole.all_reduced[step];
        const int64_t extra = split.gathered[step] - whole.gathered[step];
        EXPECT_EQ(split.collectives[step] - one_piece.collectives[step], (pieces - 1) * stages);
        if (sparse) {
          EXPECT_EQ(reduced, whole_reduced);
          EXPECT_GT(extra, 8 * n);         // rows, beyond the counts
          EXPECT_LT(extra, root * 4 / 2);  // the rows' test: under half a reduce-scatter's bytes
        } else {
          EXPECT_GT(reduced, whole_reduced);
          EXPECT_EQ(extra, 8 * n);  // the counts, one int64 a rank
        }
      }
    }
  }
}

TEST(SplitRootReduction, SparseLateRowsMatchTheWholeReduction) {
  GPT2Config c = small_config();
  c.vocab_size = 2048;  // 2 x 16 tokens a rank touch at most 32 of its rows
  expect_split_matches(c, /*sparse=*/true);
}

TEST(SplitRootReduction, DenseLateGradientsAreReducedWhole) {
  GPT2Config c = small_config();
  c.vocab_size = 64;  // 16 tokens touch a quarter of it: rows cost more than the whole
  expect_split_matches(c, /*sparse=*/false);
}

// The late part's row scan ([Note: split root reduction]) sends every row with an element that is
// not zero, whatever its value: a subnormal, NaN and -inf (the loss scaler must see them), and a
// row whose elements sum to zero; a row of -0.0 is zero and stays home, and a nonzero element in
// the tail past the last whole row goes as a padded row. Every rank holds the same gradient, so
// each received row is the world size times it.
TEST(SplitRootReduction, RowScanSendsEveryRowWithANonzeroElement) {
  const int n = test::world()->size();
  constexpr int64_t kRow = 8, kRows = 10, kTail = 3, kNumel = kRow * kRows + kTail;
  at::Tensor grad = at::zeros({kNumel});
  const float subnormal = 1e-40f, nan = std::numeric_limits<float>::quiet_NaN();
  grad[1 * kRow + 2].fill_(subnormal);
  grad[3 * kRow + 7].fill_(nan);
  grad[5 * kRow].fill_(-std::numeric_limits<float>::infinity());
  grad.narrow(0, 7 * kRow, kRow).fill_(-0.0f);
  grad[8 * kRow].fill_(1.0f);
  grad[8 * kRow + 1].fill_(-1.0f);
  grad[kRows * kRow + 1].fill_(2.0f);
  auto counts = std::make_shared<TrafficCounts>();
  at::Tensor out = at::zeros({kNumel});
  ASSERT_TRUE(reduce_nonzero_rows(*count_traffic(test::world(), counts), grad, kRow, 0, kNumel, 1,
                                  1e9, out));
  const int64_t sent_rows = 5;  // rows 1, 3, 5 and 8, and the tail's
  EXPECT_EQ(counts->all_gather_bytes, n * (8 + sent_rows * 8 + sent_rows * kRow * 4));
  EXPECT_EQ(out[1 * kRow + 2].item<float>(), n * subnormal);
  EXPECT_TRUE(std::isnan(out[3 * kRow + 7].item<float>()));
  EXPECT_EQ(out[5 * kRow].item<float>(), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(out[8 * kRow].item<float>(), n);
  EXPECT_EQ(out[8 * kRow + 1].item<float>(), -n);
  EXPECT_EQ(out[kRows * kRow + 1].item<float>(), 2.0f * n);
  // Everything else is zero: the sent rows' other elements and the rows left home.
  at::Tensor rest = out.clone();
  for (const int64_t i :
       {1 * kRow + 2, 3 * kRow + 7, 5 * kRow, 8 * kRow, 8 * kRow + 1, kRows * kRow + 1}) {
    rest[i].fill_(0.0f);
  }
  EXPECT_EQ(rest.count_nonzero().item<int64_t>(), 0);
}

// A piece count the root's shard cannot fill (or a negative one) is refused when the model is
// wrapped, on every rank alike, with the option's name, and leaves the module unsharded: it can be
// wrapped again.
TEST(SplitRootReduction, AnImpossiblePieceCountIsAnError) {
  for (const int pieces : {1 << 30, -1}) {
    GPT2 model(small_config());
    try {
      fully_shard(
          model.ptr(), test::world(),
          ShardingOptions().wrap(WrapPolicy::by_type({"GPT2Block"})).root_reduction_chunks(pieces));
      ADD_FAILURE() << pieces << " pieces were accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("root_reduction_chunks"), std::string::npos) << e.what();
    }
    EXPECT_NO_THROW(fully_shard(model.ptr(), test::world(),
                                ShardingOptions().wrap(WrapPolicy::by_type({"GPT2Block"}))));
  }
}

// [Note: root gathered after its step]: with forward prefetch the optimizer's step leaves the
// root gathering for the next forward (its gathered bytes count), and the steps that follow train
// exactly as without (a gather is a copy). A write to the shards after the step reaches the next
// forward: through FullyShardedModel::shards() (raw, as checkpoint loads write), and in place
// through a handle kept from before (the version counter).
struct AfterStepRun {
  std::vector<double> losses;
  std::vector<int64_t> gathered_after_step;
};

AfterStepRun train_with_root_ahead(bool forward_prefetch) {
  GPT2 model(small_config());
  init_gpt2_weights(*model, 7);
  auto sharded = fully_shard(model.ptr(), test::world(),
                             ShardingOptions()
                                 .wrap(WrapPolicy::by_type({"GPT2Block"}))
                                 .forward_prefetch(forward_prefetch));
  std::vector<ShardedParam> params = sharded_params(*sharded);
  AdamWOptions o;
  o.lr = 1e-2;
  AdamW opt(params, o);
  const int64_t T = small_config().n_positions;
  AfterStepRun run;
  auto step = [&](int i) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(40 + i + 10 * test::world()->rank());
    at::Tensor t = at::randint(small_config().vocab_size, {2, T + 1}, gen, at::kLong);
    opt.zero_grad();
    at::Tensor loss = gpt2_loss(fsdp::forward(model, t.narrow(1, 0, T)), t.narrow(1, 1, T));
    run.losses.push_back(loss.item<double>());
    loss.backward();
    opt.step();
    run.gathered_after_step.push_back(sharded->memory().gathered_param_bytes);
  };
  step(0);
  step(1);
  {
    at::NoGradGuard no_grad;
    params.back().param.add_(0.25);  // in place, through a handle from before the step
  }
  step(2);
  float* root = sharded->shards().back().param.data_ptr<float>();  // raw, as a load writes
  for (int i = 0; i < 16; ++i) root[i] += 0.5f;
  step(3);
  step(4);
  return run;
}

TEST(RootAfterStep, GatheredDuringTheStepAndDroppedWhenWritten) {
  const AfterStepRun ahead = train_with_root_ahead(true);
  const AfterStepRun plain = train_with_root_ahead(false);
  ASSERT_EQ(ahead.losses.size(), plain.losses.size());
  for (size_t i = 0; i < ahead.losses.size(); ++i) {
    EXPECT_EQ(ahead.losses[i], plain.losses[i]) << "step " << i;
    EXPECT_EQ(plain.gathered_after_step[i], 0) << "step " << i;
    if (test::world()->size() > 1) {
      EXPECT_GT(ahead.gathered_after_step[i], 0) << "step " << i;  // the root, under way
    } else {
      EXPECT_EQ(ahead.gathered_after_step[i], 0) << "step " << i;  // nothing to gather
    }
  }
}

// fp16 compute on the CPU: refused, with the reason, where LibTorch has no fp16 CPU kernels (1.13);
// elsewhere a forward computes in fp16 (the parity tests check its values).
TEST(BadInput, Fp16ComputeOnTheCpuNeedsLibTorch2) {
  GPT2 model(small_config());
  auto shard = [&] {
    return fully_shard(model.ptr(), test::world(),
                       ShardingOptions().param_dtype(DType::kFloat16).device("cpu"));
  };
  if (!compat::kHasCpuHalfKernels) {
    expect_error(shard, "fp16 is not supported on CPU with LibTorch");
    return;
  }
  auto sharded = shard();
  at::Tensor t = step_tokens(2);
  const int64_t T = small_config().n_positions;
  EXPECT_EQ(fsdp::forward(model, t.narrow(1, 0, T)).scalar_type(), at::kHalf);
}

TEST(BadInput, ShardingTwice) {
  Sharded s = shard_small(ShardingStrategy::kFullShard);
  expect_error([&] { fully_shard(s.model.ptr(), test::world()); }, "already sharded");
}

}  // namespace
}  // namespace fsdp
