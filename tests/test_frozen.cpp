// Frozen parameters (requires_grad false at fully_shard): what they cost and what they keep. The
// runtime gives them a flat parameter of their own in param_dtype, with no fp32 master, gradient
// or optimizer state, gathers them for forward and backward and reshards a unit as soon as its
// backward no longer reads them ([Note: frozen parameters] in docs/design.md). That they train as
// one process does is tests/test_parity.cpp's (Parity.FrozenParametersMatchSingleProcess); here:
// the bytes, the resharding during backward, full-state and sharded checkpoints, bad input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include "fsdp/checkpoint/checkpoint.h"
#include "fsdp/checkpoint/full_state.h"
#include "fsdp/checkpoint/safetensors.h"
#include "fsdp/fsdp.h"
#include "test_util.h"

namespace fsdp {
namespace {

namespace fs = std::filesystem;

GPT2Config small_config() {
  GPT2Config c;
  c.vocab_size = 97;
  c.n_positions = 16;
  c.n_embd = 48;
  c.n_layer = 3;
  c.n_head = 4;
  return c;
}

using Rule = std::function<bool(const std::string&)>;

// The position table, all of the first block and the attention of the others: a root, a unit
// and two units that keep something frozen and something training.
bool mixed(const std::string& name) {
  return name == "transformer.wpe.weight" || name.rfind("transformer.h.0.", 0) == 0 ||
         name.find(".attn.") != std::string::npos;
}

// Every block's attention and first norm: each unit half frozen, as a LoRA base is.
bool attention(const std::string& name) {
  return name.find(".attn.") != std::string::npos || name.find(".ln_1.") != std::string::npos;
}

struct Sharded {
  GPT2 model{nullptr};
  std::shared_ptr<FullyShardedModel> fsdp;
};

Sharded shard(const Rule& frozen, ShardingOptions options = {}, uint64_t seed = 7) {
  Sharded s;
  s.model = GPT2(small_config());
  init_gpt2_weights(*s.model, seed);
  for (auto& item : s.model->named_parameters()) {
    if (frozen(item.key())) item.value().requires_grad_(false);
  }
  s.fsdp =
      fully_shard(s.model.ptr(), test::world(), options.wrap(WrapPolicy::by_type({"GPT2Block"})));
  return s;
}

void train_step(Sharded& s, int64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(seed));
  const int64_t T = small_config().n_positions;
  at::Tensor t = at::randint(small_config().vocab_size, {2, T + 1}, gen, at::kLong);
  gpt2_loss(fsdp::forward(s.model, t.narrow(1, 0, T)), t.narrow(1, 1, T)).backward();
}

int64_t shard_elems(const std::vector<UnitInfo>& units) {
  int64_t n = 0;
  for (const auto& u : units) n += u.shard_numel;
  return n;
}

std::set<std::string> names(const std::vector<UnitInfo>& units) {
  std::set<std::string> out;
  for (const auto& u : units) out.insert(u.param_names.begin(), u.param_names.end());
  return out;
}

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an error mentioning '" << needle << "'";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// A frozen parameter is counted once, in param_dtype, and nowhere else: units() and the
// optimizer see only what trains; a unit that trains nothing is absent from units().
TEST(Frozen, KeepNoMasterGradientOrOptimizerState) {
  Sharded s = shard(mixed, ShardingOptions().param_dtype(DType::kBFloat16));
  const std::vector<UnitInfo> units = s.fsdp->units(), frozen = s.fsdp->frozen_units();
  ASSERT_EQ(units.size(), 3u);  // blocks 1 and 2, and the root
  ASSERT_EQ(frozen.size(), 4u);
  EXPECT_EQ(frozen[0].name, "transformer.h.0");
  for (const auto& item : s.model->named_parameters()) {
    const bool trains = names(units).count(item.key()) > 0;
    EXPECT_EQ(trains, !mixed(item.key())) << item.key();
    EXPECT_EQ(names(frozen).count(item.key()) > 0, mixed(item.key())) << item.key();
  }
  const MemoryStats m = s.fsdp->memory();
  EXPECT_EQ(m.sharded_param_bytes, 4 * shard_elems(units));
  EXPECT_EQ(m.sharded_grad_bytes, 4 * shard_elems(units));
  EXPECT_EQ(m.sharded_frozen_bytes, 2 * shard_elems(frozen));  // bf16, as computed
  AdamW opt(sharded_params(*s.fsdp));
  EXPECT_EQ(opt.state_bytes(), 8 * shard_elems(units));
  for (const UnitShard& f : s.fsdp->frozen_shards()) {
    EXPECT_EQ(f.param.scalar_type(), at::kBFloat16);
    EXPECT_FALSE(f.grad.defined());
  }
}

// Weight decay included, a frozen parameter never moves: its shards after three steps of AdamW
// with weight decay are its shards before, bit for bit; what trains moved.
TEST(Frozen, StayBitForBitUnchanged) {
  Sharded s = shard(mixed);
  AdamWOptions adam;
  adam.weight_decay = 0.1;
  AdamW opt(sharded_params(*s.fsdp), adam);
  std::vector<at::Tensor> before, trained;
  for (const UnitShard& f : s.fsdp->frozen_shards()) before.push_back(f.param.clone());
  for (const UnitShard& t : s.fsdp->shards()) trained.push_back(t.param.clone());
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    train_step(s, step);
    opt.step();
  }
  const auto after = s.fsdp->frozen_shards();
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_TRUE(at::equal(after[i].param, before[i])) << "frozen unit " << after[i].unit_name;
  }
  const auto now = s.fsdp->shards();
  double moved = 0;
  for (size_t i = 0; i < now.size(); ++i) {
    moved += (now[i].param - trained[i]).abs().sum().item<double>();
  }
  EXPECT_GT(moved, 0);
}

