// The data cache's shared machinery (cache_entry.h).
#include "data/cache_entry.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "util/files.h"

namespace fsdp::data::cache {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("corpus: cannot read " + path + ": " + std::strerror(errno));
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw std::runtime_error("corpus: error reading " + path);
  return s.str();
}

void fsync_path(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return;  // best effort: the data is already written; this only orders it on disk
  ::fsync(fd);
  ::close(fd);
}

// Writes text to path through a temporary file and a rename, like write_token_file.
void write_text_atomic(const std::string& path, const std::string& text) {
  files::TempGuard guard;
  const int fd = files::create_temp_file(path, &guard);
  const std::string& tmp = guard.path();
  if (!files::write_all(fd, text.data(), text.size()) || ::fsync(fd) != 0) {
    const int error = errno;
    ::close(fd);
    throw std::runtime_error("corpus: cannot write " + tmp + ": " + std::strerror(error));
  }
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error("corpus: cannot rename " + tmp + " to " + path + ": " +
                             std::strerror(errno));
  guard.keep();
}

FileLock::FileLock(const std::string& path) {
  try {
    fd_ = files::open_own_file(path);  // never through a link
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("corpus: the cache's lock file: ") + e.what());
  }
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    ::close(fd_);
    throw std::runtime_error("corpus: cannot lock " + path + ": " + std::strerror(errno));
  }
}

FileLock::~FileLock() { ::close(fd_); }  // closing releases the lock

uint64_t fnv1a(const char* p, size_t n, uint64_t h) {
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(p[i])) * 0x100000001B3ull;
  return h;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

Manifest read_manifest(const std::string& path) {
  Manifest m;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);) {
    const size_t sp = line.find(' ');
    if (sp != std::string::npos) m[line.substr(0, sp)] = line.substr(sp + 1);
  }
  return m;
}

int64_t manifest_int(const Manifest& m, const std::string& key, const std::string& path) {
  auto it = m.find(key);
  if (it == m.end())
    throw std::runtime_error("corpus cache: " + path + " has no '" + key +
                             "' line; delete its folder to rebuild it");
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (errno != 0 || end == it->second.c_str() || *end != '\0')
    throw std::runtime_error("corpus cache: " + path + ": '" + key +
                             "' is not an integer; delete "
                             "its folder to rebuild it");
  return v;
}

Entry with_entry(const std::string& cache_dir, const std::string& name, const std::string& key_text,
                 const std::function<void(const std::string& entry)>& build,
                 const std::function<void(const std::string& entry)>& read) {
  Entry e{cache_dir + "/" + name + "-" + hex64(fnv1a(key_text.data(), key_text.size())), false};
  std::filesystem::create_directories(e.path);
  FileLock lock(e.path + "/.lock");
  if (!std::filesystem::exists(e.path + "/manifest.txt")) {
    for (const auto& f : std::filesystem::directory_iterator(e.path)) {  // a killed build's
      if (f.path().filename().string().find(".tmp-") != std::string::npos) {
        std::filesystem::remove(f.path());
      }
    }
    build(e.path);
    e.built = true;
  }
  read(e.path);  // under the lock: no other process rebuilds the entry meanwhile
  return e;
}

}  // namespace fsdp::data::cache
