// Sharded checkpoints, in one process group: save and load at the same world size restore
// parameters and optimizer state bit for bit; a checkpoint saved by any subset of the ranks loads
// into any other (resharding), under every strategy; inspection and offline resharding agree with
// the live model; and every kind of damaged checkpoint is refused with an error naming the file.
// Resuming in new processes and a rank killed mid-save are in tests/checkpoint_resume.sh.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>

#include "fsdp/checkpoint/checkpoint.h"
#include "fsdp/checkpoint/full_state.h"
#include "fsdp/checkpoint/ownership.h"
#include "fsdp/fsdp.h"
#include "test_util.h"

namespace fsdp {
namespace {

namespace fs = std::filesystem;

// Caps the size of files this process writes while it lives (RLIMIT_FSIZE), with SIGXFSZ ignored
// so that a write past the cap fails with EFBIG instead of killing the process.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, old_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  void (*old_handler_)(int) = SIG_DFL;
};

// World size 3 pads every unit (see tests/test_parity.cpp).
GPT2Config tiny_config(int64_t n_layer = 2) {
  GPT2Config c;
  c.vocab_size = 65;
  c.n_positions = 16;
  c.n_embd = 32;
  c.n_layer = n_layer;
  c.n_head = 4;
  return c;
}

// A folder every rank of `comm` agrees on: rank 0 picks it, the others learn its number.
std::string shared_dir(Comm& comm, const std::string& tag) {
  static int64_t counter = 0;
  int64_t id[2] = {static_cast<int64_t>(::getpid()), ++counter};
  comm.broadcast(id, 2, DType::kInt64, 0);
  const std::string dir =
      (fs::temp_directory_path() /
       ("fsdp_ckpt_" + tag + "_" + std::to_string(id[0]) + "_" + std::to_string(id[1])))
          .string();
  comm.barrier();
  return dir;
}

struct Trained {
  GPT2 model{nullptr};
  std::shared_ptr<FullyShardedModel> sharded;
  std::unique_ptr<AdamW> opt;
};

// `shard_group_size` applies to the hybrid strategies only.
Trained make(CommPtr comm, ShardingStrategy strategy, uint64_t seed, int shard_group_size = 0,
             int64_t n_layer = 2) {
  Trained t;
  t.model = GPT2(tiny_config(n_layer));
  init_gpt2_weights(*t.model, seed);
  t.sharded = fully_shard(t.model.ptr(), std::move(comm),
                          ShardingOptions()
                              .strategy(strategy)
                              .wrap(WrapPolicy::by_type({"GPT2Block"}))
                              .shard_group_size(is_hybrid(strategy) ? shard_group_size : 0));
  AdamWOptions o;
  o.lr = 1e-2;
  t.opt = std::make_unique<AdamW>(sharded_params(*t.sharded), o);
  return t;
}

// A few steps on a global batch split across the ranks, so that Adam's moments are nonzero.
void train(Trained& t, int steps) {
  Comm& world = t.sharded->world();
  const int64_t rows = 12 / world.size(), T = tiny_config().n_positions;
  for (int s = 0; s < steps; ++s) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(99 + s);
    at::Tensor tokens = at::randint(tiny_config().vocab_size, {12, T + 1}, gen, at::kLong);
    at::Tensor mine = tokens.narrow(0, world.rank() * rows, rows);
    t.opt->zero_grad();
    gpt2_loss(fsdp::forward(t.model, mine.narrow(1, 0, T)), mine.narrow(1, 1, T)).backward();
    t.opt->step();
  }
}

void expect_same_params(std::map<std::string, at::Tensor> a, std::map<std::string, at::Tensor> b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    EXPECT_TRUE(at::equal(t, b[name])) << name;
  }
}

// This rank's shards, Adam's moments over them, the step count and the learning rate.
void expect_same_shards(const Trained& a, const Trained& b) {
  auto sa = a.sharded->shards(), sb = b.sharded->shards();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t u = 0; u < sa.size(); ++u) {
    EXPECT_TRUE(at::equal(sa[u].param, sb[u].param)) << sa[u].unit_name;
    EXPECT_TRUE(at::equal(a.opt->exp_avg(u), b.opt->exp_avg(u))) << sa[u].unit_name;
    EXPECT_TRUE(at::equal(a.opt->exp_avg_sq(u), b.opt->exp_avg_sq(u))) << sa[u].unit_name;
  }
  EXPECT_EQ(a.opt->step_count(), b.opt->step_count());
  EXPECT_EQ(a.opt->lr(), b.opt->lr());
}

