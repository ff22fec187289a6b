// The data cache's shared machinery (fsdp/data/corpus.h describes the cache): entries named by a
// hash of what their tokens depend on, built under a file lock, their files written through
// temporaries and the manifest last, as the entry's commit marker. Text corpora (corpus.cpp) and
// instruction data (examples.cpp) both keep their entries this way.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace fsdp::data::cache {

// A file's whole contents; std::runtime_error naming it when it cannot be read.
std::string read_file(const std::string& path);

// fsync on a path opened with `flags`, best effort (it orders data already written).
void fsync_path(const std::string& path, int flags);

// Writes text to path through a temporary file of our own and a rename.
void write_text_atomic(const std::string& path, const std::string& text);

// An exclusive flock held for the object's lifetime; the lock file is never opened through a link.
class FileLock {
 public:
  explicit FileLock(const std::string& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

uint64_t fnv1a(const char* p, size_t n, uint64_t h = 0xCBF29CE484222325ull);
std::string hex64(uint64_t v);

// A manifest: "key value" lines.
using Manifest = std::map<std::string, std::string>;
Manifest read_manifest(const std::string& path);
// The integer under `key`; std::runtime_error naming the manifest when it is missing or malformed.
int64_t manifest_int(const Manifest& m, const std::string& key, const std::string& path);

// The entry <cache_dir>/<name>-<hash of key_text>/, created if missing: under its lock, `build`
// runs when it has no manifest.txt yet (after removing a killed build's temporaries). Returns the
// entry's path and whether this call built it.
struct Entry {
  std::string path;
  bool built = false;
};
Entry with_entry(const std::string& cache_dir, const std::string& name, const std::string& key_text,
                 const std::function<void(const std::string& entry)>& build,
                 const std::function<void(const std::string& entry)>& read);

}  // namespace fsdp::data::cache