// [Note: frozen parameters]: a half-frozen unit reshards once its inputs' gradients are known, so
// FULL_SHARD gathers at most the root and two blocks during backward, as without frozen
// parameters (all three blocks would stay gathered if they waited for the end of backward), with
// activation checkpointing too; and everything is resharded after backward.
TEST(Frozen, HalfFrozenUnitsReshardDuringBackward) {
  if (test::world()->size() == 1) GTEST_SKIP() << "nothing is gathered with one fp32 shard";
  for (const bool checkpointed : {false, true}) {
    ShardingOptions options;
    if (checkpointed) options.checkpoint_units({"*"});
    Sharded s = shard(attention, options);
    std::map<std::string, int64_t> bytes;  // gathered, by unit: both flat parameters
    for (const auto& units : {s.fsdp->units(), s.fsdp->frozen_units()}) {
      for (const UnitInfo& u : units) bytes[u.name] += 4 * u.padded_numel;
    }
    ASSERT_EQ(s.fsdp->frozen_units().size(), 3u);  // the blocks; the root trains all it has
    const int64_t root = bytes.at("");
    int64_t largest = 0;
    for (const auto& [name, b] : bytes) largest = name.empty() ? largest : std::max(largest, b);
    for (int step = 0; step < 2; ++step) {
      s.fsdp->reset_peak_memory();
      train_step(s, step);
      const MemoryStats m = s.fsdp->memory();
      EXPECT_LE(m.peak_gathered_param_bytes, root + 2 * largest) << "checkpointed " << checkpointed;
      EXPECT_GE(m.peak_gathered_param_bytes, root + largest);
      EXPECT_EQ(m.gathered_param_bytes, 0);
      EXPECT_EQ(m.grad_buffer_bytes, 0);
    }
  }
}

