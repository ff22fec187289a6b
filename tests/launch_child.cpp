// launch_child: a stand-in rank for fsdp-run's tests, plain C++ without LibTorch. Its arguments
// are actions, done in order; "R:action" does the action on rank R only (RANK, or
// OMPI_COMM_WORLD_RANK under mpirun), so one command line gives each rank its part:
//   env               print the launcher's variables as NAME=value (NAME=<unset> when missing)
//   pid               print pid=<pid>
//   lines=N           print "line i of rank R" for i = 0..N-1 on stdout
//   err=TEXT          print TEXT on stderr
//   sleep=S           sleep S seconds
//   ignore-term       ignore SIGTERM from now on
//   daemon=S          start a detached grandchild (new session) that sleeps S s; print orphan=<pid>
//   exit=C            exit with code C
//   signal=NAME       kill itself with SIGNAME (KILL, TERM, SEGV...)
//   fail-until=DIR:N  count this run in DIR/count_<R>; exit 1 before the N-th run
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace {

int my_rank() {
  const char* rank = std::getenv("RANK");
  if (!rank) rank = std::getenv("OMPI_COMM_WORLD_RANK");
  return rank ? std::atoi(rank) : 0;
}

void print_env() {
  for (const char* name : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                           "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
                           "OMP_NUM_THREADS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}) {
    const char* value = std::getenv(name);
    std::printf("%s=%s\n", name, value ? value : "<unset>");
  }
}

void start_daemon(double seconds) {
  const pid_t pid = fork();
  if (pid != 0) return;
  setsid();
  std::printf("orphan=%d\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  usleep(static_cast<useconds_t>(seconds * 1e6));
  _exit(0);
}

void signal_self(const std::string& name) {
  std::fflush(stdout);
  for (int sig = 1; sig < NSIG; ++sig) {
    const char* abbrev = sigabbrev_np(sig);
    if (abbrev && name == abbrev) raise(sig);
  }
  std::fprintf(stderr, "launch_child: unknown signal %s\n", name.c_str());
  std::exit(99);
}

void fail_until(const std::string& spec, int rank) {
  const size_t colon = spec.rfind(':');
  const std::string path = spec.substr(0, colon) + "/count_" + std::to_string(rank);
  int runs = 0;
  std::ifstream(path) >> runs;
  std::ofstream(path) << ++runs;
  std::printf("run %d\n", runs);
  if (runs < std::atoi(spec.c_str() + colon + 1)) std::exit(1);
}

void act(const std::string& action, int rank) {
  const size_t eq = action.find('=');
  const std::string verb = action.substr(0, eq);
  const std::string arg = eq == std::string::npos ? "" : action.substr(eq + 1);
  if (verb == "env")
    print_env();
  else if (verb == "pid")
    std::printf("pid=%d\n", static_cast<int>(getpid()));
  else if (verb == "lines") {
    for (int i = 0; i < std::atoi(arg.c_str()); ++i) std::printf("line %d of rank %d\n", i, rank);
  } else if (verb == "err")
    std::fprintf(stderr, "%s\n", arg.c_str());
  else if (verb == "sleep")
    usleep(static_cast<useconds_t>(std::atof(arg.c_str()) * 1e6));
  else if (verb == "ignore-term")
    signal(SIGTERM, SIG_IGN);
  else if (verb == "daemon")
    start_daemon(std::atof(arg.c_str()));
  else if (verb == "exit")
    std::exit(std::atoi(arg.c_str()));
  else if (verb == "signal")
    signal_self(arg);
  else if (verb == "fail-until")
    fail_until(arg, rank);
  else {
    std::fprintf(stderr, "launch_child: unknown action %s\n", action.c_str());
    std::exit(99);
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const int rank = my_rank();
  for (int i = 1; i < argc; ++i) {
    std::string action = argv[i];
    const size_t colon = action.find(':');
    if (colon != std::string::npos && colon > 0 &&
        action.find_first_not_of("0123456789") == colon) {
      if (std::atoi(action.c_str()) != rank) continue;
      action = action.substr(colon + 1);
    }
    act(action, rank);
  }
  return 0;
}
