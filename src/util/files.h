// How every writer of fsdp.cpp makes a file or folder appear: in a temporary of its own beside the
// output ("OUT.tmp-PID-RANDOM", created exclusively and never through a link), renamed into place
// only if the output is still what it was when the writer began (absent: renameat2's
// RENAME_NOREPLACE, or link-then-unlink where the file system lacks it; present: the same inode,
// replaced). Two writers of one output therefore never share a temporary, and the one that
// finishes second is told, instead of leaving the first one's content under its own success.
//
// Temporaries in flight are registered (TempGuard): an interrupted tool removes them on SIGINT,
// SIGTERM or SIGHUP (install_signal_cleanup), a failed write removes them when the guard goes out
// of scope, and one left by a killed process is recognised by its name (stale_temp_owner: its PID
// is gone). Header-only and free of LibTorch, so that every layer that writes (checkpoint, data,
// hf, the tools) shares it.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>

namespace fsdp {
namespace files {

// "OUT.tmp-PID-xxxxxxxx": the PID says whose it is, the random part makes it unique among threads
// and PID reuse.
inline std::string temp_name_beside(const std::string& path) {
  static thread_local std::mt19937_64 rng{std::random_device{}() ^
                                          (static_cast<uint64_t>(::getpid()) << 32)};
  char suffix[32];
  std::snprintf(suffix, sizeof suffix, ".tmp-%d-%08x", static_cast<int>(::getpid()),
                static_cast<unsigned>(rng() & 0xffffffffu));
  return path + suffix;
}

// The PID in a temporary's name (temp_name_beside's, or an older "X.tmp-PID"), or 0 when `name`
// is not one.
inline int temp_owner(const std::string& name) {
  const size_t at = name.rfind(".tmp-");
  if (at == std::string::npos) return 0;
  size_t i = at + 5;
  int64_t pid = 0;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && pid < (int64_t{1} << 31); ++i) {
    pid = pid * 10 + (name[i] - '0');
  }
  if (i == at + 5 || pid <= 0 || pid >= (int64_t{1} << 31)) return 0;
  if (i < name.size() && name[i] != '-') return 0;
  return static_cast<int>(pid);
}

// Whether a process `pid` lives on this host.
inline bool process_alive(int pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

// The owner of a temporary left behind by a process that is gone, or 0 (not a temporary, or its
// writer still runs: leave it alone).
inline int stale_temp_owner(const std::string& name) {
  const int pid = temp_owner(name);
  return pid > 0 && pid != ::getpid() && !process_alive(pid) ? pid : 0;
}

// --- the registry of temporaries in flight, and the signal handler that removes them ----------

namespace detail {

constexpr int kSlots = 64;
constexpr int kPathBytes = 4096;
struct Slot {
  std::atomic<int> state{0};  // 0 free, 1 being filled, 2 a file, 3 a folder
  char path[kPathBytes];
};
inline Slot g_slots[kSlots];

// Removes the files of a flat folder, then the folder, with system calls only (async-signal-safe).
inline void remove_flat_folder(const char* path) {
  const int fd = ::open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) {
    alignas(8) char buf[8192];
    for (;;) {
      const long n = ::syscall(SYS_getdents64, fd, buf, sizeof buf);
      if (n <= 0) break;
      for (long off = 0; off < n;) {
        // glibc's dirent64 has the kernel's linux_dirent64 layout, which getdents64 fills.
        const auto* e = reinterpret_cast<const struct dirent64*>(buf + off);
        const char* name = e->d_name;
        const bool dots =
            name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'));
        if (!dots) ::unlinkat(fd, name, 0);
        off += e->d_reclen;
      }
    }
    ::close(fd);
  }
  ::rmdir(path);
}

inline void remove_registered() {
  for (Slot& s : g_slots) {
    const int state = s.state.load();
    if (state == 2) ::unlink(s.path);
    if (state == 3) remove_flat_folder(s.path);
  }
}

inline void on_signal(int sig) {
  remove_registered();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace detail

// A temporary registered for removal: by the signal handler while it lives, and by the destructor
// unless keep() was called (the rename into place succeeded). Up to 64 at once; more are not
// registered (still removed by the destructor).
class TempGuard {
 public:
  TempGuard() = default;
  TempGuard(const std::string& path, bool folder) : path_(path), folder_(folder) {
    if (path.size() >= static_cast<size_t>(detail::kPathBytes)) return;
    for (int i = 0; i < detail::kSlots; ++i) {
      int expected = 0;
      if (detail::g_slots[i].state.compare_exchange_strong(expected, 1)) {
        std::memcpy(detail::g_slots[i].path, path.c_str(), path.size() + 1);
        detail::g_slots[i].state.store(folder ? 3 : 2);
        slot_ = i;
        break;
      }
    }
  }
  TempGuard(TempGuard&& o) noexcept
      : path_(std::move(o.path_)), folder_(o.folder_), slot_(o.slot_) {
    o.slot_ = -1;
    o.path_.clear();
  }
  TempGuard& operator=(TempGuard&& o) noexcept {
    if (this != &o) {
      discard();
      path_ = std::move(o.path_);
      folder_ = o.folder_;
      slot_ = o.slot_;
      o.slot_ = -1;
      o.path_.clear();
    }
    return *this;
  }
  ~TempGuard() { discard(); }
  TempGuard(const TempGuard&) = delete;
  TempGuard& operator=(const TempGuard&) = delete;

  const std::string& path() const { return path_; }
  // The temporary is the output now (or someone else's): never remove it.
  void keep() {
    release_slot();
    path_.clear();
  }

 private:
  void release_slot() {
    if (slot_ >= 0) detail::g_slots[slot_].state.store(0);
    slot_ = -1;
  }
  void discard() {
    release_slot();
    if (path_.empty()) return;
    if (folder_) {
      detail::remove_flat_folder(path_.c_str());
    } else {
      ::unlink(path_.c_str());
    }
    path_.clear();
  }

  std::string path_;
  bool folder_ = false;
  int slot_ = -1;
};

// SIGINT, SIGTERM and SIGHUP remove every registered temporary, then end the process as the
// signal would have. For tools: call once at the start of main.
inline void install_signal_cleanup() {
  struct sigaction sa {};
  sa.sa_handler = detail::on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
}

// --- creating temporaries and moving them into place -----------------------------------------

// Removes the temporaries of `path` ("NAME.tmp-PID-..." beside it) whose writer is gone: a tool
// killed with -9 cannot clean up, and the next writer of the same output does it for it. Returns
// how many were removed. PIDs are this host's: every output fsdp.cpp writes has one writer host
// (a tool, rank 0, or each rank its own shard file), so a live writer elsewhere is never taken
// for a dead one here.
inline int remove_stale_temps_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const std::string prefix = (slash == std::string::npos ? path : path.substr(slash + 1)) + ".tmp-";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  int removed = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0 || stale_temp_owner(name) == 0) continue;
    const std::string stale = dir + name;
    struct stat st {};
    if (::lstat(stale.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      detail::remove_flat_folder(stale.c_str());
    } else {
      ::unlink(stale.c_str());
    }
    ++removed;
  }
  ::closedir(d);
  return removed;
}

// A test seam: with FSDP_TEST_STOP_AFTER_TEMPORARY set, a writer stops itself (SIGSTOP) right after
// creating its temporary, so that a test can interrupt a tool mid-write deterministically.
inline void test_stop_point() {
  if (std::getenv("FSDP_TEST_STOP_AFTER_TEMPORARY") != nullptr) ::raise(SIGSTOP);
}

[[noreturn]] inline void fail_errno(const std::string& what, const std::string& path) {
  throw std::runtime_error(what + " '" + path + "': " + std::strerror(errno));
}

// Writes the n bytes at `data` to fd whole, again after a signal interrupts it. False, with errno
// set, on an error; a write that takes nothing counts as one (EIO), so that no caller loops
// forever.
inline bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = EIO;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// A new temporary file beside `path`, open for writing (created exclusively, never through a
// link) and registered in `guard`. Returns the descriptor.
inline int create_temp_file(const std::string& path, TempGuard* guard) {
  remove_stale_temps_of(path);
  for (int attempt = 0;; ++attempt) {
    const std::string tmp = temp_name_beside(path);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) {
      *guard = TempGuard(tmp, false);
      test_stop_point();
      return fd;
    }
    if (errno != EEXIST || attempt == 8) fail_errno("cannot create", tmp);
  }
}

