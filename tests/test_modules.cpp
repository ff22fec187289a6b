// A user's own LibTorch module under fully_shard.
// Reads and mistakes: a parameter read between steps, a wrapped block called directly (or from a
// Sequential, which calls its children itself), a model used after its FullyShardedModel is gone.
// Each must end in fsdp's error naming the parameter and what to do, where it used to segfault
// inside TensorIterator or fail in LibTorch's storage words; and where the parameter is not
// sharded (NO_SHARD, one shard in fp32) the same reads must give the parameter's values.
// Buffers (BatchNorm's running statistics, a counter the forward updates, a bool mask): rank 0's
// on every rank after fully_shard, per rank or kept alike as ShardingOptions::buffer_sync says,
// and saved, restored and checked by sharded checkpoints, reshards, full states and
// consolidation (they used to be per rank, unsaved, and lost at a resume).
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "fsdp/checkpoint/checkpoint.h"
#include "fsdp/checkpoint/full_state.h"
#include "fsdp/checkpoint/safetensors.h"
#include "fsdp/fsdp.h"
#include "test_util.h"

namespace fsdp {
namespace {

struct BlockImpl : torch::nn::Module {
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  BlockImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 8));
  }
  at::Tensor forward(const at::Tensor& x) { return x + fc2(torch::relu(fc1(x))); }
};
TORCH_MODULE(Block);

// Each block of `blocks` through fsdp::forward, as a model's forward calls its units.
at::Tensor run_blocks(torch::nn::ModuleListImpl& blocks, at::Tensor h) {
  for (size_t i = 0; i < blocks.size(); ++i) h = fsdp::forward(blocks.ptr<BlockImpl>(i), h);
  return h;
}

// Blocks in a ModuleList called through fsdp::forward (right), or in a Sequential that calls them
// itself (the mistake: `in_sequential`).
struct NetImpl : torch::nn::Module {
  torch::nn::Linear in{nullptr}, out{nullptr};
  torch::nn::ModuleList blocks;
  torch::nn::Sequential chain;
  bool in_sequential;
  explicit NetImpl(bool in_sequential = false) : in_sequential(in_sequential) {
    in = register_module("in", torch::nn::Linear(4, 8));
    for (int i = 0; i < 3; ++i) {
      if (in_sequential) {
        chain->push_back(Block());
      } else {
        blocks->push_back(Block());
      }
    }
    if (in_sequential) {
      register_module("chain", chain);
    } else {
      register_module("blocks", blocks);
    }
    out = register_module("out", torch::nn::Linear(8, 3));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = in(x);
    if (in_sequential) {
      h = chain->forward(h);
    } else {
      h = run_blocks(*blocks, h);
    }
    return out(h);
  }
};
TORCH_MODULE(Net);

struct Sharded {
  Net net{nullptr};
  std::shared_ptr<FullyShardedModel> fsdp;
};

Sharded shard(ShardingStrategy strategy, DType dtype = DType::kFloat32,
              bool in_sequential = false) {
  torch::manual_seed(3);
  Sharded s;
  s.net = Net(in_sequential);
  s.fsdp = fully_shard(
      s.net.ptr(), test::world(),
      ShardingOptions().strategy(strategy).param_dtype(dtype).wrap(WrapPolicy::by_type({"Block"})));
  return s;
}

// Inputs in the compute dtype: fsdp::forward casts nothing.
at::Tensor batch(DType dtype = DType::kFloat32) {
  return torch::ones({2, 4}, dtype == DType::kBFloat16 ? at::kBFloat16 : at::kFloat);
}

void train_step(Sharded& s, DType dtype = DType::kFloat32) {
  fsdp::forward(s.net, batch(dtype)).to(at::kFloat).pow(2).mean().backward();
}

// The message of what `fn` throws ("" when it returns).
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Whether a unit's parameters are released between steps: unless the unit's full buffer is its
// fp32 master shard (one shard, fp32: NO_SHARD or one rank), which is never released.
bool released_between_steps(ShardingStrategy strategy, DType dtype) {
  const bool one_shard = strategy == ShardingStrategy::kNoShard || test::world()->size() == 1;
  return !one_shard || dtype != DType::kFloat32;
}

const ShardingStrategy kStrategies[] = {ShardingStrategy::kFullShard,
                                        ShardingStrategy::kShardGradOp, ShardingStrategy::kNoShard};

