// Saving a sharded checkpoint: every rank of replica 0 streams its shards to one file, the ranks
// exchange their files' checksums and whether they succeeded, and rank 0 commits (metadata,
// marker, rename of the folder into place, `latest`). See fsdp/checkpoint/checkpoint.h.
#include <fcntl.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "checkpoint/buffers.h"
#include "checkpoint/errors.h"
#include "checkpoint/format.h"
#include "fsdp/checkpoint/checkpoint.h"
#include "fsdp/optim.h"

namespace fsdp {
namespace {

using namespace ckpt;
namespace fs = std::filesystem;

std::vector<std::string> tensor_kinds(const ShardedOptimizer* optimizer) {
  std::vector<std::string> kinds{"param"};
  if (optimizer != nullptr && !optimizer->params().empty()) {
    for (const auto& [name, t] : optimizer->state(0)) kinds.push_back(name);
  }
  return kinds;
}

std::vector<CheckpointUnit> checkpoint_units(const std::vector<UnitInfo>& infos, size_t kinds) {
  std::vector<CheckpointUnit> units;
  for (const auto& info : infos) {
    CheckpointUnit u;
    u.name = info.name;
    u.numel = info.numel;
    for (const auto& p : info.params)
      u.params.push_back({p.name, p.shape, p.offset, p.numel, p.aliases});
    units.push_back(std::move(u));
  }
  lay_out_regions(units, kinds, infos.empty() ? 1 : infos[0].shard_count);
  for (size_t i = 0; i < infos.size(); ++i) {
    if (units[i].shard_numel != infos[i].shard_numel) {
      throw CheckpointError("unit '" + infos[i].name + "' is padded unlike the checkpoint layout");
    }
  }
  return units;
}

// The tensors of one unit's regions, in file order.
std::vector<at::Tensor> region_tensors(const UnitShard& shard, const ShardedOptimizer* optimizer,
                                       size_t unit, size_t kinds) {
  std::vector<at::Tensor> out{shard.param};
  if (kinds > 1) {
    for (const auto& [name, t] : optimizer->state(unit)) out.push_back(t);
  }
  return out;
}

struct SaveContext {
  std::string dir;  // the step's temporary folder
  int64_t step = 0;
  int shard_rank = 0, shard_count = 1;
  std::vector<UnitShard> shards;
  const ShardedOptimizer* optimizer = nullptr;
  size_t kinds = 1;
  const CheckpointOptions* options = nullptr;
};

CheckpointFile write_shard(const SaveContext& c) {
  ShardFileWriter writer(c.dir,
                         {kFormatVersion, static_cast<uint32_t>(c.shard_rank),
                          static_cast<uint32_t>(c.shard_count), c.step},
                         c.options->block_bytes);
  for (size_t u = 0; u < c.shards.size(); ++u) {
    for (const at::Tensor& t : region_tensors(c.shards[u], c.optimizer, u, c.kinds)) {
      if (t.scalar_type() != at::kFloat || !t.is_contiguous()) {
        throw CheckpointError("unit '" + c.shards[u].unit_name + "': shard tensor is not fp32");
      }
      const at::Tensor host = t.to(at::kCPU);  // t itself for CPU shards
      writer.append(host.data_ptr(), host.nbytes());
    }
    if (u == 0 && c.options->fault_point) c.options->fault_point("shard_partial");
  }
  CheckpointFile file = writer.finish();
  if (c.options->fault_point) c.options->fault_point("shard_written");
  return file;
}

// Every rank's file checksums, once every rank has written its shard. Row per rank: [status,
// shard rank, whole-file CRC, block CRCs...]; status 1 wrote a shard, 2 had nothing to write.
std::vector<CheckpointFile> exchange_files(Comm& world, const CheckpointFile& mine, int status,
                                           int64_t blocks) {
  const size_t row = 3 + static_cast<size_t>(blocks);
  std::vector<int64_t> send(row, 0), all(row * world.size());
  send[0] = status;
  send[1] = mine.shard_rank;
  send[2] = mine.crc32;
  for (size_t b = 0; b < mine.block_crc32.size() && b < static_cast<size_t>(blocks); ++b) {
    send[3 + b] = mine.block_crc32[b];
  }
  world.all_gather(send.data(), all.data(), row, DType::kInt64);
  std::vector<CheckpointFile> files;
  for (int r = 0; r < world.size(); ++r) {
    const int64_t* p = all.data() + row * r;
    if (p[0] != 1) continue;
    CheckpointFile f;
    f.shard_rank = static_cast<int>(p[1]);
    f.crc32 = static_cast<uint32_t>(p[2]);
    for (int64_t b = 0; b < blocks; ++b) f.block_crc32.push_back(static_cast<uint32_t>(p[3 + b]));
    files.push_back(std::move(f));
  }
  std::sort(files.begin(), files.end(),
            [](const auto& a, const auto& b) { return a.shard_rank < b.shard_rank; });
  return files;
}

// Runs `fn` on rank 0 and tells every rank whether it succeeded and why not, so that no rank
// waits for a rank 0 that failed; all throw if it did.
void run_on_rank0(Comm& world, const char* what, const std::function<void()>& fn) {
  std::string error;
  if (world.rank() == 0) {
    try {
      fn();
    } catch (const std::exception& e) {
      error = e.what();  // names the file; the other ranks add what failed, and where
    }
  }
  agree_on_failure(world, error, std::string(what) + " the checkpoint");
}

// Deletes all but the newest `keep` committed step folders.
void prune(const std::string& root, int keep) {
  const std::vector<std::string> steps = committed_checkpoints(root);
  for (size_t i = 0; i + keep < steps.size(); ++i) fs::remove_all(steps[i]);
}

void commit(const std::string& root, const std::string& tmp_dir, const CheckpointMetadata& meta,
            const CheckpointOptions& options) {
  write_file_atomically(join(tmp_dir, kMetadataFile), metadata_to_json(meta));
  if (options.fault_point) options.fault_point("before_commit");
  write_file_atomically(join(tmp_dir, kCommitMarker), commit_marker(meta.step));
  const std::string final_dir = join(root, step_dir_name(meta.step));
  if (exists(final_dir)) fs::remove_all(final_dir);  // the same step saved again
  durable_rename(tmp_dir, final_dir);
  write_file_atomically(join(root, kLatestFile), step_dir_name(meta.step) + "\n");
  if (options.keep_last > 0) prune(root, options.keep_last);
}

CheckpointMetadata metadata(const SaveContext& c, FullyShardedModel& model,
                            const std::vector<CheckpointUnit>& units,
                            std::vector<CheckpointFile> files, const std::string& train_state) {
  CheckpointMetadata meta;
  meta.version = kFormatVersion;
  meta.step = c.step;
  meta.world_size = model.world().size();
  meta.shard_count = c.shard_count;
  meta.replicate_size = model.replicate_group().size();
  meta.strategy = to_string(model.options().strategy_);
  meta.tensor_kinds = tensor_kinds(c.optimizer);
  meta.optimizer = c.optimizer != nullptr ? c.optimizer->kind() : "";
  meta.optimizer_steps = c.optimizer != nullptr ? c.optimizer->step_count() : 0;
  meta.lr = c.optimizer != nullptr ? c.optimizer->lr() : 0;
  meta.block_bytes = c.options->block_bytes;
  meta.units = units;
  for (const UnitInfo& u : model.frozen_units()) {
    for (const auto& p : u.params) meta.frozen.push_back({p.name, p.shape, 0, p.numel, p.aliases});
  }
  const int64_t bytes = shard_file_bytes(units, c.kinds);
  for (auto& f : files) {
    f.name = shard_file_name(f.shard_rank, c.shard_count);
    f.bytes = bytes;
  }
  meta.files = std::move(files);
  meta.train_state = train_state;
  return meta;
}

// This process can create a file in root (made if missing): "" if so, else why not.
std::string write_problem(const std::string& root) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return "cannot create the checkpoint folder '" + root + "': " + ec.message();
  char host[64] = {};
  gethostname(host, sizeof host - 1);
  const std::string probe =
      join(root, ".write-check." + std::string(host) + "." + std::to_string(getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return "cannot write in the checkpoint folder '" + root + "': " + std::strerror(errno);
  }
  ::close(fd);
  ::unlink(probe.c_str());
  return "";
}

}  // namespace

void check_checkpoint_root_writable(const std::string& root, Comm& world) {
  ckpt::agree_on_failure(world, write_problem(root), "checking the checkpoint folder");
}

std::string save_checkpoint(const std::string& root, int64_t step, FullyShardedModel& model,
                            const ShardedOptimizer* optimizer, const std::string& train_state_json,
                            const CheckpointOptions& options) {
  check_json_object(train_state_json, "save_checkpoint: train_state");
  model.sync_buffers();  // what the next forward would start from (BufferSync)
  Comm& world = model.world();
  const std::vector<UnitInfo> infos = model.units();
  SaveContext c;
  c.dir = join(root, step_dir_name(step) + ".partial");
  c.step = step;
  c.shard_rank = model.shard_group().rank();
  c.shard_count = model.shard_group().size();
  c.optimizer = optimizer;
  c.kinds = tensor_kinds(optimizer).size();
  c.options = &options;
  const std::vector<CheckpointUnit> units = checkpoint_units(infos, c.kinds);
  const int64_t blocks =
      (shard_file_bytes(units, c.kinds) + options.block_bytes - 1) / options.block_bytes;

  // Rank 0 clears what a save of this step that died may have left; the others wait for it.
  run_on_rank0(world, "preparing", [&] {
    fs::remove_all(c.dir);
    fs::create_directories(c.dir);
    sync_dir(root);
  });

  CheckpointFile mine;
  int status = 2;
  std::string error;
  if (model.replicate_group().rank() == 0) {
    try {
      c.shards = model.shards();
      mine = write_shard(c);
      status = 1;
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // A rank that could not write its shard (a full disk) fails the save everywhere, each rank
  // naming the first failing rank's file, instead of leaving the others waiting.
  agree_on_failure(world, error, "saving the checkpoint");
  std::vector<CheckpointFile> files = exchange_files(world, mine, status, blocks);

  // On return every rank sees the committed checkpoint, or every rank throws.
  run_on_rank0(world, "committing", [&] {
    CheckpointMetadata meta = metadata(c, model, units, std::move(files), train_state_json);
    write_buffers(c.dir, model.buffers(), meta);
    commit(root, c.dir, meta, options);
  });
  return join(root, step_dir_name(step));
}

}  // namespace fsdp
