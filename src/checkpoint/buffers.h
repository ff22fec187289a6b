// A sharded checkpoint's buffers: the root module's buffers (rank 0's at the save, after
// ShardingOptions::buffer_sync) in one safetensors file beside the shards, `buffers.safetensors`,
// whose size and CRC-32 the metadata records. Buffers are not sharded: every rank of a load at any
// world size reads the whole file, and a reshard copies it unchanged.
#pragma once

#include <string>
#include <vector>

#include "fsdp/checkpoint/checkpoint.h"

namespace fsdp {
namespace ckpt {

constexpr char kBuffersFile[] = "buffers.safetensors";

// Writes `buffers` to dir/buffers.safetensors (nothing when there are none) and records them,
// the file's size and checksum in `meta`.
void write_buffers(const std::string& dir, const std::vector<NamedBuffer>& buffers,
                   CheckpointMetadata& meta);

// Throws CheckpointError naming the checkpoint and the buffer unless the checkpoint holds exactly
// the model's buffers (names, shapes, dtypes), and naming the file unless it has the size and
// checksum the metadata records: before anything is loaded.
void check_buffers_fit(const std::string& dir, const CheckpointMetadata& meta,
                       const std::vector<NamedBuffer>& buffers);

// Copies every buffer from the file (checked by check_buffers_fit) into the model's tensors.
void read_buffers(const std::string& dir, const CheckpointMetadata& meta,
                  const std::vector<NamedBuffer>& buffers);

// The problems of dir's buffer file (missing, size, checksum), one line each; for verify.
std::vector<std::string> verify_buffers(const std::string& dir, const CheckpointMetadata& meta);

// Copies the buffer file from step folder `from` into folder `to`, verified (reshard).
void copy_buffers(const std::string& from, const std::string& to, const CheckpointMetadata& meta);

}  // namespace ckpt
}  // namespace fsdp
