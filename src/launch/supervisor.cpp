// supervise() and one attempt of the job. An attempt is a poll loop over the signal pipe and every
// child's stdout and stderr; it ends when every child has been reaped and its pipes have closed.
// Everything the launcher says goes to stderr, prefixed "fsdp-run: ".
#include "launch/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>

#include "launch/output.h"
#include "launch/process.h"

namespace fsdp {
namespace launch {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kDrainTime = std::chrono::seconds(2);  // for pipes still open after every exit

void say(const std::string& text) { write_fd(STDERR_FILENO, "fsdp-run: " + text + "\n"); }

std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g s", s);
  return text;
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

// One started process: a rank (gloo), or mpirun, which starts them all (mpi).
struct Proc {
  std::string label;  // "rank 3" or "mpirun"
  Child child;
  OutputTarget* output;  // where its pipes are read into
  OutputSink* sink;      // whose tail a failure report shows
  std::string log_name;  // its file under --log-dir
  bool running = true;
  int status = 0;
};

struct Outcome {
  enum Kind { kSuccess, kFailure, kInterrupted } kind;
  int exit_code;
};

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

// A one-host job's private directory (mode 0700, fresh for each attempt, removed after it),
// exported as FSDP_RUN_DIR. fsdp.cpp's ranks keep their rendezvous store and progress board there
// instead of in a TCPStore that would listen on every interface. Empty for multi-node jobs.
class RunDir {
 public:
  explicit RunDir(const Options& o) {
    // fsdp-run starts MPI jobs on one node only, whatever --master-addr says.
    if (o.nnodes != 1 || (o.backend != "mpi" && !is_loopback(o.master_addr))) return;
    char path[] = P_tmpdir "/fsdp-run-XXXXXX";
    if (mkdtemp(path) == nullptr) {
      throw std::runtime_error(std::string("cannot create a run directory in " P_tmpdir ": ") +
                               std::strerror(errno));
    }
    path_ = path;
  }
  ~RunDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The variables torchrun sets, for one local rank, and FSDP_RUN_DIR.
std::map<std::string, std::string> rank_env(const Options& o, int local_rank, int port, int attempt,
                                            const RunDir& run_dir) {
  const std::string rank = std::to_string(o.global_rank(local_rank));
  const std::string world = std::to_string(o.world_size());
  std::map<std::string, std::string> env = {
      {"RANK", rank},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"WORLD_SIZE", world},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
      {"GROUP_RANK", std::to_string(o.node_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(o.nnodes)},
      {"ROLE_RANK", rank},
      {"ROLE_WORLD_SIZE", world},
      {"ROLE_NAME", "default"},
      {"MASTER_ADDR", o.master_addr},
      {"MASTER_PORT", std::to_string(port)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(attempt)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(o.max_restarts)}};
  if (!run_dir.path().empty()) env["FSDP_RUN_DIR"] = run_dir.path();
  return env;
}

// torchrun's default: one OpenMP thread per rank unless the user chose, as ranks share the cores.
void default_threads(const Options& o, std::map<std::string, std::string>* env) {
  if (o.nproc_per_node > 1 && !std::getenv("OMP_NUM_THREADS")) (*env)["OMP_NUM_THREADS"] = "1";
}

const std::vector<std::string> kTorchrunVars = {
    "RANK",        "LOCAL_RANK",       "WORLD_SIZE",  "LOCAL_WORLD_SIZE",
    "GROUP_RANK",  "GROUP_WORLD_SIZE", "ROLE_RANK",   "ROLE_WORLD_SIZE",
    "MASTER_ADDR", "MASTER_PORT",      "FSDP_RUN_DIR"};
// FSDP_RUN_DIR too: one inherited from an outer launcher names another job's directory.
const std::vector<std::string> kMpiVars = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                           "OMPI_COMM_WORLD_LOCAL_RANK",
                                           "OMPI_COMM_WORLD_LOCAL_SIZE", "FSDP_RUN_DIR"};

int open_log(const Options& o, const std::string& name, int attempt) {
  if (o.log_dir.empty()) return -1;
  const std::string path = o.log_dir + "/" + name;
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (attempt == 0 ? O_TRUNC : O_APPEND);
  const int fd = open(path.c_str(), flags, 0644);
  if (fd < 0) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
  return fd;
}

class Attempt {
 public:
  Attempt(const Options& o, int attempt, SignalPipe& signals)
      : o_(o), attempt_(attempt), signals_(signals), run_dir_(o) {}
  ~Attempt();

  Outcome run();

