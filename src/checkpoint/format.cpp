// The sharded checkpoint format (see format.h and docs/checkpoint.md).
#include "checkpoint/format.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint/buffers.h"
#include "fsdp/checkpoint/safetensors.h"
#include "util/json.h"

namespace fsdp {
namespace ckpt {
namespace {

using nlohmann::json;

void put_u32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
void put_u64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint32_t get_u32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw CheckpointError("checkpoint metadata '" + path + "': " + what);
}

void check(bool ok, const std::string& path, const std::string& what) {
  if (!ok) bad(path, what);
}

json unit_to_json(const CheckpointUnit& u) {
  json params = json::array();
  for (const auto& p : u.params) {
    params.push_back({{"name", p.name},
                      {"shape", p.shape},
                      {"offset", p.offset},
                      {"numel", p.numel},
                      {"aliases", p.aliases}});
  }
  return {{"name", u.name},
          {"numel", u.numel},
          {"shard_numel", u.shard_numel},
          {"region_offsets", u.region_offsets},
          {"params", params}};
}

json file_to_json(const CheckpointFile& f) {
  return {{"name", f.name},
          {"shard_rank", f.shard_rank},
          {"bytes", f.bytes},
          {"crc32", f.crc32},
          {"block_crc32", f.block_crc32}};
}

// A unit's parameter, or (without an offset) a frozen one.
CheckpointParam param_from_json(const json& p, bool has_offset) {
  CheckpointParam cp;
  p.at("name").get_to(cp.name);
  p.at("shape").get_to(cp.shape);
  if (has_offset) p.at("offset").get_to(cp.offset);
  p.at("numel").get_to(cp.numel);
  p.at("aliases").get_to(cp.aliases);
  return cp;
}

CheckpointUnit unit_from_json(const json& j) {
  CheckpointUnit u;
  j.at("name").get_to(u.name);
  j.at("numel").get_to(u.numel);
  j.at("shard_numel").get_to(u.shard_numel);
  j.at("region_offsets").get_to(u.region_offsets);
  for (const auto& p : j.at("params")) u.params.push_back(param_from_json(p, true));
  return u;
}

CheckpointFile file_from_json(const json& j) {
  CheckpointFile f;
  j.at("name").get_to(f.name);
  j.at("shard_rank").get_to(f.shard_rank);
  j.at("bytes").get_to(f.bytes);
  j.at("crc32").get_to(f.crc32);
  j.at("block_crc32").get_to(f.block_crc32);
  return f;
}

// Every number of the metadata is an integer but the optimizer's learning rate (and whatever the
// train state holds, which is kept as text): a float where an integer belongs would be converted
// by nlohmann with a cast that is undefined past int64's range (5e123 was, found by fuzzing).
// `field` names where `j` is, for the error.
void check_integers(const json& j, const std::string& field, const std::string& path) {
  if (j.is_number_float()) {
    bad(path, field + ": expected an integer, got " + json_bounds::excerpt(j));
  }
  if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) {
      check_integers(j[i], field + "[" + std::to_string(i) + "]", path);
    }
  } else if (j.is_object()) {
    for (const auto& [key, value] : j.items()) {
      const std::string inner = field.empty() ? key : field + "." + key;
      if (inner == "train_state" || inner == "optimizer.lr") continue;
      check_integers(value, inner, path);
    }
  }
}