// A frozen parameter may be of any floating type (a bf16 base kept as it is stored); one that
// trains must be fp32, and the error says what to do.
TEST(Frozen, ABf16BaseIsTakenAsItIs) {
  GPT2 model(small_config());
  init_gpt2_weights(*model, 7);
  for (auto& item : model->named_parameters()) {
    if (!attention(item.key())) continue;
    item.value().requires_grad_(false);
    item.value().set_data(item.value().to(at::kBFloat16));
  }
  const auto values = model->named_parameters();
  std::map<std::string, at::Tensor> expected;
  for (const auto& item : values) expected[item.key()] = item.value().detach().to(at::kFloat);
  auto sharded = fully_shard(
      model.ptr(), test::world(),
      ShardingOptions().param_dtype(DType::kBFloat16).wrap(WrapPolicy::by_type({"GPT2Block"})));
  for (const auto& [name, value] : sharded->gather_full_params()) {
    const at::Tensor& want = expected.at(name);  // the bf16 values, or an fp32 master's
    EXPECT_TRUE(at::equal(value, want)) << name;
  }

  GPT2 bad(small_config());
  bad->named_parameters()["transformer.ln_f.weight"].set_data(
      bad->named_parameters()["transformer.ln_f.weight"].to(at::kBFloat16));
  expect_error([&] { fully_shard(bad.ptr(), test::world()); }, "requires_grad false");
}

// A full state holds every parameter, frozen ones too, and loads them back; a sharded
// checkpoint holds what trains, and a model that freezes otherwise is refused by name.
TEST(Frozen, FullStateHoldsThemAndShardedCheckpointsDoNot) {
  CommPtr world = test::world();
  int64_t id = ::getpid();
  world->broadcast(&id, 1, DType::kInt64, 0);
  const std::string dir =
      (fs::temp_directory_path() / ("fsdp_frozen_" + std::to_string(id))).string();
  Sharded s = shard(mixed);
  AdamW opt(sharded_params(*s.fsdp));
  opt.zero_grad();
  train_step(s, 1);
  opt.step();
  const std::map<std::string, at::Tensor> trained = s.fsdp->gather_full_params();
  if (world->rank() == 0) fs::create_directories(dir);
  world->barrier();
  const std::string file = dir + "/model.safetensors";
  save_full_safetensors(*s.fsdp, file);
  SafetensorsReader reader(file);
  EXPECT_EQ(reader.tensors().size(), trained.size());

  Sharded loaded = shard(mixed, {}, /*seed=*/8);  // a tensor the load missed would show

  load_full_safetensors(*loaded.fsdp, file);
  for (const auto& [name, value] : loaded.fsdp->gather_full_params()) {
    EXPECT_TRUE(at::equal(value, trained.at(name))) << name;
  }

  const std::string path = save_checkpoint(dir + "/ckpt", 1, *s.fsdp, &opt, "{}");
  const CheckpointReader ckpt(path);
  std::set<std::string> saved;
  for (const auto& u : ckpt.metadata().units) {
    for (const auto& p : u.params) saved.insert(p.name);
  }
  EXPECT_EQ(saved, names(s.fsdp->units()));
  std::set<std::string> listed;  // the frozen ones, by name, in the metadata
  for (const auto& p : ckpt.metadata().frozen) listed.insert(p.name);
  EXPECT_EQ(listed, names(s.fsdp->frozen_units()));
  if (world->rank() == 0) {  // offline: without the weights it lacks, a consolidation is refused
    expect_error([&] { consolidate_checkpoint(path, dir + "/consolidated.safetensors"); },
                 "does not hold its 21 frozen parameters");
  }
  Sharded other = shard([](const std::string& n) { return n == "transformer.wpe.weight"; });
  AdamW other_opt(sharded_params(*other.fsdp));
  expect_error([&] { load_checkpoint(path, *other.fsdp, &other_opt); }, "has no parameter");
  Sharded more =
      shard([](const std::string& n) { return mixed(n) || n == "transformer.ln_f.bias"; });
  AdamW more_opt(sharded_params(*more.fsdp));
  expect_error([&] { load_checkpoint(path, *more.fsdp, &more_opt); }, "which the model freezes");
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir);
}

}  // namespace
}  // namespace fsdp