 private:
  OutputSink* add_sink(const std::string& label, int tee, bool first, const std::string& log);
  void start();
  void start_gloo(int port);
  void start_mpi();
  bool finished() const;
  void close_pipes();
  int timeout_ms() const;
  void pump();
  void read_from(Proc& proc, Stream stream);
  void on_signal(int sig);
  void reap();
  void on_exit(size_t i, int status);
  void stop(int sig);
  void kill_all();
  std::string running_labels() const;
  void after_last_exit();
  void reap_orphans();
  void report_failure() const;

  const Options& o_;
  const int attempt_;
  SignalPipe& signals_;
  RunDir run_dir_;  // outlives every child: procs_ is reaped before the destructor runs
  std::vector<std::unique_ptr<OutputSink>> sinks_;
  std::unique_ptr<MpiDemux> demux_;
  std::vector<Proc> procs_;
  int failed_ = -1;      // index into procs_ of the first failure
  int interrupted_ = 0;  // the first signal that told the launcher to stop
  std::optional<Clock::time_point> kill_at_, drain_until_;
  bool killed_ = false;
};

Attempt::~Attempt() { close_pipes(); }

OutputSink* Attempt::add_sink(const std::string& label, int tee, bool first,
                              const std::string& log) {
  SinkOptions sink;
  sink.label = label;
  for (int s = 0; s < 2; ++s) {
    sink.prefix[s] = (tee >> s) & 1;
    sink.show[s] = first || sink.prefix[s];
  }
  sink.log_fd = open_log(o_, log, attempt_);
  sinks_.push_back(std::make_unique<OutputSink>(sink));
  if (attempt_ > 0) {
    sinks_.back()->log_note("==== fsdp-run: restart " + std::to_string(attempt_) + " of " +
                            std::to_string(o_.max_restarts) + " ====");
  }
  return sinks_.back().get();
}

void Attempt::start_gloo(int port) {
  for (int local = 0; local < o_.nproc_per_node; ++local) {
    const int rank = o_.global_rank(local);
    const std::string label = "rank " + std::to_string(rank);
    OutputSink* sink = add_sink(label, o_.tee, local == 0, "rank_" + std::to_string(rank) + ".log");
    SpawnSpec spec{o_.program, rank_env(o_, local, port, attempt_, run_dir_), kMpiVars, SIGKILL};
    default_threads(o_, &spec.set_env);
    procs_.push_back(Proc{label, spawn(spec), sink, sink, "rank_" + std::to_string(rank) + ".log"});
  }
}

// What `mpirun --version` prints (empty if it cannot be run): the tag style depends on it.
std::string mpirun_version() {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen("mpirun --version 2>/dev/null", "r"), pclose);
  std::string text;
  char buf[256];
  while (pipe && fgets(buf, sizeof buf, pipe.get())) text += buf;
  return text;
}

// mpirun starts the ranks in process groups of their own and, given SIGTERM, stops them: so it
// gets SIGTERM, not SIGKILL, if the launcher dies. --tag-output lets MpiDemux tell ranks apart.
void Attempt::start_mpi() {
  std::vector<OutputSink*> ranks;
  for (int rank = 0; rank < o_.nproc_per_node; ++rank) {
    ranks.push_back(add_sink("rank " + std::to_string(rank), o_.tee, rank == 0,
                             "rank_" + std::to_string(rank) + ".log"));
  }
  OutputSink* mpirun = add_sink("mpirun", 0, true, "mpirun.log");
  demux_ = std::make_unique<MpiDemux>(ranks, mpirun, mpi_tag_style(mpirun_version()));
  SpawnSpec spec;
  spec.argv = {"mpirun"};
  if (geteuid() == 0) spec.argv.push_back("--allow-run-as-root");
  for (const char* arg : {"--oversubscribe", "--bind-to", "none", "--tag-output", "-np"}) {
    spec.argv.push_back(arg);
  }
  spec.argv.push_back(std::to_string(o_.nproc_per_node));
  for (const char* arg : {"-x", "FSDP_RUN_DIR"}) spec.argv.push_back(arg);
  // One node: shared memory between ranks, so that no rank listens on a TCP port (OpenMPI's TCP
  // transport would listen on every interface). mpirun's own daemon still does; see docs/launch.md.
  if (!std::getenv("OMPI_MCA_btl")) {
    for (const char* arg : {"--mca", "btl", "self,vader"}) spec.argv.push_back(arg);
  }
  spec.argv.insert(spec.argv.end(), o_.program.begin(), o_.program.end());
  spec.set_env = {{"TORCHELASTIC_RESTART_COUNT", std::to_string(attempt_)},
                  {"TORCHELASTIC_MAX_RESTARTS", std::to_string(o_.max_restarts)},
                  {"FSDP_RUN_DIR", run_dir_.path()}};
  default_threads(o_, &spec.set_env);
  spec.unset_env = kTorchrunVars;  // they would make fsdp.cpp pick Gloo over MPI
  spec.parent_death_signal = SIGTERM;
  procs_.push_back(Proc{"mpirun", spawn(spec), demux_.get(), mpirun, "mpirun.log"});
}

bool Attempt::finished() const {
  return std::none_of(procs_.begin(), procs_.end(), [](const Proc& p) {
    return p.running || p.child.out_fd >= 0 || p.child.err_fd >= 0;
  });
}

// Until the next deadline (SIGKILL, or giving up on pipes), or forever: signals wake the poll.
int Attempt::timeout_ms() const {
  std::optional<Clock::time_point> next;
  if (kill_at_ && !killed_) next = kill_at_;
  if (drain_until_ && (!next || *drain_until_ < *next)) next = drain_until_;
  if (!next) return -1;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*next - Clock::now());
  return static_cast<int>(std::max<long>(0, left.count()) + 1);
}

