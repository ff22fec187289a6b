// POSIX file helpers for the checkpoint layer: whole-file and positional reads and writes that
// retry short transfers, durable commits (fsync the file, rename it into place, fsync the folder),
// and CRC-32 through zlib. Every error is a CheckpointError naming the path and errno's text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "util/files.h"

namespace fsdp {
namespace ckpt {

// An open file descriptor, closed on destruction.
class File {
 public:
  static File open_read(const std::string& path);
  // A new temporary beside `path` (util/files.h: unique to this writer, created exclusively, never
  // through a link), registered in `guard` for removal unless it is committed.
  static File create_temp(const std::string& path, files::TempGuard* guard);
  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  ~File();

  const std::string& path() const { return path_; }
  int64_t size() const;
  void append(const void* data, size_t bytes);
  // Reads exactly `bytes` at `offset`; a short file is an error naming the path and the range.
  void read_at(int64_t offset, void* out, size_t bytes) const;
  void sync();
  void close();

 private:
  File(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

// Writes `text` to `path` durably: a temporary file of its own in the same folder, fsync, rename,
// fsync of the folder. Readers see the old content or the new, never a mix. `path` must be what it
// was when the write began (absent, or the same file: another writer's output is never replaced)
// and not a symbolic link.
void write_file_atomically(const std::string& path, const std::string& text);
std::string read_small_file(const std::string& path);
// rename(2) then fsync of the destination's folder.
void durable_rename(const std::string& from, const std::string& to);
// The temporary `tmp` (a file or folder) moved to `to` if `to` is still as `before` says
// (files::rename_into_place), then the folder synced and the temporary kept as the output.
void durable_commit(files::TempGuard& tmp, const std::string& to, const files::OutputState& before);
void sync_dir(const std::string& dir);
bool exists(const std::string& path);

uint32_t crc32(uint32_t crc, const void* data, size_t bytes);

}  // namespace ckpt
}  // namespace fsdp