// Every read a user tries between steps (issue 59: norm and sum segfaulted, printing and element
// access threw LibTorch's setStorage error): fsdp's error naming the parameter, its unit and
// gather_full_params; or, where nothing is released, the values gather_full_params gives.
TEST(ReadsBetweenSteps, FailInFsdpWordsOrGiveTheValues) {
  for (ShardingStrategy strategy : kStrategies) {
    for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
      Sharded s = shard(strategy, dtype);
      train_step(s, dtype);
      const at::Tensor w = s.net->blocks->ptr<BlockImpl>(1)->fc1->weight;
      const std::string where = std::string(to_string(strategy)) + " " + dtype_name(dtype);
      const std::vector<std::pair<const char*, std::function<void()>>> reads = {
          {"norm", [&] { (void)w.norm().item<double>(); }},
          {"sum", [&] { (void)w.sum().item<double>(); }},
          {"clone", [&] { (void)w.clone(); }},
          {"element", [&] { (void)w[0][0].item<double>(); }},
          {"print", [&] {
             std::ostringstream os;
             os << w;
           }}};
      const bool released = released_between_steps(strategy, dtype);
      for (const auto& [name, read] : reads) {
        const std::string e = error_of(read);
        if (!released) {
          EXPECT_EQ(e, "") << where << " " << name;
          continue;
        }
        EXPECT_NE(e.find("fsdp: "), std::string::npos) << where << " " << name << ": " << e;
        EXPECT_NE(e.find("'blocks.1.fc1.weight' (unit 'blocks.1')"), std::string::npos)
            << where << " " << name << ": " << e;
        EXPECT_NE(e.find("gather_full_params"), std::string::npos) << where << " " << name;
      }
      // Metadata stays readable, and the values come through gather_full_params.
      EXPECT_EQ(w.sizes(), (std::vector<int64_t>{16, 8})) << where;
      EXPECT_TRUE(w.requires_grad()) << where;
      const at::Tensor full = s.fsdp->gather_full_params().at("blocks.1.fc1.weight");
      if (!released) {
        EXPECT_TRUE(at::equal(w.to(at::kFloat), full.to(at::kFloat))) << where;
      }
      // Training goes on as before the reads.
      train_step(s, dtype);
    }
  }
}

// A wrapped block called directly, instead of through fsdp::forward: fsdp's error naming the
// block's parameter and fsdp::forward, wherever the block's parameters are sharded then (at
// NO_SHARD or one fp32 shard nothing is released; the runtime's end-of-forward check names the
// unit there, tests/test_core.cpp).
TEST(Mistakes, AWrappedBlockCalledDirectlyIsNamed) {
  for (ShardingStrategy strategy : kStrategies) {
    if (!released_between_steps(strategy, DType::kFloat32)) continue;
    Sharded s = shard(strategy);
    const std::string e = error_of([&] {
      (void)s.net->blocks->ptr<BlockImpl>(2)->forward(torch::ones({2, 8}));
    });
    EXPECT_NE(e.find("'blocks.2.fc1.weight' (unit 'blocks.2')"), std::string::npos)
        << to_string(strategy) << ": " << e;
    EXPECT_NE(e.find("fsdp::forward(module, ...)"), std::string::npos) << e;
    // The root called directly: its own parameters are sharded before the first forward.
    const std::string root = error_of([&] { (void)s.net->forward(batch()); });
    EXPECT_NE(root.find("'in.weight' (unit '(root)')"), std::string::npos) << root;
    train_step(s);  // and through fsdp::forward it trains
  }
}

// fsdp::forward takes what LibTorch users hold: a holder, a shared_ptr (a temporary one too) and
// the module itself (issue 59: `*block` gave 36 lines of operator* candidates, a temporary was
// refused); each goes through the unit's hooks, so a sharded block runs.
TEST(Forward, TakesAHolderASharedPtrATemporaryAndTheModule) {
  Sharded s = shard(ShardingStrategy::kFullShard);
  torch::NoGradGuard no_grad;
  fsdp::forward(s.net, batch());  // the root first, as a forward does
  const at::Tensor x = torch::ones({2, 8});
  std::shared_ptr<BlockImpl> block = s.net->blocks->ptr<BlockImpl>(0);
  const at::Tensor a = fsdp::forward(block, x);
  const at::Tensor b = fsdp::forward(s.net->blocks->ptr<BlockImpl>(0), x);
  const at::Tensor c = fsdp::forward(*block, x);
  EXPECT_TRUE(at::equal(a, b));
  EXPECT_TRUE(at::equal(a, c));
}

