// Deferred initialisation (fsdp/init.h): a model built deferred holds no parameter values; after
// fully_shard with param_init, every rank holds only its shard, and the gathered model equals,
// bit for bit, the one a single process initialises eagerly, for GPT-2 and Llama, every strategy
// and world sizes 1-4 (the odd sizes make padded shards at world size 3).
#include <gtest/gtest.h>

#include "fsdp/fsdp.h"
#include "fsdp/init.h"
#include "test_util.h"

namespace fsdp {
namespace {

constexpr uint64_t kSeed = 77;

GPT2Config gpt2_config(bool deferred) {
  GPT2Config c;
  c.vocab_size = 67;
  c.n_positions = 13;
  c.n_embd = 24;
  c.n_layer = 2;
  c.n_head = 4;
  c.deferred = deferred;
  return c;
}

LlamaConfig llama_config(bool deferred) {
  LlamaConfig c = LlamaConfig::tiny();
  c.vocab_size = 67;
  c.deferred = deferred;
  return c;
}

std::map<std::string, at::Tensor> named(const torch::nn::Module& m) {
  std::map<std::string, at::Tensor> out;
  for (const auto& p : m.named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

void expect_all_deferred(const torch::nn::Module& m) {
  for (const auto& p : m.named_parameters()) {
    EXPECT_TRUE(is_deferred(p.value())) << p.key();
    EXPECT_EQ(p.value().storage().nbytes(), 0u) << p.key();
  }
}

// The deferred model, sharded with `init`, gathered, against the eager model's values.
void expect_equal_to_eager(std::shared_ptr<torch::nn::Module> deferred,
                           const std::map<std::string, at::Tensor>& eager, const ParamInit& init,
                           ShardingStrategy strategy, const std::string& block) {
  expect_all_deferred(*deferred);
  auto sharded = fully_shard(
      deferred, test::world(),
      ShardingOptions().strategy(strategy).wrap(WrapPolicy::by_type({block})).param_init(init));
  // This rank holds its shards only: the sharded state is the padded model over the shard count.
  int64_t padded = 0, held = 0;
  for (const auto& u : sharded->units()) padded += u.padded_numel;
  for (const auto& s : sharded->shards()) held += s.param.numel();
  EXPECT_EQ(held * sharded->shard_group().size(), padded) << to_string(strategy);
  const auto full = sharded->gather_full_params();
  ASSERT_EQ(full.size(), eager.size());
  for (const auto& [name, value] : eager) {
    ASSERT_TRUE(full.count(name)) << name;
    EXPECT_TRUE(at::equal(full.at(name), value)) << name << " under " << to_string(strategy);
  }
}

const ShardingStrategy kStrategies[] = {ShardingStrategy::kFullShard,
                                        ShardingStrategy::kShardGradOp, ShardingStrategy::kNoShard};

TEST(DeferredInit, Gpt2ShardsEqualEagerInitialisation) {
  GPT2 eager(gpt2_config(false));
  init_gpt2_weights(*eager, kSeed);
  const auto values = named(*eager);
  for (ShardingStrategy s : kStrategies) {
    GPT2 deferred(gpt2_config(true));
    expect_equal_to_eager(deferred.ptr(), values, gpt2_param_init(gpt2_config(true), kSeed), s,
                          "GPT2Block");
  }
}

TEST(DeferredInit, LlamaShardsEqualEagerInitialisation) {
  for (bool tied : {false, true}) {
    LlamaConfig c = llama_config(false);
    c.tie_embeddings = tied;
    Llama eager(c);
    init_llama_weights(*eager, kSeed);
    const auto values = named(*eager);
    c.deferred = true;
    for (ShardingStrategy s : kStrategies) {
      Llama deferred(c);
      expect_equal_to_eager(deferred.ptr(), values, llama_param_init(kSeed), s,
                            "LlamaDecoderLayer");
    }
  }
}

TEST(DeferredInit, TrainsLikeTheEagerModel) {
  // One step on the same batch from both models: identical losses and updated shards.
  auto step = [](GPT2 model, std::shared_ptr<FullyShardedModel> sharded) {
    AdamW opt(sharded_params(*sharded));
    const at::Tensor tokens = test::bigram_tokens(5, 2 * test::world()->size(), 13, 67)
                                  .narrow(0, 2 * test::world()->rank(), 2);
    at::Tensor loss =
        gpt2_loss(fsdp::forward(model, tokens.narrow(1, 0, 12)), tokens.narrow(1, 1, 12));
    loss.backward();
    opt.step();
    return std::make_pair(loss.item<double>(), sharded->gather_full_params());
  };
  const auto wrap = ShardingOptions().wrap(WrapPolicy::by_type({"GPT2Block"}));
  GPT2 eager(gpt2_config(false));
  init_gpt2_weights(*eager, kSeed);
  const auto a = step(eager, fully_shard(eager.ptr(), test::world(), wrap));
  GPT2 deferred(gpt2_config(true));
  const auto b = step(
      deferred,
      fully_shard(deferred.ptr(), test::world(),
                  ShardingOptions(wrap).param_init(gpt2_param_init(gpt2_config(true), kSeed))));
  EXPECT_EQ(a.first, b.first);
  for (const auto& [name, value] : a.second)
    EXPECT_TRUE(at::equal(value, b.second.at(name))) << name;
}

TEST(DeferredInit, WithoutParamInitIsAnErrorNamingTheParameter) {
  GPT2 deferred(gpt2_config(true));
  try {
    fully_shard(deferred.ptr(), test::world(), ShardingOptions());
    FAIL() << "a deferred model sharded without param_init";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("is deferred"), std::string::npos) << what;
    EXPECT_NE(what.find("param_init"), std::string::npos) << what;
  }
}

// A param_init that throws for a later unit's parameter fails fully_shard with its error, after
// earlier units were built: none of the model's modules stays registered as sharded (a later
// module at one of their addresses would be refused as already sharded).
TEST(DeferredInit, AFailingInitLeavesNoModuleRegistered) {
  GPT2 deferred(gpt2_config(true));
  const ParamInit init = gpt2_param_init(gpt2_config(true), kSeed);
  try {
    fully_shard(deferred.ptr(), test::world(),
                ShardingOptions()
                    .wrap(WrapPolicy::by_type({"GPT2Block"}))
                    .param_init([&](const std::string& name, at::Tensor& t) {
                      if (name.find(".h.1.") != std::string::npos) {
                        throw std::runtime_error("no values for " + name);
                      }
                      init(name, t);
                    }));
    FAIL() << "fully_shard succeeded with a failing param_init";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no values for transformer.h.1."), std::string::npos)
        << e.what();
  }
  for (const auto& m : deferred->modules(/*include_self=*/true)) {
    EXPECT_EQ(find_module_hooks(m.get()), nullptr) << m->name();
  }
}

TEST(DeferredInit, DeferParametersKeepsIdentityAndShape) {
  torch::nn::Linear linear(5, 3);
  const at::Tensor before = linear->weight;
  defer_parameters(*linear);
  EXPECT_TRUE(linear->weight.is_same(before));
  EXPECT_EQ(linear->weight.sizes(), at::IntArrayRef({3, 5}));
  EXPECT_TRUE(is_deferred(linear->weight));
  EXPECT_TRUE(linear->weight.requires_grad());
}

}  // namespace
}  // namespace fsdp