// A new temporary folder beside `path` (mkdir makes it exclusively), registered in `guard`.
inline std::string create_temp_folder(const std::string& path, TempGuard* guard) {
  remove_stale_temps_of(path);
  for (int attempt = 0;; ++attempt) {
    const std::string tmp = temp_name_beside(path);
    if (::mkdir(tmp.c_str(), 0755) == 0) {
      *guard = TempGuard(tmp, true);
      test_stop_point();
      return tmp;
    }
    if (errno != EEXIST || attempt == 8) fail_errno("cannot create folder", tmp);
  }
}

// What was at an output path when its writer began.
struct OutputState {
  bool existed = false;
  bool folder = false;
  dev_t dev = 0;
  ino_t ino = 0;
};

inline OutputState output_state(const std::string& path) {
  struct stat st {};
  OutputState s;
  if (::lstat(path.c_str(), &st) == 0) {
    s.existed = true;
    s.folder = S_ISDIR(st.st_mode);
    s.dev = st.st_dev;
    s.ino = st.st_ino;
  }
  return s;
}

// Moves `tmp` to `path` if `path` is still as `before` says: absent (then nothing may have
// appeared there), or the same file or empty folder (replaced). Otherwise throws naming `path`,
// and `tmp` stays for the guard to remove. Not durable by itself: sync the folder after.
inline void rename_into_place(const std::string& tmp, const std::string& path,
                              const OutputState& before) {
  const auto appeared = [&] {
    throw std::runtime_error("'" + path +
                             "' appeared while it was being written (another writer of the same "
                             "output?); it was left as that writer made it, and this copy removed");
  };
  if (!before.existed) {
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) == 0) return;
    if (errno == EEXIST) appeared();
    if (errno != EINVAL && errno != ENOSYS) fail_errno("cannot rename '" + tmp + "' to", path);
    // No RENAME_NOREPLACE on this file system: a hard link fails where a name exists. Folders
    // cannot be linked: checked, then renamed (a narrow window).
    struct stat st {};
    if (::lstat(tmp.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
      if (::link(tmp.c_str(), path.c_str()) != 0) {
        if (errno == EEXIST) appeared();
        fail_errno("cannot link '" + tmp + "' to", path);
      }
      ::unlink(tmp.c_str());
      return;
    }
    if (output_state(path).existed) appeared();
  } else {
    const OutputState now = output_state(path);
    if (!now.existed || now.dev != before.dev || now.ino != before.ino) appeared();
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    if (errno == ENOTEMPTY || errno == EEXIST) appeared();
    fail_errno("cannot rename '" + tmp + "' to", path);
  }
}

// Opens `path` for reading and writing, creating it if absent, never through a symbolic link
// (O_NOFOLLOW): a link there is refused with a message naming it, so that a file a run keeps in
// its folder (the lock) cannot be made to write elsewhere.
inline int open_own_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0 && errno == ELOOP) {
    throw std::runtime_error("'" + path +
                             "' is a symbolic link; fsdp.cpp writes its own files there and "
                             "follows no link (remove the link)");
  }
  if (fd < 0) fail_errno("cannot open", path);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw std::runtime_error("'" + path + "' is not a regular file; remove it");
  }
  return fd;
}

}  // namespace files
}  // namespace fsdp
