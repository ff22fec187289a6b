// Reading sharded checkpoints without a model: the metadata, ranges of any parameter's tensors
// from whichever shard files hold them (checksummed block by block), full verification, and
// offline resharding. load.cpp builds loading into a live model on top of CheckpointReader.
#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>

#include "checkpoint/buffers.h"
#include "checkpoint/format.h"
#include "fsdp/checkpoint/checkpoint.h"

namespace fsdp {
namespace {

using namespace ckpt;

// One shard file, opened on first use, with its header checked against the metadata and the
// last block read kept (reads of one rank's shard walk the file in order).
struct OpenShard {
  File file;
  int64_t cached_block = -1;
  std::vector<unsigned char> block;
};

// Refuses a shard file whose header disagrees with the metadata (a file from another checkpoint).
void check_header(const File& file, const CheckpointFile& f, const CheckpointMetadata& meta) {
  unsigned char h[kShardHeaderBytes];
  file.read_at(0, h, sizeof h);
  const ShardHeader header = decode_header(h, file.path());
  if (static_cast<int>(header.shard_rank) != f.shard_rank ||
      static_cast<int>(header.shard_count) != meta.shard_count || header.step != meta.step) {
    throw CheckpointError("checkpoint shard file '" + file.path() +
                          "' belongs to another checkpoint (its header says shard " +
                          std::to_string(header.shard_rank) + " of " +
                          std::to_string(header.shard_count) + ", step " +
                          std::to_string(header.step) + ")");
  }
}

}  // namespace

struct CheckpointReader::Impl {
  std::string dir;
  const CheckpointMetadata* meta = nullptr;
  std::map<std::string, std::pair<size_t, size_t>> params;  // name -> (unit, param)
  std::vector<std::unique_ptr<OpenShard>> shards;

  OpenShard& shard(int s) {
    auto& slot = shards.at(s);
    if (!slot) slot = open(meta->files.at(s));
    return *slot;
  }

  std::unique_ptr<OpenShard> open(const CheckpointFile& f) {
    const std::string path = join(dir, f.name);
    if (!exists(path)) throw CheckpointError("checkpoint shard file '" + path + "' is missing");
    auto s = std::make_unique<OpenShard>(OpenShard{File::open_read(path), -1, {}});
    if (s->file.size() != f.bytes) {
      throw CheckpointError("checkpoint shard file '" + path + "' has " +
                            std::to_string(s->file.size()) + " bytes, the metadata says " +
                            std::to_string(f.bytes) + " (truncated or from another checkpoint)");
    }
    check_header(s->file, f, *meta);
    return s;
  }

  const std::vector<unsigned char>& block(int s, int64_t b) {
    OpenShard& os = shard(s);
    if (os.cached_block == b) return os.block;
    const CheckpointFile& f = meta->files[s];
    const int64_t begin = b * meta->block_bytes;
    os.block.resize(static_cast<size_t>(std::min(meta->block_bytes, f.bytes - begin)));
    os.cached_block = -1;
    os.file.read_at(begin, os.block.data(), os.block.size());
    if (crc32(0, os.block.data(), os.block.size()) != f.block_crc32.at(b)) {
      throw CheckpointError("checksum mismatch in checkpoint shard file '" + join(dir, f.name) +
                            "', bytes [" + std::to_string(begin) + ", " +
                            std::to_string(begin + static_cast<int64_t>(os.block.size())) +
                            "): the file is corrupted");
    }
    os.cached_block = b;
    return os.block;
  }

