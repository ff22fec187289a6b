// POSIX file helpers for the checkpoint layer (see file_io.h).
#include "checkpoint/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "fsdp/checkpoint/checkpoint.h"

namespace fsdp {
namespace ckpt {
namespace {

[[noreturn]] void fail_io(const std::string& what, const std::string& path) {
  throw CheckpointError(what + " '" + path + "': " + std::strerror(errno));
}

}  // namespace

File File::open_read(const std::string& path) {
  // O_NONBLOCK: a FIFO where a checkpoint's file belongs opens at once (then is refused below)
  // instead of waiting for a writer forever; reads of a regular file ignore the flag.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail_io("cannot open", path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    fail_io("cannot stat", path);
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);  // a folder opens for reading, and its size would read as a file's
    throw CheckpointError("'" + path + "' is a folder where a file belongs");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw CheckpointError("'" + path +
                          "' is not a regular file (a FIFO, a device or a socket) where a "
                          "checkpoint's file belongs");
  }
  return File(fd, path);
}

File File::create_temp(const std::string& path, files::TempGuard* guard) {
  try {
    const int fd = files::create_temp_file(path, guard);
    return File(fd, guard->path());
  } catch (const std::runtime_error& e) {
    throw CheckpointError(e.what());
  }
}

File::File(File&& other) noexcept : fd_(std::exchange(other.fd_, -1)), path_(other.path_) {}

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = other.path_;
  }
  return *this;
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

int64_t File::size() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) fail_io("cannot stat", path_);
  return st.st_size;
}

void File::append(const void* data, size_t bytes) {
  if (!files::write_all(fd_, data, bytes)) fail_io("cannot write", path_);
}

void File::read_at(int64_t offset, void* out, size_t bytes) const {
  char* p = static_cast<char*>(out);
  const int64_t end = offset + static_cast<int64_t>(bytes);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd_, p, bytes, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_io("cannot read", path_);
    if (n == 0) {
      throw CheckpointError("'" + path_ + "' is truncated: it ends at byte " +
                            std::to_string(offset) + ", needed up to " + std::to_string(end));
    }
    p += n;
    offset += n;
    bytes -= static_cast<size_t>(n);
  }
}

void File::sync() {
  if (::fsync(fd_) != 0) fail_io("cannot fsync", path_);
}

void File::close() {
  if (fd_ >= 0 && ::close(std::exchange(fd_, -1)) != 0) fail_io("cannot close", path_);
}

void sync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail_io("cannot open folder", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) fail_io("cannot fsync folder", dir);
}

void durable_rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) fail_io("cannot rename to '" + to + "' from", from);
  sync_dir(std::filesystem::path(to).parent_path().string());
}

void durable_commit(files::TempGuard& tmp, const std::string& to,
                    const files::OutputState& before) {
  try {
    files::rename_into_place(tmp.path(), to, before);
  } catch (const std::runtime_error& e) {
    throw CheckpointError(e.what());
  }
  tmp.keep();
  sync_dir(std::filesystem::path(to).parent_path().string());
}

void write_file_atomically(const std::string& path, const std::string& text) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    throw CheckpointError("'" + path +
                          "' is a symbolic link; fsdp.cpp writes its own files there and follows "
                          "no link (remove the link)");
  }
  const files::OutputState before = files::output_state(path);
  files::TempGuard tmp;
  File f = File::create_temp(path, &tmp);
  f.append(text.data(), text.size());
  f.sync();
  f.close();
  durable_commit(tmp, path, before);
}

std::string read_small_file(const std::string& path) {
  File f = File::open_read(path);
  std::string text(static_cast<size_t>(f.size()), '\0');
  f.read_at(0, text.data(), text.size());
  return text;
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

uint32_t crc32(uint32_t crc, const void* data, size_t bytes) {
  const auto* p = static_cast<const Bytef*>(data);
  while (bytes > 0) {  // zlib takes uInt lengths
    const uInt n = static_cast<uInt>(std::min<size_t>(bytes, 1u << 30));
    crc = static_cast<uint32_t>(::crc32(crc, p, n));
    p += n;
    bytes -= n;
  }
  return crc;
}

}  // namespace ckpt
}  // namespace fsdp