// Blocks wrapped by type but run by a Sequential, which calls its children itself: the first
// forward names the block's parameter and fsdp::forward.
TEST(Mistakes, WrappedBlocksInsideASequentialAreNamed) {
  if (!released_between_steps(ShardingStrategy::kFullShard, DType::kFloat32)) {
    GTEST_SKIP() << "one fp32 shard releases nothing: the blocks' parameters stay readable "
                    "(covered at 2+ ranks)";
  }
  Sharded s = shard(ShardingStrategy::kFullShard, DType::kFloat32, /*in_sequential=*/true);
  const std::string e = error_of([&] { train_step(s); });
  EXPECT_NE(e.find("'chain.0.fc1.weight' (unit 'chain.0')"), std::string::npos) << e;
  EXPECT_NE(e.find("fsdp::forward"), std::string::npos) << e;
}

// A step with gradient synchronisation left off after accumulation (issue 59: the model barely
// trained, exit 0): refused, naming the unit and the fix; with synchronisation back on the same
// accumulated gradients are reduced and the step goes through.
TEST(Mistakes, AStepWithGradientSyncLeftOffIsRefused) {
  Sharded s = shard(ShardingStrategy::kFullShard);
  AdamW opt(sharded_params(*s.fsdp));
  s.fsdp->set_requires_gradient_sync(false);
  train_step(s);
  const std::string e = error_of([&] { opt.step(); });
  EXPECT_NE(e.find("optimizer step with gradient synchronisation off"), std::string::npos) << e;
  EXPECT_NE(e.find("unit '"), std::string::npos) << e;
  EXPECT_NE(e.find("set_requires_gradient_sync(true)"), std::string::npos) << e;
  EXPECT_EQ(opt.step_count(), 0);
  s.fsdp->set_requires_gradient_sync(true);
  train_step(s);
  opt.step();
  EXPECT_EQ(opt.step_count(), 1);
}

// A container without a forward (ModuleList, ModuleDict) selected as a unit: refused at
// fully_shard, naming it and what to wrap instead (issue 59: accepted, then LibTorch's storage
// error at the first forward).
TEST(Mistakes, AContainerWithoutAForwardIsRefusedAsAUnit) {
  for (const WrapPolicy& policy :
       {WrapPolicy::by_name({"blocks"}), WrapPolicy::by_type({"ModuleList"})}) {
    torch::manual_seed(3);
    Net net;
    const std::string e =
        error_of([&] { fully_shard(net.ptr(), test::world(), ShardingOptions().wrap(policy)); });
    EXPECT_NE(e.find("selects 'blocks', a torch::nn::ModuleList"), std::string::npos) << e;
    EXPECT_NE(e.find("'blocks.0'"), std::string::npos) << e;
    fully_shard(net.ptr(), test::world(), ShardingOptions().wrap(WrapPolicy::by_type({"Block"})));
  }
}

// The model after its FullyShardedModel is destroyed: its parameters' bytes are gone; a read is
// fsdp's error, not a read of freed memory.
TEST(Mistakes, AModelUsedAfterItsShardingIsGoneFailsInFsdpWords) {
  if (!released_between_steps(ShardingStrategy::kFullShard, DType::kBFloat16)) return;
  Sharded s = shard(ShardingStrategy::kFullShard, DType::kBFloat16);
  train_step(s, DType::kBFloat16);
  s.fsdp.reset();
  const std::string e = error_of([&] { (void)s.net->forward(batch(DType::kBFloat16)); });
  EXPECT_NE(e.find("fsdp: "), std::string::npos) << e;
  EXPECT_NE(e.find("while it is sharded"), std::string::npos) << e;
}

// --- buffers ------------------------------------------------------------------------------------

namespace fs = std::filesystem;