Outcome Attempt::run() {
  start();
  while (!finished()) {
    pump();
    const auto now = Clock::now();
    if (kill_at_ && !killed_ && now >= *kill_at_) {
      say(running_labels() + " still running " + seconds(o_.grace_period_s) +
          " after being told to stop: sending SIGKILL");
      kill_all();
    }
    if (drain_until_ && now >= *drain_until_) close_pipes();
  }
  reap_orphans();
  if (demux_) demux_->finish();
  for (auto& sink : sinks_) sink->finish();
  if (failed_ >= 0) report_failure();
  if (interrupted_) return {Outcome::kInterrupted, 128 + interrupted_};
  if (failed_ >= 0) return {Outcome::kFailure, shell_exit_code(procs_[failed_].status)};
  return {Outcome::kSuccess, 0};
}

void Attempt::start() {
  try {
    if (o_.backend == "mpi") {
      start_mpi();
    } else {
      start_gloo(o_.master_port != 0 ? o_.master_port : pick_free_port(o_.master_addr));
    }
  } catch (...) {  // no rank may outlive a launcher that could not start them all
    kill_all();
    for (Proc& proc : procs_) waitpid(proc.child.pid, &proc.status, 0);
    throw;
  }
}

void Attempt::close_pipes() {
  for (Proc& proc : procs_) {
    for (int* fd : {&proc.child.out_fd, &proc.child.err_fd}) {
      if (*fd >= 0) close(*fd);
      *fd = -1;
    }
  }
}

// One poll over the signal pipe and every open output pipe.
void Attempt::pump() {
  std::vector<pollfd> fds = {{signals_.fd(), POLLIN, 0}};
  std::vector<std::pair<Proc*, Stream>> owners = {{nullptr, Stream::kOut}};
  for (Proc& proc : procs_) {
    if (proc.child.out_fd >= 0) {
      fds.push_back({proc.child.out_fd, POLLIN, 0});
      owners.emplace_back(&proc, Stream::kOut);
    }
    if (proc.child.err_fd >= 0) {
      fds.push_back({proc.child.err_fd, POLLIN, 0});
      owners.emplace_back(&proc, Stream::kErr);
    }
  }
  if (poll(fds.data(), fds.size(), timeout_ms()) < 0) return;  // EINTR: a signal, seen next time
  for (size_t i = 1; i < fds.size(); ++i) {
    if (fds[i].revents) read_from(*owners[i].first, owners[i].second);
  }
  if (fds[0].revents) {
    for (int sig : signals_.take()) on_signal(sig);
  }
}

// Reads what is there (a bounded amount, so that one chatty rank cannot starve the others).
void Attempt::read_from(Proc& proc, Stream stream) {
  int& fd = stream == Stream::kOut ? proc.child.out_fd : proc.child.err_fd;
  char buf[65536];
  for (int reads = 0; reads < 4; ++reads) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      proc.output->write(stream, buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    close(fd);  // end of file, or an error that will not go away
    fd = -1;
    return;
  }
}

void Attempt::on_signal(int sig) {
  if (sig == SIGCHLD) {
    reap();
    return;
  }
  if (interrupted_) {
    say("got " + signal_name(sig) + " again: killing every rank now");
    kill_all();
    return;
  }
  interrupted_ = sig;
  say("got " + signal_name(sig) + ": passing it on to every rank (SIGKILL in " +
      seconds(o_.grace_period_s) + "; " + signal_name(sig) + " again to kill now)");
  stop(sig);
}

// Reaps every child that ended: ranks, and orphans the launcher adopted as a subreaper.
void Attempt::reap() {
  int status = 0;
  for (pid_t pid; (pid = waitpid(-1, &status, WNOHANG)) > 0;) {
    for (size_t i = 0; i < procs_.size(); ++i) {
      if (procs_[i].running && procs_[i].child.pid == pid) on_exit(i, status);
    }
  }
  if (std::none_of(procs_.begin(), procs_.end(), [](const Proc& p) { return p.running; })) {
    after_last_exit();
  }
}

