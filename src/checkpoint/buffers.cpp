// A sharded checkpoint's buffer file (buffers.h): written by rank 0 through SafetensorsWriter,
// checked against the model before a load changes anything, read whole by every rank.
#include "checkpoint/buffers.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "checkpoint/file_io.h"
#include "checkpoint/format.h"
#include "fsdp/checkpoint/safetensors.h"

namespace fsdp {
namespace ckpt {
namespace {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

// The whole file's CRC-32, read 1 MiB at a time.
uint32_t file_crc(const File& file) {
  std::vector<unsigned char> buf(1 << 20);
  uint32_t crc = 0;
  for (int64_t off = 0; off < file.size(); off += static_cast<int64_t>(buf.size())) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(buf.size(), file.size() - off));
    file.read_at(off, buf.data(), n);
    crc = crc32(crc, buf.data(), n);
  }
  return crc;
}

// "" when dir's buffer file has the size and checksum the metadata records, else what is wrong.
std::string file_problem(const std::string& dir, const CheckpointMetadata& meta) {
  if (meta.buffers_file.empty()) return "";
  try {
    const File file = File::open_read(join(dir, meta.buffers_file));
    if (file.size() != meta.buffers_bytes) {
      return "'" + file.path() + "' has " + std::to_string(file.size()) +
             " bytes, the metadata says " + std::to_string(meta.buffers_bytes);
    }
    if (file_crc(file) != meta.buffers_crc32) return "checksum mismatch in '" + file.path() + "'";
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

void write_buffers(const std::string& dir, const std::vector<NamedBuffer>& buffers,
                   CheckpointMetadata& meta) {
  meta.buffers_saved = true;
  meta.buffers.clear();
  meta.buffers_file.clear();
  if (buffers.empty()) return;
  std::vector<SafetensorsTensorSpec> specs;
  for (const auto& b : buffers) {
    const SafetensorsDType dtype = to_safetensors_dtype(b.tensor.scalar_type());
    specs.push_back({b.name, dtype, b.tensor.sizes().vec()});
    meta.buffers.push_back({b.name, safetensors_dtype_name(dtype), b.tensor.sizes().vec()});
  }
  const std::string path = join(dir, kBuffersFile);
  SafetensorsWriter writer(path, specs);
  for (const auto& b : buffers) writer.write(b.name, b.tensor.to(at::kCPU).contiguous());
  writer.commit();
  const File file = File::open_read(path);
  meta.buffers_file = kBuffersFile;
  meta.buffers_bytes = file.size();
  meta.buffers_crc32 = file_crc(file);
}

void check_buffers_fit(const std::string& dir, const CheckpointMetadata& meta,
                       const std::vector<NamedBuffer>& buffers) {
  const std::string where = "checkpoint '" + dir + "'";
  if (!meta.buffers_saved) {
    if (buffers.empty()) return;
    throw CheckpointError(where + " holds no buffers (it was saved before fsdp.cpp saved them), " +
                          "and the model has " + std::to_string(buffers.size()) + ", '" +
                          buffers.front().name +
                          "' first: resume it with a build from before 2026-12-02, or start again");
  }
  std::map<std::string, const CheckpointBuffer*> saved;
  for (const auto& b : meta.buffers) saved[b.name] = &b;
  for (const auto& b : buffers) {
    const auto it = saved.find(b.name);
    if (it == saved.end()) {
      throw CheckpointError(where + " has no buffer '" + b.name + "', which the model has");
    }
    const CheckpointBuffer& c = *it->second;
    const std::string dtype = safetensors_dtype_name(to_safetensors_dtype(b.tensor.scalar_type()));
    if (c.shape != b.tensor.sizes().vec() || c.dtype != dtype) {
      throw CheckpointError(where + ": buffer '" + b.name + "' is " + c.dtype + " " +
                            shape_string(c.shape) + " there and " + dtype + " " +
                            shape_string(b.tensor.sizes().vec()) + " in the model");
    }
    saved.erase(it);
  }
  if (!saved.empty()) {
    throw CheckpointError(where + " holds buffer '" + saved.begin()->first +
                          "', which the model does not have (" + std::to_string(saved.size()) +
                          " such)");
  }
  const std::string problem = file_problem(dir, meta);
  if (!problem.empty()) throw CheckpointError(problem);
}

void read_buffers(const std::string& dir, const CheckpointMetadata& meta,
                  const std::vector<NamedBuffer>& buffers) {
  if (buffers.empty()) return;
  const SafetensorsReader reader(join(dir, meta.buffers_file));
  at::NoGradGuard no_grad;
  for (const auto& b : buffers) {
    const at::Tensor host = at::empty(b.tensor.sizes(), b.tensor.options().device(at::kCPU));
    reader.read(b.name, host);
    at::Tensor(b.tensor).copy_(host);
  }
}

std::vector<std::string> verify_buffers(const std::string& dir, const CheckpointMetadata& meta) {
  const std::string problem = file_problem(dir, meta);
  if (problem.empty()) return {};
  return {problem};
}

void copy_buffers(const std::string& from, const std::string& to, const CheckpointMetadata& meta) {
  if (meta.buffers_file.empty()) return;
  const std::string problem = file_problem(from, meta);
  if (!problem.empty()) throw CheckpointError(problem);
  const File in = File::open_read(join(from, meta.buffers_file));
  files::TempGuard tmp;
  File out = File::create_temp(join(to, meta.buffers_file), &tmp);
  std::vector<unsigned char> buf(1 << 20);
  for (int64_t off = 0; off < in.size(); off += static_cast<int64_t>(buf.size())) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(buf.size(), in.size() - off));
    in.read_at(off, buf.data(), n);
    out.append(buf.data(), n);
  }
  out.sync();
  out.close();
  durable_commit(tmp, join(to, meta.buffers_file), files::OutputState{});
}

}  // namespace ckpt
}  // namespace fsdp
