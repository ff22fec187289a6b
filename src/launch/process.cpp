// fork/exec with pipes and process groups, wait-status descriptions, /proc walks, a free port, and
// the self-pipe that turns signals into poll events. The launcher is single-threaded, which is
// what makes the few non-async-signal-safe calls between fork and exec acceptable.
#include "launch/process.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <system_error>

extern char** environ;

namespace fsdp {
namespace launch {
namespace {

[[noreturn]] void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

struct Pipe {
  int read = -1;
  int write = -1;
};

Pipe make_pipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw_errno("pipe");
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  return {fds[0], fds[1]};
}

// The launcher's environment with the spec's changes applied, as "NAME=value" strings.
std::vector<std::string> build_env(const SpawnSpec& spec) {
  std::set<std::string> drop(spec.unset_env.begin(), spec.unset_env.end());
  for (const auto& kv : spec.set_env) drop.insert(kv.first);
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (!eq || !drop.count(std::string(*e, static_cast<size_t>(eq - *e)))) env.emplace_back(*e);
  }
  for (const auto& kv : spec.set_env) env.push_back(kv.first + "=" + kv.second);
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0 && errno != EINTR) return;
    if (n > 0) done += static_cast<size_t>(n);
  }
}

// The launcher's signal handling, shared by SignalPipe and the forked child (which must undo it).
constexpr int kHandled[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD};
constexpr size_t kNumHandled = sizeof(kHandled) / sizeof(kHandled[0]);
int g_signal_write_fd = -1;
bool g_installed[kNumHandled] = {};
struct sigaction g_previous[kNumHandled];
struct sigaction g_previous_pipe;

void on_signal(int sig) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  const ssize_t written = write(g_signal_write_fd, &byte, 1);
  (void)written;  // when the pipe is full, it already holds a wake-up
  errno = saved;
}

// In the child before exec: the launcher's handlers would write into its signal pipe, and a
// SIGTERM that arrives before exec (or after a failed one) would look like the launcher's own.
void restore_signals_in_child() {
  for (size_t i = 0; i < kNumHandled; ++i) {
    if (g_installed[i]) signal(kHandled[i], SIG_DFL);
  }
  if (g_signal_write_fd >= 0) sigaction(SIGPIPE, &g_previous_pipe, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

// Runs in the forked child: its own process group (so the launcher can signal everything the
// rank starts, and the terminal's Ctrl-C reaches only the launcher, which forwards it), death
// with the launcher, stdin from /dev/null, stdout and stderr into the pipes.
[[noreturn]] void exec_child(pid_t launcher, int death_signal, const Pipe& out, const Pipe& err,
                             char** argv, char** envp) {
  restore_signals_in_child();  // signals were blocked across fork; unblocked here
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, death_signal);
  if (getppid() != launcher) _exit(128 + death_signal);  // the launcher died before prctl
  const int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
  dup2(out.write, STDOUT_FILENO);
  dup2(err.write, STDERR_FILENO);
  execvpe(argv[0], argv, envp);
  write_all(STDERR_FILENO,
            std::string("fsdp-run: cannot run ") + argv[0] + ": " + std::strerror(errno) + "\n");
  _exit(127);
}

}  // namespace

Child spawn(const SpawnSpec& spec) {
  std::vector<std::string> env = build_env(spec);
  std::vector<std::string> args = spec.argv;
  std::vector<char*> argv = c_strings(args), envp = c_strings(env);
  const Pipe out = make_pipe(), err = make_pipe();
  const pid_t launcher = getpid();
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, &old);  // no handler of the launcher's may run in the child
  const pid_t pid = fork();
  if (pid == 0) exec_child(launcher, spec.parent_death_signal, out, err, argv.data(), envp.data());
  const int fork_errno = errno;
  sigprocmask(SIG_SETMASK, &old, nullptr);
  errno = fork_errno;
  if (pid < 0) throw_errno("fork");
  setpgid(pid, pid);  // the child does it too; whichever runs first wins the race with kill()
  close(out.write);
  close(err.write);
  return Child{pid, out.read, err.read};
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (!WIFSIGNALED(status)) return "status " + std::to_string(status);
  const int sig = WTERMSIG(status);
  const char* abbrev = sigabbrev_np(sig);
  std::string text = abbrev ? std::string("signal SIG") + abbrev : "signal " + std::to_string(sig);
  if (WCOREDUMP(status)) text += " (core dumped)";
  return text;
}