// BatchNorm over the input layer's features, a counter the forward increments in place and a bool
// mask it reads, before two wrapped blocks.
struct BnNetImpl : torch::nn::Module {
  torch::nn::Linear in{nullptr}, out{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
  torch::nn::ModuleList blocks;
  at::Tensor count, mask;
  explicit BnNetImpl(bool extra_buffer = false) {
    in = register_module("in", torch::nn::Linear(4, 8));
    bn = register_module("bn", torch::nn::BatchNorm1d(8));
    for (int i = 0; i < 2; ++i) blocks->push_back(Block());
    register_module("blocks", blocks);
    out = register_module("out", torch::nn::Linear(8, 3));
    count = register_buffer("count", torch::zeros({}, torch::kLong));
    mask = register_buffer("mask", torch::ones({8}, torch::kBool));
    if (extra_buffer) register_buffer("extra", torch::zeros({2}));
  }
  at::Tensor forward(const at::Tensor& x) {
    count.add_(1);
    at::Tensor h = bn(in(x)) * mask;
    return out(run_blocks(*blocks, h));
  }
};
TORCH_MODULE(BnNet);

struct BnSharded {
  BnNet net{nullptr};
  std::shared_ptr<FullyShardedModel> fsdp;
  std::unique_ptr<AdamW> opt;
};

BnSharded shard_bn(BufferSync sync, uint64_t seed = 5, bool extra_buffer = false) {
  torch::manual_seed(seed);
  BnSharded s;
  s.net = BnNet(extra_buffer);
  s.fsdp = fully_shard(s.net.ptr(), test::world(),
                       ShardingOptions().buffer_sync(sync).wrap(WrapPolicy::by_type({"Block"})));
  s.opt = std::make_unique<AdamW>(sharded_params(*s.fsdp));
  return s;
}

// One step on this rank's own rows (they differ by rank and step: per-rank statistics differ).
void bn_step(BnSharded& s, int64_t step) {
  const int rank = test::world()->rank();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(100 * step + rank));
  const at::Tensor x = at::randn({6, 4}, gen) * (1.0 + rank);
  s.opt->zero_grad();
  fsdp::forward(s.net, x).pow(2).mean().backward();
  s.opt->step();
}

std::map<std::string, at::Tensor> buffer_values(const FullyShardedModel& m) {
  std::map<std::string, at::Tensor> out;
  for (const NamedBuffer& b : m.buffers()) out[b.name] = b.tensor.clone();
  return out;
}

// Every rank's value of a float buffer, rank by rank ([world, numel]).
at::Tensor all_ranks(const at::Tensor& t) {
  CommPtr world = test::world();
  const at::Tensor mine = t.to(at::kFloat).reshape({-1}).contiguous();
  at::Tensor all = at::empty({world->size(), mine.numel()});
  world->all_gather(mine.data_ptr(), all.data_ptr(), mine.numel(), DType::kFloat32);
  return all;
}

std::string shared_dir(const std::string& stem) {
  CommPtr world = test::world();
  int64_t id = ::getpid();
  world->broadcast(&id, 1, DType::kInt64, 0);
  const std::string dir =
      (fs::temp_directory_path() / ("fsdp_modules_" + stem + "_" + std::to_string(id))).string();
  if (world->rank() == 0) fs::create_directories(dir);
  world->barrier();
  return dir;
}

TEST(Buffers, AreRankZerosAfterFullyShard) {
  torch::manual_seed(5);
  BnNet net;
  const int rank = test::world()->rank();
  {
    at::NoGradGuard no_grad;
    net->bn->running_mean.fill_(static_cast<double>(rank));
    net->count.fill_(rank * 7);
    net->mask[rank % 8] = false;
  }
  auto fsdp = fully_shard(net.ptr(), test::world(), ShardingOptions());
  EXPECT_TRUE(at::equal(net->bn->running_mean, torch::zeros({8})));
  EXPECT_EQ(net->count.item<int64_t>(), 0);
  EXPECT_FALSE(net->mask[0].item<bool>());
  EXPECT_EQ(net->mask.sum().item<int64_t>(), 7);
  std::vector<std::string> names;
  for (const NamedBuffer& b : fsdp->buffers()) names.push_back(b.name);
  EXPECT_EQ(names, (std::vector<std::string>{"count", "mask", "bn.running_mean", "bn.running_var",
                                             "bn.num_batches_tracked"}));
}

// PER_RANK: each rank's statistics follow its own rows; BROADCAST and AVERAGE: after sync_buffers
// (what the next forward and a save do first) every rank holds rank 0's, or the ranks' mean.
TEST(Buffers, FollowTheirSyncOption) {
  const int n = test::world()->size();
  for (BufferSync sync : {BufferSync::kPerRank, BufferSync::kBroadcast, BufferSync::kAverage}) {
    BnSharded s = shard_bn(sync);
    for (int64_t step = 0; step < 3; ++step) bn_step(s, step);
    const at::Tensor before = all_ranks(s.net->bn->running_mean);
    EXPECT_EQ(s.net->bn->num_batches_tracked.item<int64_t>(), 3) << to_string(sync);
    EXPECT_EQ(s.net->count.item<int64_t>(), 3);
    if (n > 1) {
      EXPECT_GT((before[1] - before[0]).abs().max().item<double>(), 1e-3)
          << to_string(sync) << ": each rank's last forward saw its own rows";
    }
    s.fsdp->sync_buffers();
    const at::Tensor after = all_ranks(s.net->bn->running_mean);
    for (int r = 0; r < n; ++r) {
      const at::Tensor want = sync == BufferSync::kPerRank     ? before[r]
                              : sync == BufferSync::kBroadcast ? before[0]
                                                               : before.mean(0);
      EXPECT_TRUE(at::allclose(after[r], want, 1e-6, 1e-7)) << to_string(sync) << " rank " << r;
    }
  }
}