// The first rank to fail (unless the launcher was told to stop) stops the others.
void Attempt::on_exit(size_t i, int status) {
  Proc& proc = procs_[i];
  proc.running = false;
  proc.status = status;
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (ok || failed_ >= 0 || interrupted_) return;
  failed_ = static_cast<int>(i);
  say(proc.label + " (pid " + std::to_string(proc.child.pid) + ") failed with " +
      describe_status(status) + (procs_.size() > 1 ? "; stopping the others" : ""));
  stop(SIGTERM);
}

// Sends `sig` to every running process group and arms the SIGKILL deadline.
void Attempt::stop(int sig) {
  for (const Proc& proc : procs_) {
    if (proc.running) signal_group(proc.child.pid, sig);
  }
  if (!kill_at_) {
    kill_at_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(o_.grace_period_s));
  }
}

std::string Attempt::running_labels() const {
  std::string labels;
  for (const Proc& proc : procs_) {
    if (proc.running) labels += (labels.empty() ? "" : ", ") + proc.label;
  }
  return labels;
}

// Kills every running process group, and every other process below the launcher (mpirun's ranks
// live in process groups of their own).
void Attempt::kill_all() {
  killed_ = true;
  for (const Proc& proc : procs_) {
    if (proc.running) signal_group(proc.child.pid, SIGKILL);
  }
  for (pid_t pid : descendants(getpid())) kill(pid, SIGKILL);
}

// Every child has been reaped: whatever still runs below the launcher is an orphan (the launcher
// is a subreaper, so even daemonized ones are found). Pipes held open by something outside get a
// little time, then are closed.
void Attempt::after_last_exit() {
  if (drain_until_) return;
  for (pid_t pid : descendants(getpid())) kill(pid, SIGKILL);
  drain_until_ = Clock::now() + kDrainTime;
}

// Waits (briefly) for the orphans after_last_exit killed, so that none is left as a zombie for
// init to collect.
void Attempt::reap_orphans() {
  const auto give_up = Clock::now() + std::chrono::seconds(1);
  while (Clock::now() < give_up) {
    const pid_t pid = waitpid(-1, nullptr, WNOHANG);
    if (pid < 0) return;  // ECHILD: none left
    if (pid == 0) usleep(2000);
  }
}

void Attempt::report_failure() const {
  const Proc& proc = procs_[failed_];
  say(proc.label + " failed with " + describe_status(proc.status) + ".");
  const auto& tail = proc.sink->tail();
  if (proc.label == "mpirun") {
    const int rank = mpirun_first_failed_rank(tail);
    say((rank >= 0 ? "mpirun names rank " + std::to_string(rank) + " as the first to fail"
                   : std::string("mpirun does not say which rank failed")) +
        "; --prefix or --log-dir show every rank's output.");
  }
  if (tail.empty()) {
    say(proc.label + " printed nothing.");
  } else if (proc.sink->shown()) {
    // Already on the terminal, above: a second copy would bury the error it follows.
  } else {
    say("last " + std::to_string(tail.size()) + " lines of " + proc.label + "'s output:");
    std::string text;
    for (const std::string& line : tail) text += "[" + proc.label + "] " + line + "\n";
    write_fd(STDERR_FILENO, text);
  }
  if (!o_.log_dir.empty()) say("all of its output: " + o_.log_dir + "/" + proc.log_name);
}

void warn_about_multi_node(const Options& o) {
  if (o.nnodes > 1 && (o.master_addr == "127.0.0.1" || o.master_addr == "localhost")) {
    say("warning: --nnodes " + std::to_string(o.nnodes) + " with --master-addr " + o.master_addr +
        ": ranks on other nodes cannot reach a loopback address; pass node 0's address");
  }
}

}  // namespace

int supervise(const Options& o) {
  warn_about_multi_node(o);
  if (!o.log_dir.empty()) {
    std::error_code error;
    std::filesystem::create_directories(o.log_dir, error);
    if (error)
      throw std::runtime_error("cannot create --log-dir " + o.log_dir + ": " + error.message());
  }
  // Orphans of the ranks are re-parented to the launcher, which can then find and stop them.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  SignalPipe signals;
  for (int attempt = 0;; ++attempt) {
    const Outcome outcome = Attempt(o, attempt, signals).run();
    if (outcome.kind != Outcome::kFailure || attempt >= o.max_restarts) return outcome.exit_code;
    say("restarting (attempt " + std::to_string(attempt + 1) + " of " +
        std::to_string(o.max_restarts) + ")");
  }
}

}  // namespace launch
}  // namespace fsdp