TEST(Checkpoint, SameWorldSizeRestoresEverythingBitForBit) {
  CommPtr world = test::world();
  const std::string root = shared_dir(*world, "same");
  Trained a = make(world, ShardingStrategy::kFullShard, 1);
  train(a, 3);
  a.opt->set_lr(3e-3);
  const std::string path = save_checkpoint(root, 3, *a.sharded, a.opt.get(), R"({"data": 17})");
  EXPECT_EQ(latest_checkpoint(root).value_or(""), path);

  Trained b = make(world, ShardingStrategy::kFullShard, 2);  // other weights, fresh moments
  const LoadedCheckpoint loaded = load_checkpoint(root, *b.sharded, b.opt.get());
  EXPECT_EQ(loaded.step, 3);
  EXPECT_EQ(loaded.path, path);
  EXPECT_NE(loaded.train_state.find("\"data\":17"), std::string::npos) << loaded.train_state;
  expect_same_shards(a, b);
  // Both continue identically.
  train(a, 2);
  train(b, 2);
  expect_same_params(a.sharded->gather_full_params(), b.sharded->gather_full_params());
  if (world->rank() == 0) {
    EXPECT_TRUE(verify_checkpoint(path).empty());
  }
  world->barrier();
  if (world->rank() == 0) fs::remove_all(root);
}

// Ranks [0, saver) save; ranks [0, loader) load into a model sharded with `strategy`: the loaded
// parameters and moments equal the saved ones, whatever the two world sizes and strategies.
void reshard_case(int savers, ShardingStrategy save_strategy, int loaders,
                  ShardingStrategy load_strategy, int shard_group_size = 0) {
  CommPtr world = test::world();
  const std::string root = shared_dir(*world, "reshard");
  const int rank = world->rank();
  std::map<std::string, at::Tensor> expected;
  {
    CommPtr group = world->split(rank < savers ? 0 : 1, rank);
    if (rank < savers) {
      Trained a = make(group, save_strategy, 5, shard_group_size);
      train(a, 2);
      save_checkpoint(root, 2, *a.sharded, a.opt.get(), "{}");
      expected = a.sharded->gather_full_params();
    }
  }
  // Rank 0 saved: it broadcasts the parameters it saved, and every loader compares its own.
  world->barrier();
  CommPtr group = world->split(rank < loaders ? 0 : 1, rank);
  std::map<std::string, at::Tensor> got;
  if (rank < loaders) {
    Trained b = make(group, load_strategy, 6, shard_group_size);
    load_checkpoint(root, *b.sharded, b.opt.get());
    EXPECT_EQ(b.opt->step_count(), 2);
    got = b.sharded->gather_full_params();
  }
  GPT2 names(tiny_config());
  for (const auto& item : names->named_parameters()) {
    at::Tensor t = rank == 0 ? expected.at(item.key()) : at::empty_like(item.value());
    world->broadcast(t.data_ptr(), t.numel(), DType::kFloat32, 0);
    if (rank < loaders) {
      EXPECT_TRUE(at::equal(t, got.at(item.key()))) << item.key();
    }
  }
  world->barrier();
  if (rank == 0) fs::remove_all(root);
}

TEST(Checkpoint, ReshardsFromEveryWorldSizeToEveryOther) {
  const int n = test::world()->size();
  for (int savers = 1; savers <= n; ++savers) {
    for (int loaders = 1; loaders <= n; ++loaders) {
      SCOPED_TRACE("save at " + std::to_string(savers) + ", load at " + std::to_string(loaders));
      reshard_case(savers, ShardingStrategy::kFullShard, loaders, ShardingStrategy::kFullShard);
    }
  }
}