// A checkpoint holds rank 0's buffers, and a resume continues from them: rank 0's buffers and
// every parameter end bit for bit as in the uninterrupted run (issue 59: num_batches_tracked 10
// where it should be 20, running_mean 0.26 off, a counter restarted from 0).
TEST(Buffers, SurviveACheckpointAndAReshard) {
  CommPtr world = test::world();
  const std::string dir = shared_dir("resume");
  BnSharded run = shard_bn(BufferSync::kPerRank);
  for (int64_t step = 0; step < 2; ++step) bn_step(run, step);
  const std::string path = save_checkpoint(dir + "/ckpt", 2, *run.fsdp, run.opt.get(), "{}");
  for (int64_t step = 2; step < 4; ++step) bn_step(run, step);
  const auto want_buffers = buffer_values(*run.fsdp);
  const auto want_params = run.fsdp->gather_full_params();

  BnSharded resumed = shard_bn(BufferSync::kPerRank, /*seed=*/6);
  load_checkpoint(path, *resumed.fsdp, resumed.opt.get());
  if (world->rank() == 0) {  // rank 0's are what was saved: its trajectory is the same
    EXPECT_EQ(resumed.net->bn->num_batches_tracked.item<int64_t>(), 2);
    EXPECT_EQ(resumed.net->count.item<int64_t>(), 2);
  }
  for (int64_t step = 2; step < 4; ++step) bn_step(resumed, step);
  for (const auto& [name, value] : resumed.fsdp->gather_full_params()) {
    EXPECT_TRUE(at::equal(value, want_params.at(name))) << name;
  }
  if (world->rank() == 0) {
    for (const auto& [name, value] : buffer_values(*resumed.fsdp)) {
      EXPECT_TRUE(at::equal(value, want_buffers.at(name))) << name;
    }
  }
  // The buffers' file in the metadata, checked by verify, copied by a reshard to any world size.
  const CheckpointMetadata meta = read_checkpoint_metadata(path);
  ASSERT_EQ(meta.buffers.size(), 5u);
  EXPECT_EQ(meta.buffers[0].name, "count");
  EXPECT_EQ(meta.buffers[0].dtype, "I64");
  EXPECT_EQ(meta.buffers[1].dtype, "BOOL");
  EXPECT_TRUE(verify_checkpoint(path).empty());
  if (world->rank() == 0) {
    reshard_checkpoint(path, dir + "/resharded", world->size() + 1);
    EXPECT_TRUE(verify_checkpoint(dir + "/resharded").empty());
    EXPECT_EQ(read_checkpoint_metadata(dir + "/resharded").buffers.size(), 5u);
  }
  world->barrier();
  BnSharded from_reshard = shard_bn(BufferSync::kPerRank, /*seed=*/7);
  load_checkpoint(dir + "/resharded", *from_reshard.fsdp, from_reshard.opt.get());
  EXPECT_EQ(from_reshard.net->count.item<int64_t>(), 2);
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir);
}

