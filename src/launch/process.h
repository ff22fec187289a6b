// The POSIX plumbing under fsdp-run: starting a rank as its own process group with its output on
// pipes, describing how it ended, turning signals into readable file-descriptor events, and a
// free port. Nothing here knows about ranks or restarts; the supervisor does.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace fsdp {
namespace launch {

// A started process: its pid (also its process group id) and the read ends of its stdout and
// stderr pipes (non-blocking, close-on-exec).
struct Child {
  pid_t pid = -1;
  int out_fd = -1;
  int err_fd = -1;
};

struct SpawnSpec {
  std::vector<std::string> argv;               // argv[0] is looked up in PATH
  std::map<std::string, std::string> set_env;  // added to (or replacing) the launcher's
  std::vector<std::string> unset_env;          // removed from the launcher's
  int parent_death_signal = 9;                 // what the child gets if the launcher dies
};

// Forks and execs `spec`: the child runs in a new process group, reads /dev/null as stdin, and
// gets `parent_death_signal` if the launcher dies. An exec failure shows in the child's stderr
// and exit code 127. Throws std::system_error when the fork or the pipes fail.
Child spawn(const SpawnSpec& spec);

// "exit code 3" or "signal SIGKILL", from a waitpid status.
std::string describe_status(int status);

// The shell's convention: the exit code, or 128 + the signal number.
int shell_exit_code(int status);

// Signals a process group; ignores groups that are already gone.
void signal_group(pid_t pgid, int sig);

// Every live descendant of `pid` (children, grandchildren...), from /proc. Used to reach ranks
// that mpirun starts in process groups of their own.
std::vector<pid_t> descendants(pid_t pid);

// A TCP port that was free on `addr` a moment ago (the kernel's choice for port 0).
int pick_free_port(const std::string& addr);

// SIGINT, SIGTERM, SIGHUP and SIGCHLD, delivered as bytes on a pipe so that the poll loop sees
// them; SIGINT or SIGHUP that the launcher inherited as ignored (nohup, `&`) stay ignored. SIGPIPE
// is ignored (a closed terminal must not kill the launcher). spawn() undoes all of this in the
// child. One instance at a time; the destructor restores the previous handlers.
class SignalPipe {
 public:
  SignalPipe();
  ~SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  int fd() const { return read_fd_; }
  // The signals received since the last call, in order (SIGCHLD at most once per read).
  std::vector<int> take();

 private:
  int read_fd_ = -1;
};

}  // namespace launch
}  // namespace fsdp
