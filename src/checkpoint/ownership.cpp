// The checkpoint root's lock and the output checks of every writer (see ownership.h). The lock is
// flock, not a PID file: the kernel drops it with the process, so a run killed by SIGKILL or a
// power cut never leaves a folder that looks owned.
#include "fsdp/checkpoint/ownership.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <regex>

#include "checkpoint/errors.h"
#include "checkpoint/format.h"
#include "fsdp/checkpoint/checkpoint.h"
#include "util/files.h"

namespace fsdp {
namespace fs = std::filesystem;
using ckpt::kCommitMarker;
using ckpt::kLatestFile;
using ckpt::kMetadataFile;
namespace {

std::string holder_of(int fd) {
  char text[256] = {};
  const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
  std::string s(text, n > 0 ? static_cast<size_t>(n) : 0);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s.empty() ? "one that has not written its host and PID yet" : s;
}

// Rank 0's attempt: the open, locked file, or -1 and why not.
int try_lock(const std::string& root, std::string* error) {
  std::error_code ec;
  fs::create_directories(root, ec);
  const std::string path = (fs::path(root) / kCheckpointLockFile).string();
  int fd = -1;
  try {
    fd = files::open_own_file(path);  // never through a link: the lock is written to
  } catch (const std::runtime_error& e) {
    *error = std::string("the lock file: ") + e.what();
    return -1;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    *error = e == EWOULDBLOCK
                 ? "'" + root + "' is in use by another run (host and PID: " + holder_of(fd) +
                       "); wait for it to end, or choose another folder"
                 : "cannot lock '" + path + "': " + std::strerror(e);
    ::close(fd);
    return -1;
  }
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::string me = std::string(host) + " " + std::to_string(::getpid()) + "\n";
  // Only a note for the message a refused run prints: the lock holds without it.
  const bool noted = ::ftruncate(fd, 0) == 0 &&
                     ::pwrite(fd, me.data(), me.size(), 0) == static_cast<ssize_t>(me.size());
  static_cast<void>(noted);
  return fd;
}

bool is_step_name(const std::string& name) {
  static const std::regex step(R"(step_[0-9]+(\.partial)?)");
  return std::regex_match(name, step);
}

// A folder a checkpoint lives in: its files, or a step folder's name.
bool is_step_folder(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_directory(p, ec)) return false;
  return fs::exists(p / kMetadataFile, ec) || fs::exists(p / kCommitMarker, ec) ||
         is_step_name(p.filename().string());
}

bool is_checkpoint_root(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_directory(p, ec)) return false;
  if (fs::exists(p / kLatestFile, ec) || fs::exists(p / kCheckpointLockFile, ec)) return true;
  // A run names its steps step_N: a checkpoint a tool wrote under another name (a resharded copy)
  // or a link to a step folder (a user's shortcut) does not make its folder a root.
  for (const auto& e : fs::directory_iterator(p, ec)) {
    if (!e.is_symlink(ec) && e.is_directory(ec) && is_step_name(e.path().filename().string())) {
      return true;
    }
  }
  return false;
}

// `inner` is `outer` or below it (both canonical).
bool within(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i) {
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

}  // namespace

CheckpointRootLock::CheckpointRootLock(const std::string& root, Comm& world) {
  std::string error;
  if (world.rank() == 0) fd_ = try_lock(root, &error);
  try {
    ckpt::agree_on_failure(world, error, "locking the checkpoint folder");
  } catch (...) {
    if (fd_ >= 0) ::close(fd_);
    throw;
  }
}

CheckpointRootLock::~CheckpointRootLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays, as flock needs no cleanup
}

void check_checkpoint_output(const std::string& out_path, const std::string& input,
                             const std::string& input_name, OutputKind kind) {
  fs::path out = fs::path(out_path).lexically_normal();
  if (!out.has_filename()) out = out.parent_path();  // "out/" is "out"
  auto refuse = [&](const std::string& why) {
    throw CheckpointError("output '" + out.string() + "' " + why + "; nothing was written");
  };
  std::error_code ec;
  if (fs::is_symlink(out, ec)) refuse("is a symbolic link; give the file or folder itself");
  const fs::path real = fs::weakly_canonical(out);
  if (within(real, fs::weakly_canonical(input))) refuse("is or lies inside " + input_name);
  for (fs::path p = real; p.has_relative_path(); p = p.parent_path()) {
    if (is_step_folder(p)) refuse("lies inside the checkpoint '" + p.string() + "'");
    // A root's names are its run's: a step folder a tool made there (step_N) would be replaced by
    // the run's own save of that step, and `latest` or the lock are the run's state.
    if (p != real && is_checkpoint_root(p)) {
      refuse("lies inside the checkpoint root '" + p.string() +
             "', whose names belong to the run that writes it; write it outside the root");
    }
  }
  if (kind == OutputKind::kFile && fs::is_directory(real, ec)) {
    refuse("is a folder; give the name of the file to write");
  }
  if (kind == OutputKind::kNewFolder && fs::exists(real, ec) &&
      !(fs::is_directory(real, ec) && fs::is_empty(real, ec))) {
    refuse("exists and is not an empty folder; give a new folder");
  }
}

}  // namespace fsdp
