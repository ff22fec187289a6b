// The progress board (see progress.h) and its directory-backed slots. The directory is either the
// private run directory fsdp-run makes for a one-host job (FSDP_RUN_DIR) or one the MPI backend
// makes under /tmp when every rank is on one host.
#include "comm/progress.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "util/files.h"

namespace fsdp {
namespace comm_internal {
namespace {

class DirectorySlots : public ProgressSlots {
 public:
  DirectorySlots(std::string dir, bool owner) : dir_(std::move(dir)), owner_(owner) {
    if (mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) {
      throw std::runtime_error("cannot create " + dir_ + ": " + std::strerror(errno));
    }
  }

  ~DirectorySlots() override {
    if (owner_) remove_tree();
  }

  void put(const std::string& key, const std::string& value) override {
    const std::string path = path_of(key);
    const std::string tmp = files::temp_name_beside(path);  // never another writer's
    const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return;
    const bool whole = write(fd, value.data(), value.size()) == static_cast<ssize_t>(value.size());
    close(fd);
    if (!whole || rename(tmp.c_str(), path.c_str()) != 0) unlink(tmp.c_str());
  }

  std::string get(const std::string& key) override {
    const int fd = open(path_of(key).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return "";
    char buf[512];
    const ssize_t n = read(fd, buf, sizeof(buf));
    close(fd);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  }

 private:
  // Group names hold '/'; the files sit flat in the directory.
  std::string path_of(std::string key) const {
    for (char& c : key) {
      if (c == '/') c = '.';
    }
    return dir_ + "/" + key;
  }

  void remove_tree() const {
    if (DIR* d = opendir(dir_.c_str())) {
      while (dirent* e = readdir(d)) {
        const std::string name = e->d_name;
        if (name != "." && name != "..") unlink((dir_ + "/" + name).c_str());
      }
      closedir(d);
    }
    rmdir(dir_.c_str());
  }

  std::string dir_;
  bool owner_;
};

// Where this process can be found by a peer: the kernel's boot id (hosts may share a name, and
// every host's first PID namespace has the same inode), the PID namespace and the PID. A peer that
// shares the first two can read its state in /proc.
std::string this_process() {
  std::string boot = "?";
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  char ns[64] = {};
  const ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
  return boot + " " + (n > 0 ? std::string(ns, static_cast<size_t>(n)) : "?") + " " +
         std::to_string(getpid());
}

// Why the process posted as `where` (this_process() of a peer) cannot take part in a collective,
// as this host's kernel tells: stopped or gone; "" while it runs or sleeps, or when it is not
// visible from here (another host or PID namespace).
std::string process_state(const std::string& where) {
  std::istringstream in(where);
  std::string boot, ns, pid;
  if (!(in >> boot >> ns >> pid) || pid.find_first_not_of("0123456789") != std::string::npos) {
    return "";
  }
  static const std::string me = this_process();  // boot id and PID namespace never change
  std::istringstream mine(me);
  std::string my_boot, my_ns;
  mine >> my_boot >> my_ns;
  if (boot == "?" || boot != my_boot || ns != my_ns) return "";
  const std::string path = "/proc/" + pid + "/stat";
  std::ifstream stat(path);
  std::string line;
  if (!std::getline(stat, line)) {
    return access(path.c_str(), F_OK) != 0 && errno == ENOENT ? "(pid " + pid + ") has exited" : "";
  }
  const size_t paren = line.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos || paren + 2 >= line.size()) return "";
  const char state = line[paren + 2];
  switch (state) {
    case 'T':
      return "(pid " + pid + ") is stopped (SIGSTOP or SIGTSTP)";
    case 't':
      return "(pid " + pid + ") is stopped by a debugger";
    case 'Z':
    case 'X':
      return "(pid " + pid + ") has exited";
    default:
      return "";
  }
}

}  // namespace

std::shared_ptr<ProgressSlots> directory_slots(const std::string& dir, bool owner) {
  return std::make_shared<DirectorySlots>(dir, owner);
}

ProgressBoard::ProgressBoard(std::shared_ptr<ProgressSlots> slots, std::string group, int rank,
                             int size)
    : slots_(std::move(slots)),
      group_(std::move(group)),
      rank_(rank),
      size_(size),
      processes_(static_cast<size_t>(size)) {
  try {
    slots_->put(group_ + "/process/" + std::to_string(rank_), this_process());
  } catch (const std::exception&) {
    // Diagnostics only, as in post().
  }
}

uint64_t ProgressBoard::post(const std::string& what) {
  try {
    slots_->put(group_ + "/progress/" + std::to_string(rank_), std::to_string(++seq_) + " " + what);
  } catch (const std::exception&) {
    // Diagnostics only: a side channel that fails here must not fail the collective.
  }
  return seq_;
}

std::string ProgressBoard::read(const char* what, int rank) const {
  try {
    return slots_->get(group_ + "/" + what + "/" + std::to_string(rank));
  } catch (const std::exception&) {
    return "";  // never posted, or the store (rank 0) is gone
  }
}

// Posted once by each rank's constructor: read once, so that a report does not ask a store whose
// server may be the hung rank more often than it must.
std::string ProgressBoard::process_of(int rank) const {
  std::string& where = processes_[static_cast<size_t>(rank)];
  if (where.empty()) where = read("process", rank);
  return where;
}

std::string ProgressBoard::report(uint64_t seq) const {
  std::string reached, behind, states;
  for (int r = 0; r < size_; ++r) {
    const std::string state = r == rank_ ? "" : process_state(process_of(r));
    if (!state.empty()) states += "; rank " + std::to_string(r) + " " + state;
    const std::string entry = read("progress", r);
    const uint64_t theirs = entry.empty() ? 0 : std::strtoull(entry.c_str(), nullptr, 10);
    if (theirs >= seq) {
      reached += (reached.empty() ? "" : ", ") + std::to_string(r);
    } else {
      behind += "; rank " + std::to_string(r) +
                (entry.empty() ? std::string(" posted no collective") : " last issued #" + entry);
    }
  }
  return "; ranks that issued this collective (#" + std::to_string(seq) +
         "): " + (reached.empty() ? std::string("none") : reached) + behind + states;
}

std::function<std::string()> ProgressBoard::post_and_diagnose(
    const std::shared_ptr<ProgressBoard>& board, const std::string& what) {
  const uint64_t seq = board->post(what);
  return [board, seq] { return board->report(seq); };
}

std::shared_ptr<ProgressBoard> ProgressBoard::subgroup(const std::string& name, int rank,
                                                       int size) const {
  return std::make_shared<ProgressBoard>(slots_, group_ + "/" + name, rank, size);
}

}  // namespace comm_internal
}  // namespace fsdp
