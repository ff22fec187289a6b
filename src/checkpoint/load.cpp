// Loading a sharded checkpoint into a live sharded model of any world size and strategy: each
// rank computes which elements of each unit's flat parameter it holds and reads exactly those from
// the checkpoint's files (CheckpointReader), then the optimizer's state the same way. Also finding
// the newest committed checkpoint, and rewriting one for another world size offline.
#include <torch/torch.h>

#include <filesystem>
#include <set>

#include "checkpoint/buffers.h"
#include "checkpoint/errors.h"
#include "checkpoint/format.h"
#include "fsdp/checkpoint/checkpoint.h"
#include "fsdp/checkpoint/ownership.h"
#include "fsdp/optim.h"

namespace fsdp {
namespace {

using namespace ckpt;
namespace fs = std::filesystem;

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

// A step folder, or a root whose `latest` names one; it must be committed.
std::string resolve(const std::string& path) {
  std::string dir = path;
  if (exists(join(path, kLatestFile))) {
    const auto latest = latest_checkpoint(path);
    if (!latest) throw CheckpointError("no committed checkpoint under '" + path + "'");
    dir = *latest;
  }
  if (!exists(join(dir, kMetadataFile)) && !exists(join(dir, kCommitMarker))) {
    throw CheckpointError("'" + path + "' is not a checkpoint folder (no " + kMetadataFile +
                          ", no " + kLatestFile + ")");
  }
  require_committed(dir);
  return dir;
}

std::vector<CheckpointParam> target_params(const UnitInfo& u) {
  std::vector<CheckpointParam> out;
  for (const auto& p : u.params) out.push_back({p.name, p.shape, p.offset, p.numel, p.aliases});
  return out;
}

// The model's trainable parameters must be exactly the checkpoint's, with the same shapes (a
// sharded checkpoint holds what trains: FullyShardedModel::units()).
void check_same_parameters(const CheckpointMetadata& meta, const std::vector<UnitInfo>& units,
                           const std::vector<UnitInfo>& frozen, const std::string& dir) {
  std::set<std::string> frozen_names;
  for (const auto& u : frozen) {
    for (const auto& p : u.params) frozen_names.insert(p.name);
  }
  std::map<std::string, std::vector<int64_t>> saved;
  for (const auto& u : meta.units) {
    for (const auto& p : u.params) saved[p.name] = p.shape;
  }
  const std::string where = "checkpoint '" + dir + "' (" + kMetadataFile + ")";
  std::set<std::string> model_names;
  for (const auto& u : units) {
    for (const auto& p : u.params) {
      const auto it = saved.find(p.name);
      if (it == saved.end()) {
        throw CheckpointError(where + " has no parameter '" + p.name +
                              "', which the model trains: it was saved from a different model, "
                              "or by a run that froze it");
      }
      if (it->second != p.shape) {
        throw CheckpointError(where + ": parameter '" + p.name + "' has shape " +
                              c10::str(at::IntArrayRef(it->second)) + ", the model's is " +
                              c10::str(at::IntArrayRef(p.shape)));
      }
      model_names.insert(p.name);
    }
  }
  for (const auto& [name, shape] : saved) {
    if (frozen_names.count(name) != 0) {
      throw CheckpointError(where + " trained parameter '" + name +
                            "', which the model freezes (requires_grad false): a sharded "
                            "checkpoint holds the parameters that train, so the model must "
                            "freeze the same ones as the run that saved it");
    }
    if (model_names.count(name) == 0) {
      throw CheckpointError(where + " has parameter '" + name +
                            "', which the model lacks: it was saved from a different model");
    }
  }
}

void check_optimizer(const CheckpointMetadata& meta, const ShardedOptimizer& optimizer,
                     const std::string& dir) {
  if (meta.optimizer != optimizer.kind()) {
    throw CheckpointError("checkpoint '" + dir + "' holds " +
                          (meta.optimizer.empty() ? "no optimizer state"
                                                  : "'" + meta.optimizer + "' optimizer state") +
                          ", the optimizer to restore is '" + optimizer.kind() + "'");
  }
}

// Fills this rank's shard `t` of unit `u` (elements [rank * S, rank * S + S) of the flat tensor).
void load_shard(CheckpointReader& reader, const UnitInfo& u, const std::string& kind,
                const at::Tensor& t) {
  TORCH_CHECK(t.scalar_type() == at::kFloat && t.is_contiguous() && t.numel() == u.shard_numel,
              "unit '", u.name, "': shard tensor is not a contiguous fp32 tensor of ",
              u.shard_numel, " elements");
  // Device shards are read through the host (a copy of one shard at a time).
  const at::Tensor host =
      t.device().is_cpu() ? t : at::empty(t.sizes(), t.options().device(at::kCPU));
  read_flat_range(reader, target_params(u), kind, u.shard_rank * u.shard_numel, u.shard_numel,
                  host.data_ptr<float>());
  if (!host.is_same(t)) t.copy_(host);
}

void load_tensors(const std::string& dir, FullyShardedModel& model, ShardedOptimizer* optimizer,
                  const CheckpointMetadata& meta) {
  CheckpointReader reader(dir);
  const std::vector<UnitInfo> units = model.units();
  check_same_parameters(meta, units, model.frozen_units(), dir);
  if (optimizer != nullptr) check_optimizer(meta, *optimizer, dir);
  const std::vector<UnitShard> shards = model.shards();
  at::NoGradGuard no_grad;
  for (size_t u = 0; u < units.size(); ++u) {
    load_shard(reader, units[u], "param", shards[u].param);
    if (optimizer == nullptr) continue;
    for (const auto& [kind, t] : optimizer->state(u)) load_shard(reader, units[u], kind, t);
  }
  if (optimizer != nullptr) {
    optimizer->set_step_count(meta.optimizer_steps);
    optimizer->set_lr(meta.lr);
  }
}

}  // namespace

std::vector<std::string> committed_checkpoints(const std::string& root) {
  std::vector<std::string> steps;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step_", 0) == 0 && name.find('.') == std::string::npos &&
        is_committed(e.path().string())) {
      steps.push_back(e.path().string());
    }
  }
  std::sort(steps.begin(), steps.end());  // zero-padded step numbers sort as numbers
  return steps;
}