TEST(Checkpoint, LoadsAcrossStrategies) {
  const int n = test::world()->size();
  reshard_case(n, ShardingStrategy::kFullShard, n, ShardingStrategy::kNoShard);
  reshard_case(n, ShardingStrategy::kNoShard, n, ShardingStrategy::kShardGradOp);
  if (n == 4) {
    reshard_case(4, ShardingStrategy::kHybridShard, 4, ShardingStrategy::kFullShard, 2);
    reshard_case(4, ShardingStrategy::kFullShard, 4, ShardingStrategy::kHybridShardZero2, 2);
  }
}

// What fsdp-ckpt builds on: the metadata describes the model, the offline reshard writes a
// checkpoint for another world size that loads into the same parameters.
TEST(Checkpoint, MetadataAndOfflineReshard) {
  CommPtr world = test::world();
  const std::string root = shared_dir(*world, "offline");
  Trained a = make(world, ShardingStrategy::kFullShard, 7);
  train(a, 1);
  const std::string path = save_checkpoint(root, 1, *a.sharded, a.opt.get(), "{}");
  const CheckpointMetadata meta = read_checkpoint_metadata(path);
  EXPECT_EQ(meta.world_size, world->size());
  EXPECT_EQ(meta.shard_count, world->size());
  EXPECT_EQ(meta.optimizer, "adamw");
  EXPECT_EQ(meta.tensor_kinds, (std::vector<std::string>{"param", "exp_avg", "exp_avg_sq"}));
  ASSERT_EQ(meta.units.size(), a.sharded->units().size());
  for (size_t u = 0; u < meta.units.size(); ++u) {
    EXPECT_EQ(meta.units[u].name, a.sharded->units()[u].name);
    EXPECT_EQ(meta.units[u].numel, a.sharded->units()[u].numel);
  }
  const std::string resharded = root + "_resharded";  // outside the root: it is the run's
  if (world->rank() == 0) reshard_checkpoint(path, resharded, world->size() % 3 + 1);
  world->barrier();
  EXPECT_TRUE(verify_checkpoint(resharded).empty());
  EXPECT_EQ(read_checkpoint_metadata(resharded).shard_count, world->size() % 3 + 1);
  Trained b = make(world, ShardingStrategy::kFullShard, 8);
  load_checkpoint(resharded, *b.sharded, b.opt.get());
  expect_same_shards(a, b);
  world->barrier();
  if (world->rank() == 0) {
    fs::remove_all(root);
    fs::remove_all(resharded);
  }
}

// --- damaged checkpoints ---------------------------------------------------------------------

// The CheckpointError `f` throws, or "no error".
std::string checkpoint_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "no error";
}

class Damaged : public ::testing::Test {
 protected:
  void SetUp() override {
    world_ = test::world();
    root_ = shared_dir(*world_, "damaged");
    Trained a = make(world_, ShardingStrategy::kFullShard, 3);
    path_ = save_checkpoint(root_, 4, *a.sharded, a.opt.get(), "{}");
    shard0_ = path_ + "/shard_00000-of-" + pad5(world_->size()) + ".bin";
  }
  void TearDown() override {
    world_->barrier();
    if (world_->rank() == 0) fs::remove_all(root_);
  }
  static std::string pad5(int n) {
    char buf[12];  // room for any int: GCC 16 warns (-Wformat-truncation) at 8
    std::snprintf(buf, sizeof buf, "%05d", n);
    return buf;
  }
  // Rank 0 damages the checkpoint; then every rank tries to load it.
  std::string load_error(const std::function<void()>& damage) {
    if (world_->rank() == 0) damage();
    world_->barrier();
    Trained b = make(world_, ShardingStrategy::kFullShard, 4);
    try {
      load_checkpoint(path_, *b.sharded, b.opt.get());
    } catch (const CheckpointError& e) {
      return e.what();
    }
    return "";
  }
  CommPtr world_;
  std::string root_, path_, shard0_;
};