CheckpointMetadata fields_from_json(const json& j) {
  CheckpointMetadata m;
  j.at("version").get_to(m.version);
  j.at("step").get_to(m.step);
  j.at("world_size").get_to(m.world_size);
  j.at("mesh").at("replicate").get_to(m.replicate_size);
  j.at("mesh").at("shard").get_to(m.shard_count);
  j.at("strategy").get_to(m.strategy);
  j.at("tensor_kinds").get_to(m.tensor_kinds);
  j.at("optimizer").at("kind").get_to(m.optimizer);
  j.at("optimizer").at("steps").get_to(m.optimizer_steps);
  j.at("optimizer").at("lr").get_to(m.lr);
  j.at("block_bytes").get_to(m.block_bytes);
  for (const auto& u : j.at("units")) m.units.push_back(unit_from_json(u));
  for (const auto& f : j.at("files")) m.files.push_back(file_from_json(f));
  m.train_state = j.at("train_state").dump();
  if (j.contains("frozen_params")) {  // checkpoints before frozen parameters have none
    for (const auto& p : j.at("frozen_params")) m.frozen.push_back(param_from_json(p, false));
  }
  if (j.contains("buffers")) {  // nor those before buffers
    const json& b = j.at("buffers");
    m.buffers_saved = true;
    b.at("file").get_to(m.buffers_file);
    b.at("bytes").get_to(m.buffers_bytes);
    b.at("crc32").get_to(m.buffers_crc32);
    for (const auto& t : b.at("tensors")) {
      CheckpointBuffer cb;
      t.at("name").get_to(cb.name);
      t.at("dtype").get_to(cb.dtype);
      t.at("shape").get_to(cb.shape);
      m.buffers.push_back(std::move(cb));
    }
  }
  return m;
}

void check_param(const CheckpointUnit& u, const CheckpointParam& p, const std::string& path) {
  int64_t numel = 1;
  for (int64_t d : p.shape) {
    check(d >= 0 && (d == 0 || numel <= INT64_MAX / d), path,
          "parameter '" + p.name + "' has a bad shape");
    numel *= d;
  }
  check(numel == p.numel, path, "parameter '" + p.name + "': numel disagrees with its shape");
  check(p.offset >= 0 && p.numel <= u.numel - p.offset, path,
        "parameter '" + p.name + "' lies outside unit '" + u.name + "'");
}

// The buffer file is the one name a reader opens (never a path the metadata makes up), listed
// with a size when there are buffers; each buffer a known dtype, a shape without overflow, once.
void check_buffers(const CheckpointMetadata& m, const std::string& path) {
  check(m.buffers_file.empty() == m.buffers.empty() &&
            (m.buffers_file.empty() || m.buffers_file == kBuffersFile),
        path,
        "buffers: \"file\" must be \"buffers.safetensors\" when there are buffers, else \"\"");
  check(m.buffers_bytes >= 0, path, "buffers: negative file size");
  std::set<std::string> names;
  for (const auto& b : m.buffers) {
    check(names.insert(b.name).second, path, "buffer '" + b.name + "' is listed twice");
    check(parse_safetensors_dtype(b.dtype).has_value(), path,
          "buffer '" + b.name + "' has an unknown dtype '" + b.dtype + "'");
    int64_t numel = 1;
    for (int64_t d : b.shape) {
      check(d >= 0 && (d == 0 || numel <= INT64_MAX / d), path,
            "buffer '" + b.name + "' has a bad shape");
      numel *= d;
    }
  }
}

// Units, regions and files must describe the same layout, so that every read stays inside a file.
void check_layout(const CheckpointMetadata& m, const std::string& path) {
  check(m.shard_count >= 1 && m.replicate_size >= 1 &&
            m.world_size == m.shard_count * m.replicate_size,
        path, "mesh does not multiply to the world size");
  check(m.block_bytes > 0, path, "block_bytes must be positive");
  check(!m.tensor_kinds.empty() && m.tensor_kinds[0] == "param", path,
        "tensor_kinds must start with \"param\"");
  std::vector<CheckpointUnit> expected = m.units;
  for (const auto& u : m.units) {
    check(u.numel >= 0, path, "unit '" + u.name + "' has a negative size");
    for (const auto& p : u.params) check_param(u, p, path);
  }
  CheckpointUnit frozen;  // a unit of its own, laid out nowhere: only the shapes are checked
  frozen.name = "(frozen parameters)";
  frozen.numel = INT64_MAX;
  for (const auto& p : m.frozen) check_param(frozen, p, path);
  check_buffers(m, path);
  lay_out_regions(expected, m.tensor_kinds.size(), m.shard_count);
  for (size_t i = 0; i < m.units.size(); ++i) {
    check(expected[i].shard_numel == m.units[i].shard_numel &&
              expected[i].region_offsets == m.units[i].region_offsets,
          path,
          "unit '" + m.units[i].name + "' has a shard size or region offsets that disagree " +
              "with its size and the shard count");
  }
  check(static_cast<int>(m.files.size()) == m.shard_count, path,
        "lists " + std::to_string(m.files.size()) + " shard files for " +
            std::to_string(m.shard_count) + " shards");
  const int64_t bytes = shard_file_bytes(m.units, m.tensor_kinds.size());
  for (size_t r = 0; r < m.files.size(); ++r) {
    const auto& f = m.files[r];
    check(f.shard_rank == static_cast<int>(r) && f.name == shard_file_name(r, m.shard_count), path,
          "shard file entry " + std::to_string(r) + " is misnamed");
    check(f.bytes == bytes, path, "shard file '" + f.name + "' size disagrees with the layout");
    check(static_cast<int64_t>(f.block_crc32.size()) == (bytes + m.block_bytes - 1) / m.block_bytes,
          path, "shard file '" + f.name + "' has the wrong number of block checksums");
  }
}

}  // namespace