std::optional<std::string> latest_checkpoint(const std::string& root) {
  const std::string latest = join(root, kLatestFile);
  if (!exists(latest)) return std::nullopt;
  const std::string name = trim(read_small_file(latest));
  if (name.rfind("step_", 0) != 0 || name.find('/') != std::string::npos) {
    throw CheckpointError("'" + latest + "' does not name a step folder: '" + name + "'");
  }
  const std::string dir = join(root, name);
  if (!fs::is_directory(dir)) {
    throw CheckpointError("'" + latest + "' names '" + dir + "', which does not exist" +
                          (fs::exists(dir) ? " as a folder" : "") +
                          " (deleted or moved?); point latest at a step folder, or remove it to "
                          "resume from the newest committed one");
  }
  if (!is_committed(dir)) {
    throw CheckpointError("'" + latest + "' names '" + dir + "', which has no " + kCommitMarker +
                          " marker");
  }
  return dir;
}

LoadedCheckpoint load_checkpoint(const std::string& path, FullyShardedModel& model,
                                 ShardedOptimizer* optimizer) {
  Comm& world = model.world();
  LoadedCheckpoint out;
  std::string error;
  try {
    out.path = resolve(path);
    const CheckpointMetadata meta = read_checkpoint_metadata(out.path);
    const std::vector<NamedBuffer> buffers = model.buffers();
    check_buffers_fit(out.path, meta, buffers);
    load_tensors(out.path, model, optimizer, meta);
    read_buffers(out.path, meta, buffers);
    out.step = meta.step;
    out.train_state = meta.train_state;
  } catch (const std::exception& e) {
    error = e.what();
  }
  // A rank that failed (its file was corrupt) must not leave the others training alone, and the
  // others must say why, naming its file.
  agree_on_failure(world, error, "loading the checkpoint");
  return out;
}

void reshard_checkpoint(const std::string& dir, const std::string& out_dir, int world_size) {
  if (world_size < 1) throw CheckpointError("reshard: world size must be >= 1");
  const std::string src = resolve(dir);
  CheckpointReader reader(src);
  CheckpointMetadata meta = reader.metadata();
  check_checkpoint_output(out_dir, dir, "the checkpoint it reads", OutputKind::kNewFolder);
  // Written whole beside `out_dir` and renamed into place: an interrupted reshard leaves no
  // half-written folder for a later reshard or resume to meet (the temporary is removed on
  // failure, and by fsdp-ckpt on SIGINT).
  fs::path out = fs::path(out_dir).lexically_normal();
  if (!out.has_filename()) out = out.parent_path();
  if (out.has_parent_path()) fs::create_directories(out.parent_path());
  const files::OutputState before = files::output_state(out.string());
  files::TempGuard tmp;
  std::string staging;
  try {
    staging = files::create_temp_folder(out.string(), &tmp);
  } catch (const std::runtime_error& e) {
    throw CheckpointError(e.what());
  }
  lay_out_regions(meta.units, meta.tensor_kinds.size(), world_size);
  meta.world_size = world_size;
  meta.replicate_size = 1;
  meta.shard_count = world_size;
  meta.files.clear();
  for (int r = 0; r < world_size; ++r) {
    ShardFileWriter writer(
        staging,
        {kFormatVersion, static_cast<uint32_t>(r), static_cast<uint32_t>(world_size), meta.step},
        meta.block_bytes);
    for (const auto& u : meta.units) {
      std::vector<float> buf(static_cast<size_t>(u.shard_numel));
      for (const auto& kind : meta.tensor_kinds) {
        read_flat_range(reader, u.params, kind, r * u.shard_numel, u.shard_numel, buf.data());
        writer.append(buf.data(), buf.size() * sizeof(float));
      }
    }
    meta.files.push_back(writer.finish());
  }
  copy_buffers(src, staging, meta);
  write_file_atomically(join(staging, kMetadataFile), metadata_to_json(meta));
  write_file_atomically(join(staging, kCommitMarker), commit_marker(meta.step));
  durable_commit(tmp, out.string(), before);
}

}  // namespace fsdp
