// The on-disk format of sharded checkpoints, shared by saving, loading, verifying and resharding:
// file names, the shard file header, the metadata JSON (to and from CheckpointMetadata) and a
// shard file writer that checksums what it streams. docs/checkpoint.md describes the format.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/file_io.h"
#include "fsdp/checkpoint/checkpoint.h"

namespace fsdp {
namespace ckpt {

constexpr int kFormatVersion = 1;
constexpr char kFormatName[] = "fsdp.cpp sharded checkpoint";
constexpr char kMetadataFile[] = "metadata.json";
constexpr char kCommitMarker[] = "COMMITTED";
constexpr char kLatestFile[] = "latest";
constexpr char kShardMagic[8] = {'F', 'S', 'D', 'P', 'S', 'H', 'R', 'D'};
constexpr int64_t kShardHeaderBytes = 64;

std::string step_dir_name(int64_t step);  // "step_00000020"
std::string shard_file_name(int shard_rank, int shard_count);
std::string join(const std::string& dir, const std::string& name);
// The COMMITTED marker's content (its presence is what counts; the content helps a human).
std::string commit_marker(int64_t step);
// Whether step folder `dir` holds the marker; and the one check every reader of a checkpoint
// (load, reshard, consolidate, CheckpointReader) makes: a CheckpointError naming `dir` unless it
// does, since a folder without it is a save that did not finish.
bool is_committed(const std::string& dir);
void require_committed(const std::string& dir);

// The 64-byte header every shard file opens with: magic, format version, shard rank and count,
// step. A reader compares it with the metadata, so a shard from another checkpoint is refused.
struct ShardHeader {
  uint32_t version = kFormatVersion;
  uint32_t shard_rank = 0;
  uint32_t shard_count = 0;
  int64_t step = 0;
};
void encode_header(const ShardHeader& h, unsigned char out[kShardHeaderBytes]);
// Throws CheckpointError naming `path` for a wrong magic or version.
ShardHeader decode_header(const unsigned char in[kShardHeaderBytes], const std::string& path);

// Units laid out for `shard_count` shards: each unit's shard size and the byte offset of each of
// its `kinds` regions in every shard file (header first, then unit by unit, kind by kind).
void lay_out_regions(std::vector<CheckpointUnit>& units, size_t kinds, int shard_count);
int64_t shard_file_bytes(const std::vector<CheckpointUnit>& units, size_t kinds);

// Streams one shard file: header, then regions in order; tracks the whole-file CRC and one CRC
// per block. finish() fsyncs and renames the temporary file into place.
class ShardFileWriter {
 public:
  ShardFileWriter(const std::string& dir, const ShardHeader& header, int64_t block_bytes);
  void append(const void* data, size_t bytes);
  // Returns the file's entry for the metadata.
  CheckpointFile finish();

 private:
  void flush_block();
  std::string dir_, name_;
  ShardHeader header_;
  files::TempGuard tmp_;  // before file_: the file is created into it
  File file_;
  int64_t block_bytes_;
  std::vector<unsigned char> block_;  // the block being filled
  int64_t bytes_ = 0;
  uint32_t crc_ = 0;
  std::vector<uint32_t> block_crcs_;
};

// Elements [begin, begin + count) of a unit's flat `kind` tensor in a target layout (`params`:
// the unit's parameters, with offsets in the target's flat parameter), read parameter by
// parameter from the checkpoint; elements no parameter covers (padding) are zero.
void read_flat_range(CheckpointReader& reader, const std::vector<CheckpointParam>& params,
                     const std::string& kind, int64_t begin, int64_t count, float* out);

std::string metadata_to_json(const CheckpointMetadata& meta);
// Parses and checks the metadata: format name, version, field types, and that units, regions and
// files agree with each other. Errors name `path`.
CheckpointMetadata metadata_from_json(const std::string& text, const std::string& path);
// Throws CheckpointError unless `json` parses as a JSON object.
void check_json_object(const std::string& json, const std::string& what);

}  // namespace ckpt
}  // namespace fsdp
