// The fp16 loss scaler (fsdp::ShardedGradScaler): unscaling, the skip decision every rank takes
// together, backoff and growth by torch's rules, its state across a checkpoint, the underflow
// error and bad options. All in fp32 shards, so it runs on every LibTorch (1.13 has no fp16 CPU
// matmul; the fp16 compute tests are test_parity's). Run at world sizes 1 and 3 (MPI) and 2
// (Gloo): "one rank's inf" needs ranks that found none.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "fsdp/fsdp.h"
#include "test_util.h"

namespace fsdp {
namespace {

// A small model, sharded by block, so that every rank holds shards of several units.
struct Model {
  GPT2 gpt;
  std::shared_ptr<FullyShardedModel> fsdp;
  std::unique_ptr<AdamW> opt;
};

Model make_model() {
  GPT2Config c;
  c.vocab_size = 61;
  c.n_positions = 8;
  c.n_embd = 16;
  c.n_layer = 2;
  c.n_head = 2;
  Model m{GPT2(c), nullptr, nullptr};
  init_gpt2_weights(*m.gpt, 5);
  m.fsdp = fully_shard(m.gpt.ptr(), test::world(),
                       ShardingOptions().wrap(WrapPolicy::by_type({"GPT2Block"})));
  m.opt = std::make_unique<AdamW>(sharded_params(*m.fsdp));
  return m;
}

// Forward and backward of a scaled loss on rows that differ per rank.
void backward(Model& m, ShardedGradScaler& scaler) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(100 + test::world()->rank());
  at::Tensor t = at::randint(61, {2, 9}, gen, at::kLong);
  m.opt->zero_grad();
  scaler.scale(gpt2_loss(fsdp::forward(m.gpt, t.narrow(1, 0, 8)), t.narrow(1, 1, 8))).backward();
}

std::vector<at::Tensor> copies(const std::vector<ShardedParam>& params, bool grads) {
  std::vector<at::Tensor> out;
  for (const auto& s : params) out.push_back((grads ? s.grad : s.param).clone());
  return out;
}

// The gradients unscale by exactly 1/scale (a power of two), in place.
TEST(GradScaler, UnscalesEveryShardExactly) {
  Model m = make_model();
  GradScalerOptions o;
  o.init_scale = 4096;
  ShardedGradScaler scaler(o);
  backward(m, scaler);
  const auto scaled = copies(m.opt->params(), /*grads=*/true);
  EXPECT_FALSE(scaler.unscale(*m.opt, *test::world()));
  for (size_t i = 0; i < scaled.size(); ++i) {
    EXPECT_TRUE(m.opt->params()[i].grad.equal(scaled[i] / 4096)) << "shard " << i;
  }
  EXPECT_TRUE(scaler.step(*m.opt, *test::world()));
  EXPECT_EQ(m.opt->step_count(), 1);
}

// An inf in the last rank's shard alone: every rank skips the step (no parameter or Adam state
// moves, the step count stays), the scale halves, and the next good step steps on every rank.
TEST(GradScaler, OneRanksInfSkipsTheStepOnEveryRank) {
  Model m = make_model();
  CommPtr world = test::world();
  ShardedGradScaler scaler;  // PyTorch's defaults: 65536, backoff 0.5
  backward(m, scaler);
  const bool injector = world->rank() == world->size() - 1;
  if (injector) {
    bool injected = false;
    for (const auto& s : m.opt->params()) {
      if (s.grad.numel() == 0) continue;
      s.grad[s.grad.numel() / 2] = std::numeric_limits<float>::infinity();
      injected = true;
      break;
    }
    ASSERT_TRUE(injected) << "rank " << world->rank() << " holds no gradient shard";
  }
  const auto params = copies(m.opt->params(), /*grads=*/false);
  EXPECT_TRUE(scaler.unscale(*m.opt, *world)) << "rank " << world->rank();
  EXPECT_FALSE(scaler.step(*m.opt, *world)) << "rank " << world->rank();
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32768.0f);
  EXPECT_EQ(scaler.skipped_in_a_row(), 1);
  EXPECT_EQ(m.opt->step_count(), 0);
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(m.opt->params()[i].param.equal(params[i])) << "shard " << i;
    EXPECT_EQ(m.opt->exp_avg(i).abs().max().item<float>(), 0.0f) << "shard " << i;
  }

  backward(m, scaler);
  EXPECT_TRUE(scaler.step(*m.opt, *world));  // unscales first
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32768.0f);
  EXPECT_EQ(m.opt->step_count(), 1);
  EXPECT_EQ(scaler.skipped_in_a_row(), 0);
}

// A NaN counts as an inf does.
TEST(GradScaler, NanIsFoundToo) {
  Model m = make_model();
  ShardedGradScaler scaler;
  backward(m, scaler);
  if (test::world()->rank() == 0) {
    for (const auto& s : m.opt->params()) {
      if (s.grad.numel() > 0) s.grad[0] = std::numeric_limits<float>::quiet_NaN();
    }
  }
  EXPECT_TRUE(scaler.unscale(*m.opt, *test::world()));
}