  void read_bytes(int s, int64_t offset, int64_t bytes, unsigned char* out) {
    while (bytes > 0) {
      const int64_t b = offset / meta->block_bytes;
      const int64_t within = offset - b * meta->block_bytes;
      const auto& data = block(s, b);
      const int64_t n = std::min(bytes, static_cast<int64_t>(data.size()) - within);
      std::copy_n(data.data() + within, n, out);
      out += n;
      offset += n;
      bytes -= n;
    }
  }
};

CheckpointMetadata read_checkpoint_metadata(const std::string& dir) {
  const std::string path = join(dir, kMetadataFile);
  if (!std::filesystem::exists(dir))
    throw CheckpointError("checkpoint '" + dir + "': no such folder");
  if (!exists(path)) throw CheckpointError("checkpoint metadata '" + path + "' is missing");
  return metadata_from_json(read_small_file(path), path);
}

namespace {

CheckpointMetadata committed_metadata(const std::string& dir) {
  require_committed(dir);
  return read_checkpoint_metadata(dir);
}

}  // namespace

CheckpointReader::CheckpointReader(std::string dir)
    : dir_(std::move(dir)), meta_(committed_metadata(dir_)), impl_(new Impl) {
  impl_->dir = dir_;
  impl_->meta = &meta_;
  impl_->shards.resize(meta_.files.size());
  for (size_t u = 0; u < meta_.units.size(); ++u) {
    for (size_t p = 0; p < meta_.units[u].params.size(); ++p) {
      impl_->params[meta_.units[u].params[p].name] = {u, p};
    }
  }
}

CheckpointReader::~CheckpointReader() = default;

void CheckpointReader::read(const std::string& param, const std::string& kind, int64_t begin,
                            int64_t count, float* out) {
  const auto it = impl_->params.find(param);
  if (it == impl_->params.end()) {
    throw CheckpointError("checkpoint '" + dir_ + "' has no parameter '" + param + "'");
  }
  const auto k = std::find(meta_.tensor_kinds.begin(), meta_.tensor_kinds.end(), kind);
  if (k == meta_.tensor_kinds.end()) {
    throw CheckpointError("checkpoint '" + dir_ + "' holds no '" + kind + "' tensors");
  }
  const CheckpointUnit& unit = meta_.units[it->second.first];
  const CheckpointParam& p = unit.params[it->second.second];
  if (begin < 0 || count < 0 || begin + count > p.numel) {
    throw CheckpointError("read of '" + param + "' elements [" + std::to_string(begin) + ", " +
                          std::to_string(begin + count) + ") outside its " +
                          std::to_string(p.numel));
  }
  const int64_t region = unit.region_offsets[k - meta_.tensor_kinds.begin()];
  int64_t flat = p.offset + begin;  // position in the unit's flat parameter
  auto* dst = reinterpret_cast<unsigned char*>(out);
  while (count > 0) {
    const int s = static_cast<int>(flat / unit.shard_numel);
    const int64_t within = flat - s * unit.shard_numel;
    const int64_t n = std::min(count, unit.shard_numel - within);
    const int64_t bytes = n * static_cast<int64_t>(sizeof(float));
    impl_->read_bytes(s, region + within * static_cast<int64_t>(sizeof(float)), bytes, dst);
    dst += bytes;
    flat += n;
    count -= n;
  }
}

std::vector<std::string> verify_checkpoint(const std::string& dir) {
  std::vector<std::string> problems;
  if (!is_committed(dir)) {
    problems.push_back("'" + join(dir, kCommitMarker) + "' is missing: the save did not finish");
  }
  // Metadata problems throw: nothing else can be checked then.
  const CheckpointMetadata meta = read_checkpoint_metadata(dir);
  for (const auto& f : meta.files) {
    try {
      const File file = File::open_read(join(dir, f.name));
      if (file.size() != f.bytes) {
        problems.push_back("'" + file.path() + "' has " + std::to_string(file.size()) +
                           " bytes, the metadata says " + std::to_string(f.bytes));
        continue;
      }
      check_header(file, f, meta);
      std::vector<unsigned char> buf(static_cast<size_t>(meta.block_bytes));
      uint32_t crc = 0;
      for (int64_t off = 0; off < f.bytes; off += meta.block_bytes) {
        const size_t n = static_cast<size_t>(std::min(meta.block_bytes, f.bytes - off));
        file.read_at(off, buf.data(), n);
        crc = crc32(crc, buf.data(), n);
      }
      if (crc != f.crc32) problems.push_back("checksum mismatch in '" + file.path() + "'");
    } catch (const CheckpointError& e) {
      problems.push_back(e.what());
    }
  }
  for (std::string& p : verify_buffers(dir, meta)) problems.push_back(std::move(p));
  return problems;
}

namespace ckpt {

void read_flat_range(CheckpointReader& reader, const std::vector<CheckpointParam>& params,
                     const std::string& kind, int64_t begin, int64_t count, float* out) {
  std::fill_n(out, count, 0.0f);
  const int64_t end = begin + count;
  for (const auto& p : params) {
    const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
    if (lo < hi) reader.read(p.name, kind, lo - p.offset, hi - lo, out + (lo - begin));
  }
}

}  // namespace ckpt
}  // namespace fsdp