int shell_exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

void signal_group(pid_t pgid, int sig) {
  if (pgid > 0) killpg(pgid, sig);  // ESRCH: the group is already gone
}

namespace {
// parent -> child for every live process, from /proc/<pid>/stat.
std::multimap<pid_t, pid_t> process_tree() {
  std::multimap<pid_t, pid_t> children;
  DIR* proc = opendir("/proc");
  if (!proc) return children;
  while (dirent* entry = readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(entry->d_name));
    if (pid <= 0) continue;
    std::ifstream stat(std::string("/proc/") + entry->d_name + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const size_t paren = line.rfind(')');  // the command name may hold spaces and parens
    char state = 0;
    int ppid = 0;
    if (paren != std::string::npos &&
        std::sscanf(line.c_str() + paren + 1, " %c %d", &state, &ppid) == 2 && state != 'Z') {
      children.emplace(ppid, pid);
    }
  }
  closedir(proc);
  return children;
}
}  // namespace

std::vector<pid_t> descendants(pid_t root) {
  const std::multimap<pid_t, pid_t> children = process_tree();
  std::vector<pid_t> found;
  std::vector<pid_t> todo = {root};
  while (!todo.empty()) {
    const pid_t parent = todo.back();
    todo.pop_back();
    for (auto [it, end] = children.equal_range(parent); it != end; ++it) {
      found.push_back(it->second);
      todo.push_back(it->second);
    }
  }
  return found;
}

int pick_free_port(const std::string& addr) {
  // Bound on every interface, as the rendezvous store binds, so the port is free for it too.
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw_errno("socket");
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(sa);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0;
  const int saved = errno;
  close(fd);
  errno = saved;
  if (!ok) throw_errno("picking a free port for " + addr);
  return ntohs(sa.sin_port);
}

SignalPipe::SignalPipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) throw_errno("pipe");
  read_fd_ = fds[0];
  g_signal_write_fd = fds[1];
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < kNumHandled; ++i) {
    sigaction(kHandled[i], nullptr, &g_previous[i]);
    // An ignored SIGINT or SIGHUP (a background job, nohup) stays ignored, here and in the ranks.
    const bool ignored = g_previous[i].sa_handler == SIG_IGN && kHandled[i] != SIGCHLD;
    g_installed[i] = !ignored && sigaction(kHandled[i], &sa, nullptr) == 0;
  }
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &g_previous_pipe);
}

SignalPipe::~SignalPipe() {
  for (size_t i = 0; i < kNumHandled; ++i) {
    if (g_installed[i]) sigaction(kHandled[i], &g_previous[i], nullptr);
    g_installed[i] = false;
  }
  sigaction(SIGPIPE, &g_previous_pipe, nullptr);
  close(g_signal_write_fd);
  close(read_fd_);
  g_signal_write_fd = -1;
}

std::vector<int> SignalPipe::take() {
  std::vector<int> signals;
  unsigned char buf[64];
  ssize_t n;
  while ((n = read(read_fd_, buf, sizeof(buf))) > 0) {
    for (ssize_t i = 0; i < n; ++i) {
      const int sig = buf[i];
      if (sig == SIGCHLD && !signals.empty() && signals.back() == SIGCHLD) continue;
      signals.push_back(sig);
    }
  }
  return signals;
}

}  // namespace launch
}  // namespace fsdp