// Growth and backoff follow torch's _amp_update_scale_: the scale grows after growth_interval good
// steps in a row, a skipped step halves it and restarts the count, and the state carries the count.
TEST(GradScaler, GrowsAndBacksOffByTorchsRules) {
  Model m = make_model();
  GradScalerOptions o;
  o.init_scale = 8;
  o.growth_interval = 3;
  ShardedGradScaler scaler(o);
  // found inf at each step (all ranks alike), and the scale the next step uses.
  const std::vector<std::pair<bool, float>> steps = {
      {false, 8}, {false, 8}, {false, 16}, {false, 16}, {true, 8},
      {false, 8}, {false, 8}, {false, 16}, {true, 8},   {true, 4}};
  for (size_t i = 0; i < steps.size(); ++i) {
    backward(m, scaler);
    if (steps[i].first) m.opt->params()[0].grad.fill_(std::numeric_limits<float>::infinity());
    EXPECT_EQ(scaler.step(*m.opt, *test::world()), !steps[i].first) << "step " << i;
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), steps[i].second) << "after step " << i;
  }
  EXPECT_EQ(scaler.state().growth_tracker, 0);
  EXPECT_EQ(m.opt->step_count(), 7);
}

// What a checkpoint keeps (scale, good steps in a row) resumes the same sequence of scales: two
// good steps, save, then one more grows the scale in the resumed scaler as in the original.
TEST(GradScaler, StateResumesBitForBit) {
  Model m = make_model();
  GradScalerOptions o;
  o.init_scale = 3.0;  // not a power of two: growth is an fp32 product, as torch's
  o.growth_factor = 1.7;
  o.growth_interval = 3;
  ShardedGradScaler original(o);
  for (int i = 0; i < 5; ++i) {
    backward(m, original);
    original.step(*m.opt, *test::world());
    original.update();
  }
  const GradScalerState saved = original.state();
  EXPECT_EQ(saved.growth_tracker, 2);
  EXPECT_EQ(saved.scale, 3.0f * 1.7f);
  ShardedGradScaler resumed(o);
  resumed.load_state(saved);
  for (ShardedGradScaler* s : {&original, &resumed}) {
    backward(m, *s);
    s->step(*m.opt, *test::world());
    s->update();
  }
  EXPECT_EQ(resumed.get_scale(), original.get_scale());
  EXPECT_EQ(resumed.get_scale(), 3.0f * 1.7f * 1.7f);
  EXPECT_THROW(resumed.load_state({std::numeric_limits<float>::infinity(), 0}),
               std::invalid_argument);
  EXPECT_THROW(resumed.load_state({1.0f, -1}), std::invalid_argument);
}

// Gradients that are never finite back the scale off to its floor; the next backoff stops the run
// with an error that says so, rather than training on zeros at a vanishing scale.
TEST(GradScaler, UnderflowIsAnErrorByName) {
  Model m = make_model();
  GradScalerOptions o;
  o.init_scale = 4;
  o.min_scale = 1;
  ShardedGradScaler scaler(o);
  auto poisoned_step = [&] {
    backward(m, scaler);
    m.opt->params()[0].grad.fill_(std::numeric_limits<float>::quiet_NaN());
    EXPECT_FALSE(scaler.step(*m.opt, *test::world()));
    scaler.update();
  };
  poisoned_step();  // 4 -> 2
  poisoned_step();  // 2 -> 1
  EXPECT_EQ(scaler.get_scale(), 1.0f);
  try {
    poisoned_step();
    FAIL() << "a backoff below min_scale must throw";
  } catch (const LossScaleUnderflow& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("loss scale underflow"), std::string::npos) << what;
    EXPECT_NE(what.find("3 steps in a row"), std::string::npos) << what;
    EXPECT_NE(what.find("grad_scaler.min_scale"), std::string::npos) << what;
  }
}

TEST(GradScaler, CallsOutOfOrderAreErrors) {
  Model m = make_model();
  ShardedGradScaler scaler;
  EXPECT_THROW(scaler.update(), std::logic_error);
  backward(m, scaler);
  scaler.unscale(*m.opt, *test::world());
  EXPECT_THROW(scaler.unscale(*m.opt, *test::world()), std::logic_error);
  scaler.step(*m.opt, *test::world());
  EXPECT_THROW(scaler.step(*m.opt, *test::world()), std::logic_error);
  scaler.update();
}

TEST(GradScaler, BadOptionsNameTheOption) {
  const std::vector<std::pair<std::string, std::function<void(GradScalerOptions&)>>> cases = {
      {"init_scale", [](GradScalerOptions& o) { o.init_scale = 0; }},
      {"init_scale", [](GradScalerOptions& o) { o.init_scale = 1e39; }},  // not an fp32 value
      {"growth_factor", [](GradScalerOptions& o) { o.growth_factor = 1; }},
      {"backoff_factor", [](GradScalerOptions& o) { o.backoff_factor = 1; }},
      {"growth_interval", [](GradScalerOptions& o) { o.growth_interval = 0; }},
      {"min_scale", [](GradScalerOptions& o) { o.min_scale = 0; }},
  };
  for (const auto& [name, spoil] : cases) {
    GradScalerOptions o;
    spoil(o);
    try {
      ShardedGradScaler s(o);
      ADD_FAILURE() << name << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace fsdp