std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

std::string shard_file_name(int shard_rank, int shard_count) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "shard_%05d-of-%05d.bin", shard_rank, shard_count);
  return buf;
}

std::string join(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

bool is_committed(const std::string& dir) { return exists(join(dir, kCommitMarker)); }

void require_committed(const std::string& dir) {
  if (!std::filesystem::is_directory(dir)) {
    throw CheckpointError("checkpoint '" + dir + "': " +
                          (std::filesystem::exists(dir) ? "not a folder" : "no such folder"));
  }
  if (!is_committed(dir)) {
    throw CheckpointError("checkpoint '" + dir + "' has no " + kCommitMarker +
                          " marker: its save did not finish; not reading it");
  }
}

std::string commit_marker(int64_t step) {
  return "{\"version\": " + std::to_string(kFormatVersion) + ", \"step\": " + std::to_string(step) +
         "}\n";
}

void encode_header(const ShardHeader& h, unsigned char out[kShardHeaderBytes]) {
  std::memset(out, 0, kShardHeaderBytes);
  std::memcpy(out, kShardMagic, sizeof kShardMagic);
  put_u32(out + 8, h.version);
  put_u32(out + 12, h.shard_rank);
  put_u32(out + 16, h.shard_count);
  put_u64(out + 24, static_cast<uint64_t>(h.step));
}

ShardHeader decode_header(const unsigned char in[kShardHeaderBytes], const std::string& path) {
  if (std::memcmp(in, kShardMagic, sizeof kShardMagic) != 0) {
    throw CheckpointError("'" + path + "' is not an fsdp.cpp shard file (wrong magic)");
  }
  ShardHeader h;
  h.version = get_u32(in + 8);
  h.shard_rank = get_u32(in + 12);
  h.shard_count = get_u32(in + 16);
  h.step = static_cast<int64_t>(get_u64(in + 24));
  if (h.version != kFormatVersion) {
    throw CheckpointError("'" + path + "' has format version " + std::to_string(h.version) +
                          "; this build reads version " + std::to_string(kFormatVersion));
  }
  return h;
}

void lay_out_regions(std::vector<CheckpointUnit>& units, size_t kinds, int shard_count) {
  int64_t offset = kShardHeaderBytes;
  for (auto& u : units) {
    u.shard_numel = (u.numel + shard_count - 1) / shard_count;
    u.region_offsets.clear();
    for (size_t k = 0; k < kinds; ++k) {
      u.region_offsets.push_back(offset);
      offset += u.shard_numel * static_cast<int64_t>(sizeof(float));
    }
  }
}

int64_t shard_file_bytes(const std::vector<CheckpointUnit>& units, size_t kinds) {
  int64_t bytes = kShardHeaderBytes;
  for (const auto& u : units) bytes += u.shard_numel * static_cast<int64_t>(sizeof(float) * kinds);
  return bytes;
}

ShardFileWriter::ShardFileWriter(const std::string& dir, const ShardHeader& header,
                                 int64_t block_bytes)
    : dir_(dir),
      name_(shard_file_name(header.shard_rank, header.shard_count)),
      header_(header),
      file_(File::create_temp(join(dir, name_), &tmp_)),
      block_bytes_(block_bytes) {
  block_.reserve(static_cast<size_t>(block_bytes));
  unsigned char h[kShardHeaderBytes];
  encode_header(header, h);
  append(h, sizeof h);
}

void ShardFileWriter::append(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (bytes > 0) {
    const size_t n = std::min(bytes, static_cast<size_t>(block_bytes_) - block_.size());
    block_.insert(block_.end(), p, p + n);
    p += n;
    bytes -= n;
    if (static_cast<int64_t>(block_.size()) == block_bytes_) flush_block();
  }
}

void ShardFileWriter::flush_block() {
  if (block_.empty()) return;
  file_.append(block_.data(), block_.size());
  crc_ = crc32(crc_, block_.data(), block_.size());
  block_crcs_.push_back(crc32(0, block_.data(), block_.size()));
  bytes_ += static_cast<int64_t>(block_.size());
  block_.clear();
}

CheckpointFile ShardFileWriter::finish() {
  flush_block();
  file_.sync();
  file_.close();
  durable_commit(tmp_, join(dir_, name_), files::OutputState{});  // a new file in a new folder
  return {name_, static_cast<int>(header_.shard_rank), bytes_, crc_, block_crcs_};
}

std::string metadata_to_json(const CheckpointMetadata& m) {
  json units = json::array(), files = json::array(), frozen = json::array();
  for (const auto& u : m.units) units.push_back(unit_to_json(u));
  for (const auto& f : m.files) files.push_back(file_to_json(f));
  for (const auto& p : m.frozen) {
    frozen.push_back(
        {{"name", p.name}, {"shape", p.shape}, {"numel", p.numel}, {"aliases", p.aliases}});
  }
  json tensors = json::array();
  for (const auto& b : m.buffers) {
    tensors.push_back({{"name", b.name}, {"dtype", b.dtype}, {"shape", b.shape}});
  }
  const json buffers = {{"file", m.buffers_file},
                        {"bytes", m.buffers_bytes},
                        {"crc32", m.buffers_crc32},
                        {"tensors", tensors}};
  json j = {{"format", kFormatName},
            {"version", m.version},
            {"step", m.step},
            {"world_size", m.world_size},
            {"mesh", {{"replicate", m.replicate_size}, {"shard", m.shard_count}}},
            {"strategy", m.strategy},
            {"tensor_kinds", m.tensor_kinds},
            {"dtype", "F32"},
            {"optimizer", {{"kind", m.optimizer}, {"steps", m.optimizer_steps}, {"lr", m.lr}}},
            {"block_bytes", m.block_bytes},
            {"train_state", json::parse(m.train_state)},
            {"units", units},
            {"frozen_params", frozen},
            {"buffers", buffers},
            {"files", files}};
  return j.dump(1) + "\n";
}

CheckpointMetadata metadata_from_json(const std::string& text, const std::string& path) {
  const size_t deep = json_bounds::too_deep_at(text);
  if (deep != std::string::npos) bad(path, json_bounds::too_deep_message("the metadata", deep));
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    bad(path, std::string("not valid JSON: ") + e.what());
  }
  // Typed lookups: json::value() throws its own type_error for a "format": 5 (found by fuzzing).
  const auto member = [&](const char* key) {
    return j.is_object() && j.contains(key) ? j.at(key) : json();
  };
  const json format = member("format"), version = member("version");
  check(format.is_string() && format.get<std::string>() == kFormatName, path,
        std::string("not an fsdp.cpp checkpoint (\"format\" is not \"") + kFormatName + "\")");
  check(version.is_number_integer() && version.get<int64_t>() == kFormatVersion, path,
        "format version " + json_bounds::excerpt(version) + "; this build reads version " +
            std::to_string(kFormatVersion));
  check_integers(j, "", path);
  CheckpointMetadata m;
  try {
    m = fields_from_json(j);
  } catch (const json::exception& e) {
    bad(path, std::string("missing or mistyped field: ") + e.what());
  }
  check(j.at("train_state").is_object(), path, "train_state is not a JSON object");
  check_layout(m, path);
  return m;
}

void check_json_object(const std::string& text, const std::string& what) {
  bool ok = false;
  try {
    ok = json_bounds::parse_or_discard(text).is_object();
  } catch (const json::exception&) {
  }
  if (!ok) throw CheckpointError(what + " must be a JSON object, got: " + text.substr(0, 80));
}

}  // namespace ckpt
}  // namespace fsdp
