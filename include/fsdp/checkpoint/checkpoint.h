// Sharded checkpoints: every rank of replica 0 writes its own shard of the parameters and of the
// optimizer state; rank 0 writes one JSON metadata file describing the layout, and a commit marker
// once every shard is on disk. Any world size can load any checkpoint: a rank reads only the byte
// ranges its new shards need (see docs/checkpoint.md for the format).
//
//   root/
//     latest                          "step_00000020": the newest committed checkpoint
//     step_00000020/
//       metadata.json                 layout, step, mesh, strategy, optimizer, train state,
//       checksums shard_00000-of-00002.bin      this shard of every unit: parameters, then each
//       optimizer state shard_00001-of-00002.bin COMMITTED                     written last;
//       without it the folder is never loaded
//
// Crash safety: every file is written under a temporary name, fsynced and renamed; COMMITTED and
// `latest` follow only after all ranks have finished, so a save that dies half way leaves the
// previous checkpoint as `latest`, untouched.
//
// save_checkpoint and load_checkpoint are collectives over the model's world: every rank calls
// them with the same arguments. The inspection functions are local and need no model.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "fsdp/fully_shard.h"

namespace fsdp {

class ShardedOptimizer;

struct CheckpointOptions {
  // Complete checkpoints to keep under the root after a save; older ones are deleted (0: keep all).
  int keep_last = 0;
  // Checksum granularity of shard files: a reader verifies every block it touches.
  int64_t block_bytes = 4 << 20;
  // Test seam: called on each rank at named points of a save ("shard_partial", "shard_written",
  // "before_commit"), so tests can kill a rank mid-save.
  std::function<void(const std::string& point)> fault_point;
};

// What a load restores besides the tensors.
struct LoadedCheckpoint {
  std::string path;
  int64_t step = 0;
  std::string train_state;  // the JSON object the trainer saved (learning-rate schedule, data
                            // position, RNG state, ...), as text; "{}" if none
};

// Writes root/step_<step>/ and points root/latest at it. `optimizer` may be null (parameters
// only). `train_state_json` must be a JSON object (validated). Returns the checkpoint's path.
std::string save_checkpoint(const std::string& root, int64_t step, FullyShardedModel& model,
                            const ShardedOptimizer* optimizer, const std::string& train_state_json,
                            const CheckpointOptions& options = {});

// The newest committed checkpoint under root (`latest`, checked for its marker), or nullopt when
// root holds no `latest`. A `latest` naming a folder without COMMITTED is an error.
std::optional<std::string> latest_checkpoint(const std::string& root);

// The committed step folders under root, oldest first, whatever `latest` says (none: empty).
std::vector<std::string> committed_checkpoints(const std::string& root);

// Checks, before a run's first step, that every rank can write its shard files under root
// (creating root if needed), so that a folder that cannot be written is found before any training
// rather than at the first save. Collective over `world`; every rank throws a CheckpointError
// naming the folder and the first rank that could not write it.
void check_checkpoint_root_writable(const std::string& root, Comm& world);

// Loads a committed checkpoint (a step folder, or a root with `latest`) into a sharded model of
// any world size and strategy, and the optimizer state when `optimizer` is non-null (the
// checkpoint must then hold the same kind of optimizer). Throws CheckpointError naming the file
// for a missing marker, a missing or truncated shard file, a checksum mismatch, a version this
// build does not read, and parameters that differ from the model's (names or shapes).
LoadedCheckpoint load_checkpoint(const std::string& path, FullyShardedModel& model,
                                 ShardedOptimizer* optimizer);

class CheckpointError : public std::runtime_error {
 public:
  explicit CheckpointError(const std::string& what, bool collective = false)
      : std::runtime_error(what), collective_(collective) {}
  // Every rank of the group threw it together, after exchanging their errors (a save or load that
  // failed somewhere). A program may then wait for the others before it exits, so that rank 0's
  // report, which names the failing rank, is not cut short by a launcher that ends the job at
  // the first rank to exit (mpirun does).
  bool collective() const { return collective_; }