TEST_F(Damaged, FlippedByteIsAChecksumMismatchNamingTheFile) {
  const std::string error = load_error([&] {
    std::fstream f(shard0_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    char c = 0;
    f.read(&c, 1);
    f.seekp(100);
    c = static_cast<char>(c ^ 0x10);
    f.write(&c, 1);
  });
  // Rank 0 reads shard 0; the others learn that rank 0 failed.
  EXPECT_NE(error.find(world_->rank() == 0 ? "checksum mismatch" : "failed on rank 0"),
            std::string::npos)
      << error;
  if (world_->rank() == 0) {
    EXPECT_NE(error.find(shard0_), std::string::npos) << error;
    EXPECT_FALSE(verify_checkpoint(path_).empty());
  }
}

TEST_F(Damaged, TruncatedShardNamesTheFile) {
  const std::string error =
      load_error([&] { fs::resize_file(shard0_, fs::file_size(shard0_) - 8); });
  if (world_->rank() == 0) {
    EXPECT_NE(error.find(shard0_), std::string::npos) << error;
    EXPECT_NE(error.find("truncated"), std::string::npos) << error;
  } else {
    EXPECT_FALSE(error.empty());
  }
}

TEST_F(Damaged, MissingShardFileNamesTheFile) {
  const std::string error = load_error([&] { fs::remove(shard0_); });
  if (world_->rank() == 0) {
    EXPECT_NE(error.find(shard0_ + "' is missing"), std::string::npos) << error;
  }
  EXPECT_FALSE(error.empty());
}

TEST_F(Damaged, UncommittedCheckpointIsNeverLoaded) {
  const std::string error = load_error([&] { fs::remove(path_ + "/COMMITTED"); });
  EXPECT_NE(error.find("no COMMITTED marker"), std::string::npos) << error;
  EXPECT_THROW(latest_checkpoint(root_), CheckpointError);
}

// One check for every reader: a folder whose save never finished is refused by loading, offline
// resharding, consolidation into one file and the reader they share, each naming the marker.
// Issue 28's wording: a `latest` naming a folder that is gone, a folder where a shard file belongs
// and a checkpoint path that does not exist are each named for what they are, not as a missing
// COMMITTED marker or a shard of 4096 bytes.
TEST_F(Damaged, MissingAndMisplacedPathsAreNamedForWhatTheyAre) {
  const std::string gone = root_ + "/gone";
  EXPECT_NE(checkpoint_error([&] {
              CheckpointReader reader(gone);
            }).find("'" + gone + "': no such folder"),
            std::string::npos);
  EXPECT_NE(checkpoint_error([&] {
              read_checkpoint_metadata(gone);
            }).find("'" + gone + "': no such folder"),
            std::string::npos);
  world_->barrier();
  if (world_->rank() == 0) {
    std::ofstream(root_ + "/latest") << "step_00000099\n";
  }
  world_->barrier();
  const std::string latest_error = checkpoint_error([&] { latest_checkpoint(root_); });
  EXPECT_NE(latest_error.find("names '" + root_ + "/step_00000099', which does not exist"),
            std::string::npos)
      << latest_error;
  const std::string shard_error = load_error([&] {
    fs::remove(shard0_);
    fs::create_directory(shard0_);
  });
  EXPECT_NE(shard_error.find("'" + shard0_ + "' is a folder where a file belongs"),
            std::string::npos)
      << shard_error;
}

// A FIFO where `latest` or metadata.json belongs is refused as what it is (issue 61): opened
// without blocking, where a plain open waits for a writer forever (shards open the same way,
// File::open_read). EXPECT, not ASSERT, on rank 0: the other ranks wait at the barrier.
TEST_F(Damaged, FifoInPlaceOfAFileIsRefusedWithoutWaiting) {
  const std::string fifo_text = "is not a regular file (a FIFO, a device or a socket)";
  const std::string latest = root_ + "/latest", metadata = path_ + "/metadata.json";
  world_->barrier();
  if (world_->rank() == 0) {
    fs::remove(latest);
    EXPECT_EQ(::mkfifo(latest.c_str(), 0600), 0) << std::strerror(errno);
  }
  world_->barrier();
  const std::string latest_error = checkpoint_error([&] { latest_checkpoint(root_); });
  EXPECT_NE(latest_error.find("'" + latest + "' " + fifo_text), std::string::npos) << latest_error;
  world_->barrier();
  if (world_->rank() == 0) {
    fs::remove(metadata);
    EXPECT_EQ(::mkfifo(metadata.c_str(), 0600), 0) << std::strerror(errno);
  }
  world_->barrier();
  const std::string metadata_error = checkpoint_error([&] { read_checkpoint_metadata(path_); });
  EXPECT_NE(metadata_error.find("'" + metadata + "' " + fifo_text), std::string::npos)
      << metadata_error;
}

TEST_F(Damaged, EveryReaderRefusesAnUncommittedCheckpoint) {
  if (world_->rank() == 0) fs::remove(path_ + "/COMMITTED");
  world_->barrier();
  if (world_->rank() == 0) {
    const std::string out = root_ + "_consolidated.safetensors";
    const std::vector<std::pair<std::string, std::function<void()>>> readers = {
        {"consolidate_checkpoint", [&] { consolidate_checkpoint(path_, out, DType::kFloat32); }},
        {"reshard_checkpoint", [&] { reshard_checkpoint(path_, root_ + "_resharded", 2); }},
        {"CheckpointReader", [&] { CheckpointReader reader(path_); }},
    };
    for (const auto& [name, read] : readers) {
      try {
        read();
        ADD_FAILURE() << name << " read an uncommitted checkpoint";
      } catch (const CheckpointError& e) {
        EXPECT_NE(std::string(e.what()).find("'" + path_ + "' has no COMMITTED marker"),
                  std::string::npos)
            << name << ": " << e.what();
      }
    }
    EXPECT_FALSE(fs::exists(out));
  }
  Trained b = make(world_, ShardingStrategy::kFullShard, 4);
  EXPECT_THROW(load_checkpoint(path_, *b.sharded, b.opt.get()), CheckpointError);
}

// A load that fails on one rank (its shard file is missing) names that rank's file on every rank,
// so that rank 0's error, the one a user sees, gives the cause.
TEST_F(Damaged, EveryRankNamesTheFileOfTheRankThatFailedToLoad) {
  const int last = world_->size() - 1;
  if (last == 0) GTEST_SKIP() << "needs a rank other than the failing one";
  const std::string missing =
      path_ + "/shard_" + pad5(last) + "-of-" + pad5(world_->size()) + ".bin";
  const std::string error = load_error([&] { fs::remove(missing); });
  EXPECT_NE(error.find("'" + missing + "' is missing"), std::string::npos) << error;
  if (world_->rank() != last) {
    EXPECT_NE(error.find("loading the checkpoint failed on rank " + std::to_string(last) + ": "),
              std::string::npos)
        << error;
  }
}

// A save that fails on some ranks: each failing rank reports its own file, never credited to
// another rank, and the others name the first failing rank and its file. Disk full is simulated
// with RLIMIT_FSIZE, as below.
TEST_F(Damaged, SaveErrorsAreCreditedToTheRankThatHadThem) {
  const int n = world_->size(), last = n - 1;
  Trained a = make(world_, ShardingStrategy::kFullShard, 5);
  auto save_error = [&](bool limited) {
    std::optional<FileSizeLimit> limit;
    if (limited) limit.emplace(4096);
    try {
      save_checkpoint(root_, 8, *a.sharded, a.opt.get(), "{}");
    } catch (const CheckpointError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto shard = [&](int r) { return "shard_" + pad5(r) + "-of-" + pad5(n) + ".bin"; };
  // Every rank's disk is full: each names its own shard file.
  const std::string all = save_error(true);
  EXPECT_NE(all.find(shard(world_->rank())), std::string::npos) << all;
  EXPECT_EQ(all.find("failed on rank"), std::string::npos) << all;
  // Only the last rank's: every rank names that rank and its file.
  const std::string one = save_error(world_->rank() == last);
  EXPECT_NE(one.find(shard(last)), std::string::npos) << one;
  if (world_->rank() != last) {
    EXPECT_NE(one.find("saving the checkpoint failed on rank " + std::to_string(last) + ": "),
              std::string::npos)
        << one;
  }
  world_->barrier();
  EXPECT_EQ(latest_checkpoint(root_).value_or(""), path_);
}

TEST_F(Damaged, MetadataFromAnotherModelIsRefused) {
  // A three-layer model's checkpoint where the two-layer model's was.
  const std::string other = root_ + "_other";
  {
    Trained big = make(world_, ShardingStrategy::kFullShard, 3, 0, 3);
    save_checkpoint(other, 4, *big.sharded, big.opt.get(), "{}");
  }
  const std::string error = load_error([&] {
    fs::copy_file(other + "/step_00000004/metadata.json", path_ + "/metadata.json",
                  fs::copy_options::overwrite_existing);
  });
  EXPECT_NE(error.find("metadata.json"), std::string::npos) << error;
  EXPECT_NE(error.find("transformer.h.2"), std::string::npos) << error;
  EXPECT_NE(error.find("different model"), std::string::npos) << error;
  world_->barrier();
  if (world_->rank() == 0) fs::remove_all(other);
}

TEST_F(Damaged, WrongFormatVersionIsRefused) {
  const std::string error = load_error([&] {
    std::ifstream in(path_ + "/metadata.json");
    std::string text((std::istreambuf_iterator<char>(in)), {});
    const auto at = text.find("\"version\": 1");
    ASSERT_NE(at, std::string::npos);
    text.replace(at, 12, "\"version\": 9");
    std::ofstream(path_ + "/metadata.json") << text;
  });
  EXPECT_NE(error.find("format version 9"), std::string::npos) << error;
}

TEST_F(Damaged, WrongMagicNamesTheFile) {
  const std::string error = load_error([&] {
    std::fstream f(shard0_, std::ios::in | std::ios::out | std::ios::binary);
    f.write("NOTASHRD", 8);
  });
  if (world_->rank() == 0) {
    EXPECT_NE(error.find("'" + shard0_ + "' is not an fsdp.cpp shard file (wrong magic)"),
              std::string::npos)
        << error;
  }
  EXPECT_FALSE(error.empty());
}

TEST_F(Damaged, ShardFromAnotherCheckpointIsRefused) {
  // Same model, same layout, same size: only the header (step 8, not 4) tells the files apart.
  Trained a = make(world_, ShardingStrategy::kFullShard, 3);
  const std::string later = save_checkpoint(root_, 8, *a.sharded, a.opt.get(), "{}");
  const std::string error = load_error([&] {
    fs::copy_file(later + "/shard_00000-of-" + pad5(world_->size()) + ".bin", shard0_,
                  fs::copy_options::overwrite_existing);
  });
  if (world_->rank() == 0) {
    EXPECT_NE(error.find("'" + shard0_ + "' belongs to another checkpoint"), std::string::npos)
        << error;
    EXPECT_NE(error.find("step 8"), std::string::npos) << error;
  }
  EXPECT_FALSE(error.empty());
}

// Names in the checkpoint never leave its folder: `latest` must name a step folder inside the
// root, and metadata.json may name only the shard files the layout implies.
TEST_F(Damaged, PathsThatEscapeTheCheckpointFolderAreRefused) {
  world_->barrier();
  if (world_->rank() == 0) {
    for (const char* target : {"../step_00000004", "/etc", "step_00000004/../../x", "."}) {
      std::ofstream(root_ + "/latest") << target << "\n";
      try {
        latest_checkpoint(root_);
        ADD_FAILURE() << "latest naming '" << target << "' was accepted";
      } catch (const CheckpointError& e) {
        EXPECT_NE(std::string(e.what()).find("does not name a step folder"), std::string::npos)
            << e.what();
      }
    }
  }
  const std::string error = load_error([&] {
    std::ifstream in(path_ + "/metadata.json");
    std::string text((std::istreambuf_iterator<char>(in)), {});
    const std::string name = "\"shard_00000-of-";
    const auto at = text.find(name);
    ASSERT_NE(at, std::string::npos);
    text.replace(at + 1, name.size() - 1, "../../../tmp/shard_00000-of-");
    std::ofstream(path_ + "/metadata.json") << text;
  });
  EXPECT_NE(error.find("metadata.json"), std::string::npos) << error;
  EXPECT_NE(error.find("shard file entry 0 is misnamed"), std::string::npos) << error;
}

// A disk that fills up during a save (simulated with RLIMIT_FSIZE on rank 0, which turns writes
// past the limit into EFBIG even for root): every rank gets an error naming the file, the step
// is not committed, and `latest` still names the previous checkpoint, which loads.
TEST_F(Damaged, DiskFullDuringSaveKeepsThePreviousCheckpoint) {
  Trained a = make(world_, ShardingStrategy::kFullShard, 5);
  std::string error;
  {
    std::optional<FileSizeLimit> limit;
    if (world_->rank() == 0) limit.emplace(4096);
    try {
      save_checkpoint(root_, 8, *a.sharded, a.opt.get(), "{}");
    } catch (const CheckpointError& e) {
      error = e.what();
    }
  }
  ASSERT_FALSE(error.empty()) << "the save succeeded past the file size limit";
  if (world_->rank() == 0) {
    EXPECT_NE(error.find("shard_00000-of-"), std::string::npos) << error;
    EXPECT_NE(error.find("File too large"), std::string::npos) << error;
  }
  world_->barrier();
  EXPECT_FALSE(fs::exists(root_ + "/step_00000008"));
  EXPECT_EQ(latest_checkpoint(root_).value_or(""), path_);
  Trained b = make(world_, ShardingStrategy::kFullShard, 6);
  load_checkpoint(root_, *b.sharded, b.opt.get());
  Trained original = make(world_, ShardingStrategy::kFullShard, 3);
  load_checkpoint(path_, *original.sharded, original.opt.get());
  expect_same_shards(b, original);
}

// Where a read-only folder stops root (every test in CI runs as root, for whom permissions do not
// apply), the disk-full case above covers the same path through the code.
TEST_F(Damaged, ReadOnlyRootKeepsThePreviousCheckpoint) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into read-only folders";
  world_->barrier();
  if (world_->rank() == 0) fs::permissions(root_, fs::perms::owner_write, fs::perm_options::remove);
  world_->barrier();
  Trained a = make(world_, ShardingStrategy::kFullShard, 5);
  EXPECT_THROW(save_checkpoint(root_, 8, *a.sharded, a.opt.get(), "{}"), CheckpointError);
  world_->barrier();
  if (world_->rank() == 0) fs::permissions(root_, fs::perms::owner_write, fs::perm_options::add);
  EXPECT_EQ(latest_checkpoint(root_).value_or(""), path_);
}

TEST_F(Damaged, OptimizerOfAnotherKindIsRefused) {
  Trained b = make(world_, ShardingStrategy::kFullShard, 4);
  SGDOptions o;
  o.momentum = 0.9;
  SGD sgd(sharded_params(*b.sharded), o);
  EXPECT_THROW(
      {
        try {
          load_checkpoint(path_, *b.sharded, &sgd);
        } catch (const CheckpointError& e) {
          EXPECT_NE(std::string(e.what()).find("'adamw' optimizer state"), std::string::npos)
              << e.what();
          throw;
        }
      },
      CheckpointError);
}

TEST(Checkpoint, TrainStateMustBeAJsonObject) {
  CommPtr world = test::world();
  Trained a = make(world, ShardingStrategy::kFullShard, 1);
  EXPECT_THROW(save_checkpoint("/nonexistent", 1, *a.sharded, a.opt.get(), "[1, 2"),
               CheckpointError);
}

TEST(Checkpoint, KeepLastDeletesOlderCheckpoints) {
  CommPtr world = test::world();
  const std::string root = shared_dir(*world, "keep");
  Trained a = make(world, ShardingStrategy::kFullShard, 1);
  CheckpointOptions options;
  options.keep_last = 2;
  for (int step = 1; step <= 4; ++step)
    save_checkpoint(root, step, *a.sharded, a.opt.get(), "{}", options);
  EXPECT_FALSE(fs::exists(root + "/step_00000001"));
  EXPECT_FALSE(fs::exists(root + "/step_00000002"));
  EXPECT_TRUE(fs::exists(root + "/step_00000003/COMMITTED"));
  EXPECT_EQ(latest_checkpoint(root).value_or(""), root + "/step_00000004");
  world->barrier();
  if (world->rank() == 0) fs::remove_all(root);
}

// --- one owner per folder -------------------------------------------------------------------

// A second hold on a held root is refused on every rank, naming the folder and the holder (rank 0's
// host and process); once the first is released the root can be taken again.
TEST(Ownership, ASecondHoldIsRefusedWhileTheFirstLives) {
  CommPtr world = test::world();
  const std::string root = shared_dir(*world, "lock");
  int64_t pid = ::getpid();
  world->broadcast(&pid, 1, DType::kInt64, 0);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  {
    CheckpointRootLock first(root, *world);
    try {
      CheckpointRootLock second(root, *world);
      ADD_FAILURE() << "a second hold on " << root << " was granted";
    } catch (const CheckpointError& e) {
      const std::string what = e.what();
      EXPECT_TRUE(e.collective());
      EXPECT_NE(what.find("'" + root + "' is in use by another run"), std::string::npos) << what;
      EXPECT_NE(what.find(std::string(host) + " " + std::to_string(pid)), std::string::npos)
          << what;
    }
  }
  EXPECT_NO_THROW(CheckpointRootLock again(root, *world));
  world->barrier();
  if (world->rank() == 0) fs::remove_all(root);
}

// Every file under `dir` with its bytes.
std::map<std::string, std::string> contents(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    files[fs::relative(e.path(), dir).string()] = {std::istreambuf_iterator<char>(in), {}};
  }
  return files;
}

// consolidate and reshard refuse every output that would write over a checkpoint (the checkpoint
// they read, another committed step, the root's latest and lock, the root itself, a path through
// a symbolic link into a step), before writing a byte: the root is unchanged, byte for byte. Then
// the same calls write where nothing is in the way.
TEST(Ownership, NoWriterWritesOverACheckpoint) {
  CommPtr world = test::world();
  const std::string root = shared_dir(*world, "outputs");
  Trained a = make(world, ShardingStrategy::kFullShard, 5);
  const std::string s1 = save_checkpoint(root, 1, *a.sharded, a.opt.get(), "{}");
  const std::string s2 = save_checkpoint(root, 2, *a.sharded, a.opt.get(), "{}");
  std::optional<CheckpointRootLock> held;
  held.emplace(root, *world);  // as a run holds it: the lock file is in the root
  world->barrier();
  if (world->rank() == 0) {
    const fs::path elsewhere = root + "_elsewhere";
    fs::create_directories(elsewhere);
    fs::create_directory_symlink(s2, elsewhere / "to_step");
    const auto before = contents(root);
    auto refused = [&](const std::function<void()>& write, const std::string& out) {
      try {
        write();
      } catch (const CheckpointError& e) {
        EXPECT_NE(std::string(e.what()).find("nothing was written"), std::string::npos) << e.what();
        return;
      }
      ADD_FAILURE() << "wrote " << out;
    };
    std::string shard;
    for (const auto& e : fs::directory_iterator(s1)) {
      if (e.path().filename().string().rfind("shard_", 0) == 0) shard = e.path().string();
    }
    ASSERT_FALSE(shard.empty());
    for (const std::string& out :
         {s1 + "/model.safetensors", s1 + "/metadata.json", s1 + "/COMMITTED", shard,
          s2 + "/metadata.json", s2, root + "/latest", root + "/" + kCheckpointLockFile, root,
          root + "/model.safetensors", root + "/step_00000025",
          (elsewhere / "to_step" / "model.safetensors").string()}) {
      refused([&] { consolidate_checkpoint(s1, out); }, out);
    }
    for (const std::string& out :
         {s1, s1 + "/resharded", s2 + "/resharded", root, root + "/step_00000025",
          root + "/resharded", (elsewhere / "to_step").string()}) {
      refused([&] { reshard_checkpoint(s1, out, 1); }, out);
    }
    std::ofstream(elsewhere / "note.txt") << "a user's file";
    refused([&] { reshard_checkpoint(s1, elsewhere.string(), 1); }, elsewhere.string());
    EXPECT_EQ(contents(root), before);

    consolidate_checkpoint(s1, (elsewhere / "model.safetensors").string());
    EXPECT_TRUE(fs::is_regular_file(elsewhere / "model.safetensors"));
    reshard_checkpoint(s1, (elsewhere / "resharded").string(), 1);
    EXPECT_TRUE(verify_checkpoint((elsewhere / "resharded").string()).empty());
    fs::remove_all(elsewhere);
  }
  held.reset();
  world->barrier();
  if (world->rank() == 0) fs::remove_all(root);
}

}  // namespace
}  // namespace fsdp