// What does not fit is refused by name before anything changes: a model with a buffer the
// checkpoint lacks, a checkpoint from before buffers were saved, a damaged buffer file.
TEST(Buffers, ACheckpointThatDoesNotFitIsRefusedByName) {
  CommPtr world = test::world();
  const std::string dir = shared_dir("refused");
  BnSharded run = shard_bn(BufferSync::kPerRank);
  bn_step(run, 0);
  const std::string path = save_checkpoint(dir + "/ckpt", 1, *run.fsdp, run.opt.get(), "{}");
  auto message = [&](BnSharded& s, const std::string& from) {
    return error_of([&] { load_checkpoint(from, *s.fsdp, s.opt.get()); });
  };
  // Each load once: it is a collective, so a failure message must not load again on one rank.
  BnSharded extra = shard_bn(BufferSync::kPerRank, 5, /*extra_buffer=*/true);
  const std::string lacking = message(extra, path);
  EXPECT_NE(lacking.find("has no buffer 'extra'"), std::string::npos) << lacking;
  EXPECT_EQ(extra.net->count.item<int64_t>(), 0);  // nothing loaded

  // The same checkpoint as an older build wrote it: no "buffers" in its metadata.
  const std::string old = dir + "/old";
  if (world->rank() == 0) {
    fs::copy(path, old, fs::copy_options::recursive);
    nlohmann::json meta;
    std::ifstream(old + "/metadata.json") >> meta;
    EXPECT_EQ(meta.erase("buffers"), 1u);  // not ASSERT: rank 0 must reach the barrier
    std::ofstream(old + "/metadata.json") << meta.dump(1);
    // A flipped bit in the original's buffer file.
    std::fstream f(path + "/buffers.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    const char last = static_cast<char>(f.get());
    f.seekp(-1, std::ios::end);
    f.put(static_cast<char>(last ^ 1));
  }
  world->barrier();
  BnSharded plain = shard_bn(BufferSync::kPerRank);
  const std::string from_old = message(plain, old), damaged = message(plain, path);
  EXPECT_NE(from_old.find("holds no buffers"), std::string::npos) << from_old;
  EXPECT_NE(damaged.find("checksum mismatch in"), std::string::npos) << damaged;
  EXPECT_FALSE(verify_checkpoint(path).empty());
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir);
}

// A full state holds the buffers in their own dtypes, loads them back (from every rank's read or
// from rank 0's), names one it lacks; a consolidated checkpoint holds them too.
TEST(Buffers, AreInFullStatesAndConsolidations) {
  CommPtr world = test::world();
  const std::string dir = shared_dir("full");
  BnSharded run = shard_bn(BufferSync::kAverage);
  for (int64_t step = 0; step < 2; ++step) bn_step(run, step);
  const std::string file = dir + "/model.safetensors";
  save_full_safetensors(*run.fsdp, file);  // averages first
  const auto want = buffer_values(*run.fsdp);
  const SafetensorsReader reader(file);
  ASSERT_NE(reader.find("bn.num_batches_tracked"), nullptr);
  EXPECT_EQ(reader.info("bn.num_batches_tracked").dtype, SafetensorsDType::kI64);
  EXPECT_EQ(reader.info("mask").dtype, SafetensorsDType::kBool);
  for (bool from_rank0 : {false, true}) {
    BnSharded loaded = shard_bn(BufferSync::kAverage, /*seed=*/9);
    load_full_safetensors(*loaded.fsdp, file, FullStateLoadOptions().from_rank0(from_rank0));
    for (const auto& [name, value] : buffer_values(*loaded.fsdp)) {
      EXPECT_TRUE(at::equal(value, want.at(name))) << name << " from_rank0 " << from_rank0;
    }
  }
  BnSharded extra = shard_bn(BufferSync::kAverage, 5, /*extra_buffer=*/true);
  const std::string e = error_of([&] { load_full_safetensors(*extra.fsdp, file); });
  EXPECT_NE(e.find("no tensor for the model's 'extra'"), std::string::npos) << e;

  const std::string path = save_checkpoint(dir + "/ckpt", 2, *run.fsdp, run.opt.get(), "{}");
  if (world->rank() == 0) {
    consolidate_checkpoint(path, dir + "/consolidated.safetensors");
    const SafetensorsReader c(dir + "/consolidated.safetensors");
    const at::Tensor count = at::empty({}, at::kLong);
    c.read("count", count);
    EXPECT_EQ(count.item<int64_t>(), 2);
    EXPECT_EQ(c.tensors().size(), reader.tensors().size());
  }
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir);
}

// Ranks whose models have other buffers are refused at fully_shard, naming the rank, where the
// broadcast would otherwise run collectives of different sizes.
TEST(Buffers, RanksWithOtherBuffersAreRefused) {
  if (test::world()->size() == 1) GTEST_SKIP() << "needs two ranks to differ";
  torch::manual_seed(5);
  BnNet net(/*extra_buffer=*/test::world()->rank() == 1);
  const std::string e = error_of([&] { fully_shard(net.ptr(), test::world(), ShardingOptions()); });
  EXPECT_NE(e.find("rank 1's module has other buffers than rank 0's"), std::string::npos) << e;
}

}  // namespace
}  // namespace fsdp