 private:
  bool collective_ = false;
};

// --- reading a checkpoint without a model (fsdp-ckpt, offline resharding) ---------------------

struct CheckpointParam {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // in the unit's unpadded flat parameter
  int64_t numel = 0;
  std::vector<std::string> aliases;
};

struct CheckpointUnit {
  std::string name;
  int64_t numel = 0;
  int64_t shard_numel = 0;  // elements per shard file (padded numel / shard count)
  std::vector<CheckpointParam> params;
  std::vector<int64_t> region_offsets;  // byte offset in every shard file, one per tensor kind
};

struct CheckpointFile {
  std::string name;  // relative to the checkpoint folder
  int shard_rank = 0;
  int64_t bytes = 0;
  uint32_t crc32 = 0;                 // of the whole file
  std::vector<uint32_t> block_crc32;  // of each block_bytes block
};

// One of the root module's buffers as a checkpoint holds it: name, safetensors dtype ("F32",
// "I64", "BOOL", ...) and shape.
struct CheckpointBuffer {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
};

struct CheckpointMetadata {
  int version = 0;
  int64_t step = 0;
  int world_size = 0;
  int replicate_size = 1, shard_count = 1;  // the mesh: world = replicate x shard
  std::string strategy;
  std::vector<std::string> tensor_kinds;  // "param", then the optimizer's state names
  std::string optimizer;                  // "adamw", "sgd" or "" (none saved)
  int64_t optimizer_steps = 0;
  double lr = 0;
  int64_t block_bytes = 0;
  std::vector<CheckpointUnit> units;
  std::vector<CheckpointFile> files;
  std::string train_state;  // JSON text
  // The model's frozen parameters (FullyShardedModel::frozen_units), which the checkpoint does not
  // hold: names, shapes and aliases (offset 0). Their values come from where the run took them
  // (its model.pretrained or model.init_from). Empty for a run that froze nothing.
  std::vector<CheckpointParam> frozen;
  // The root module's buffers (rank 0's at the save) and the file holding them
  // ("buffers.safetensors" beside the shards; "" when there are none), its size and CRC-32.
  // `buffers_saved` is false for a checkpoint written before buffers were saved.
  std::vector<CheckpointBuffer> buffers;
  bool buffers_saved = false;
  std::string buffers_file;
  int64_t buffers_bytes = 0;
  uint32_t buffers_crc32 = 0;
};

// Parses and checks dir/metadata.json (format, version, internal consistency).
CheckpointMetadata read_checkpoint_metadata(const std::string& dir);

// Reads every shard file in full and checks sizes and checksums; returns the problems found, one
// line each naming the file (empty: the checkpoint is intact).
std::vector<std::string> verify_checkpoint(const std::string& dir);

// Elements [begin, begin + count) of one parameter's `kind` tensor, flattened, as fp32, read from
// whichever shard files hold them (checksums of the blocks touched are verified). The folder must
// be committed: a CheckpointError otherwise, as for every reader.
class CheckpointReader {
 public:
  explicit CheckpointReader(std::string dir);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const CheckpointMetadata& metadata() const { return meta_; }
  const std::string& dir() const { return dir_; }
  // Throws CheckpointError for an unknown parameter or kind, or a range outside the parameter.
  void read(const std::string& param, const std::string& kind, int64_t begin, int64_t count,
            float* out);

 private:
  struct Impl;
  std::string dir_;
  CheckpointMetadata meta_;
  std::unique_ptr<Impl> impl_;
};

// Rewrites a checkpoint for another world size (FULL_SHARD layout, shard count = world_size)
// without a model or processes: one parameter range at a time, so memory stays bounded by the
// largest unit's shard. `out_dir` must not exist yet or be empty, and lie outside every checkpoint
// (check_checkpoint_output in ownership.h): a CheckpointError before anything is written otherwise.
void reshard_checkpoint(const std::string& dir, const std::string& out_dir, int world_size);

}  // namespace fsdp
