// Tests for fsdp-run. The parser is called directly; everything else drives the real fsdp-run
// binary (fork/exec, its stdout and stderr captured) with launch_child as the ranks, and checks
// what a user would see: environment, terminal output, log files, failure reports, restarts,
// signals and the absence of orphans. The last test trains fsdp-demo under the launcher.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "launch/options.h"
#include "launch/output.h"
#include "util/number_flag.h"

namespace {

using Clock = std::chrono::steady_clock;
using Strings = std::vector<std::string>;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// fsdp-run started with `args`, its stdout and stderr read into strings.
class Launcher {
 public:
  explicit Launcher(const Strings& args) {
    int out[2], err[2];
    if (pipe(out) != 0 || pipe(err) != 0) std::abort();
    start_ = Clock::now();
    pid_ = fork();
    if (pid_ == 0) {
      signal(SIGINT, SIG_DFL);  // a test run in the background inherits it ignored
      dup2(out[1], 1);
      dup2(err[1], 2);
      std::vector<char*> argv = {const_cast<char*>(FSDP_RUN_EXE)};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(FSDP_RUN_EXE, argv.data());
      _exit(126);
    }
    close(out[1]);
    close(err[1]);
    fds_[0] = out[0];
    fds_[1] = err[0];
  }
  ~Launcher() {
    if (!exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status_, 0);
    }
    for (int fd : fds_) {
      if (fd >= 0) close(fd);
    }
  }

  pid_t pid() const { return pid_; }
  const std::string& out() const { return text_[0]; }
  const std::string& err() const { return text_[1]; }
  std::string all() const { return text_[0] + text_[1]; }
  double seconds() const { return seconds_; }
  int status() const { return status_; }

  // Reads output until `done()` holds or `timeout_s` passes; false on timeout or end of output.
  bool read_until(const std::function<bool()>& done, double timeout_s) {
    const auto start = Clock::now();
    while (!done()) {
      if (seconds_since(start) > timeout_s || !read_once(100)) return done();
    }
    return true;
  }

  // Reads everything and reaps fsdp-run; SIGKILLs it (and fails) after `timeout_s`.
  void finish(double timeout_s = 20) {
    const auto start = Clock::now();
    while (fds_[0] >= 0 || fds_[1] >= 0) {
      if (seconds_since(start) > timeout_s) {
        ADD_FAILURE() << "fsdp-run still running after " << timeout_s << " s\n" << all();
        kill(pid_, SIGKILL);
        timeout_s = 1e9;
      }
      read_once(100);
    }
    waitpid(pid_, &status_, 0);
    seconds_ = seconds_since(start_);
    exited_ = true;
  }

  int exit_code() const { return WIFEXITED(status_) ? WEXITSTATUS(status_) : -WTERMSIG(status_); }

 private:
  // One poll and read; false when both streams have ended.
  bool read_once(int timeout_ms) {
    pollfd p[2];
    nfds_t n = 0;
    int which[2];
    for (int i = 0; i < 2; ++i) {
      if (fds_[i] >= 0) {
        p[n] = {fds_[i], POLLIN, 0};
        which[n++] = i;
      }
    }
    if (n == 0) return false;
    if (poll(p, n, timeout_ms) <= 0) return true;
    for (nfds_t k = 0; k < n; ++k) {
      if (!p[k].revents) continue;
      char buf[4096];
      const ssize_t got = read(p[k].fd, buf, sizeof(buf));
      if (got > 0) {
        text_[which[k]].append(buf, static_cast<size_t>(got));
      } else {
        close(fds_[which[k]]);
        fds_[which[k]] = -1;
      }
    }
    return true;
  }

  pid_t pid_ = -1;
  int fds_[2] = {-1, -1};
  std::string text_[2];
  Clock::time_point start_;
  double seconds_ = 0;
  int status_ = 0;
  bool exited_ = false;
};

// fsdp-run FLAGS launch_child ACTIONS, run to the end.
std::unique_ptr<Launcher> run(Strings flags, const Strings& actions, double timeout_s = 20) {
  flags.push_back(LAUNCH_CHILD_EXE);
  flags.insert(flags.end(), actions.begin(), actions.end());
  auto launcher = std::make_unique<Launcher>(flags);
  launcher->finish(timeout_s);
  return launcher;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t p = text.find(part); p != std::string::npos; p = text.find(part, p + 1)) ++n;
  return n;
}

// The numbers after "name=" in `text`, in order.
std::vector<pid_t> pids_after(const std::string& text, const std::string& name) {
  std::vector<pid_t> pids;
  const std::regex re(name + "=([0-9]+)");
  for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it) {
    pids.push_back(static_cast<pid_t>(std::stoi((*it)[1])));
  }
  return pids;
}

// Running (a zombie waiting for a parent that does not reap counts as gone).
bool alive(pid_t pid) {
  if (kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && line.size() > paren + 2 && line[paren + 2] != 'Z';
}

// True when none of `pids` runs, waiting up to `timeout_s` for them to go.
bool all_gone(const std::vector<pid_t>& pids, double timeout_s) {
  const auto start = Clock::now();
  for (;;) {
    bool any = false;
    for (pid_t pid : pids) any = any || alive(pid);
    if (!any) return true;
    if (seconds_since(start) > timeout_s) return false;
    usleep(20000);
  }
}

// A fresh directory under /tmp, removed with everything in it when the test ends.
class TempDir {
 public:
  TempDir() {
    char name[] = "/tmp/fsdp_launch_test_XXXXXX";
    if (!mkdtemp(name)) std::abort();
    path_ = name;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// ---- the command line ----

using fsdp::launch::Options;
using fsdp::launch::parse_options;
using fsdp::launch::UsageError;

TEST(LaunchOptions, TorchrunSpellingsAndProgramArgs) {
  const Options o =
      parse_options({"--nproc_per_node", "4", "--nnodes=2", "--node_rank", "1", "--master_addr",
                     "10.0.0.1", "--master_port=1234", "--max_restarts", "3", "--log_dir", "/tmp/x",
                     "--tee", "1", "prog", "--nnodes", "9"});
  EXPECT_EQ(o.nproc_per_node, 4);
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(o.master_addr, "10.0.0.1");
  EXPECT_EQ(o.master_port, 1234);
  EXPECT_EQ(o.max_restarts, 3);
  EXPECT_EQ(o.log_dir, "/tmp/x");
  EXPECT_EQ(o.tee, 1);
  EXPECT_EQ(o.program, (Strings{"prog", "--nnodes", "9"}));  // the program's flags are its own
  EXPECT_EQ(o.global_rank(2), 6);
  EXPECT_EQ(o.world_size(), 8);
}

TEST(LaunchOptions, DefaultsSwitchesAndDoubleDash) {
  const Options o = parse_options({"--prefix", "--standalone", "--", "-x"});
  EXPECT_EQ(o.nproc_per_node, 1);
  EXPECT_EQ(o.master_addr, "127.0.0.1");
  EXPECT_EQ(o.master_port, 0);
  EXPECT_EQ(o.backend, "gloo");
  EXPECT_EQ(o.tee, 3);
  EXPECT_EQ(o.program, Strings{"-x"});
  EXPECT_EQ(parse_options({"x"}).master_port, 29500);
  EXPECT_TRUE(parse_options({"--help"}).help);
}

std::string usage_error(const Strings& args) {
  try {
    parse_options(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

// The parser every tool's numeric flags share (util/number_flag.h): the whole text is the number,
// the range is the flag's, and the error names the flag.
TEST(NumberFlag, WholeTextInRangeOrAnErrorNamingTheFlag) {
  using fsdp::flags::NumberError;
  using fsdp::flags::parse_int;
  using fsdp::flags::parse_number;
  EXPECT_EQ(parse_int("--n", "42", 1, 100), 42);
  EXPECT_EQ(parse_int("--n", "-3", -5, 5), -3);
  auto int_error = [](const std::string& text) {
    try {
      parse_int("--world-size", text, 1, 65536);
    } catch (const NumberError& e) {
      EXPECT_EQ(e.flag(), "--world-size");
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(int_error("3abc"), "--world-size: '3abc' is not an integer");
  EXPECT_EQ(int_error("99999999999"), "--world-size: 99999999999 is out of range [1, 65536]");
  EXPECT_EQ(int_error("99999999999999999999"),
            "--world-size: 99999999999999999999 is out of range [1, 65536]");
  for (const char* bad : {"", " 3", "3 ", "0x10", "1e3", "+", "-", "3.0"}) {
    EXPECT_EQ(int_error(bad), std::string("--world-size: '") + bad + "' is not an integer");
  }
  EXPECT_EQ(parse_number("--t", "0.5", 0, 1), 0.5);
  EXPECT_EQ(parse_number("--t", "1e-3", 0, 1), 1e-3);
  for (const char* bad : {"", "hot", "1.5s", "0x1p3", "nan", "inf", " 1"}) {
    EXPECT_THROW(parse_number("--t", bad, 0, 10), NumberError) << bad;
  }
  EXPECT_THROW(parse_number("--t", "11", 0, 10), NumberError);
  EXPECT_THROW(parse_number("--t", "1e999", 0, 10), NumberError);
}

TEST(LaunchOptions, ErrorsNameTheFlag) {
  EXPECT_EQ(usage_error({"--nproc-per-node", "3abc", "x"}),
            "--nproc-per-node: '3abc' is not an integer");
  EXPECT_EQ(usage_error({"--max-restarts", "99999999999", "x"}),
            "--max-restarts: 99999999999 is out of range [0, 1000000]");
  EXPECT_EQ(usage_error({"--bogus", "x"}), "unknown flag --bogus");
  EXPECT_EQ(usage_error({"--nnodes"}), "--nnodes needs a value (M)");
  EXPECT_EQ(usage_error({"--nproc_per_node", "two", "x"}),
            "--nproc_per_node: 'two' is not an integer");
  EXPECT_TRUE(contains(usage_error({"--nproc-per-node", "0", "x"}), "out of range"));
  EXPECT_TRUE(contains(usage_error({"--backend", "nccl", "x"}), "--backend"));
  EXPECT_TRUE(contains(usage_error({"--prefix=1", "x"}), "--prefix takes no value"));
  EXPECT_TRUE(contains(usage_error({"--nnodes", "2", "--node-rank", "2", "x"}), "--node-rank"));
  EXPECT_TRUE(contains(usage_error({"--nnodes", "2", "--master-port", "0", "x"}), "--master-port"));
  EXPECT_TRUE(contains(usage_error({"--nnodes", "2", "--backend", "mpi", "x"}), "hostfile"));
  EXPECT_TRUE(contains(usage_error({"--grace-period", "-1", "x"}), "--grace-period"));
  EXPECT_TRUE(contains(usage_error({"--nnodes", "1"}), "no program"));
}

TEST(LaunchOptions, HelpListsEveryFlag) {
  const std::string usage = fsdp::launch::usage_text();
  for (const char* flag : {"--nproc-per-node", "--nnodes", "--node-rank", "--master-addr",
                           "--master-port", "--backend", "--log-dir", "--prefix", "--tee",
                           "--max-restarts", "--grace-period", "(default 29500)"}) {
    EXPECT_TRUE(contains(usage, flag)) << flag;
  }
  for (std::istringstream lines(usage); lines;) {
    std::string line;
    std::getline(lines, line);
    EXPECT_LE(line.size(), 100u) << line;
  }
}

// ---- output routing ----

using fsdp::launch::mpi_tag_style;
using fsdp::launch::MpiDemux;
using fsdp::launch::mpirun_first_failed_rank;
using fsdp::launch::MpiTagStyle;
using fsdp::launch::OutputSink;
using fsdp::launch::SinkOptions;
using fsdp::launch::Stream;

Strings tail_of(const OutputSink& sink) { return Strings(sink.tail().begin(), sink.tail().end()); }

TEST(LaunchOutput, SinkKeepsTheLastLinesOfBothStreams) {
  SinkOptions options;
  options.tail_lines = 3;
  OutputSink sink(options);  // shows nothing, logs nothing
  const std::string out = "a\nb\nc", err = "x\n";
  sink.write(Stream::kOut, out.data(), out.size());
  sink.write(Stream::kErr, err.data(), err.size());
  EXPECT_EQ(tail_of(sink), (Strings{"a", "b", "x"}));
  sink.finish();  // the unterminated "c" completes
  EXPECT_EQ(tail_of(sink), (Strings{"b", "x", "c"}));
}

TEST(LaunchOutput, MpiDemuxJoinsPartialLinesPerRank) {
  OutputSink rank0{SinkOptions()}, rank1{SinkOptions()}, mpirun{SinkOptions()};
  MpiDemux demux({&rank0, &rank1}, &mpirun, MpiTagStyle::kOpenMpi4);
  // What mpirun --tag-output wrote for two ranks that print "abc", pause, then "def\n".
  const std::string text =
      "[1,0]<stdout>:abc[1,1]<stdout>:abc[1,0]<stdout>:def\n[1,1]<std"
      "out>:def\n----\nmpirun says\n[1,1]<stderr>:oops\n[1,0]<stdout>:last";
  demux.write(Stream::kOut, text.data(), 40);  // a tag cut in two by the read
  demux.write(Stream::kOut, text.data() + 40, text.size() - 40);
  demux.finish();
  EXPECT_EQ(tail_of(rank0), (Strings{"abcdef", "last"}));
  EXPECT_EQ(tail_of(rank1), (Strings{"abcdef", "oops"}));
  EXPECT_EQ(tail_of(mpirun), (Strings{"----", "mpirun says"}));
}

// Open MPI 5 (PRRTE) puts a space after every tag, partial lines included; a rank's own leading
// space survives.
TEST(LaunchOutput, MpiDemuxReadsOpenMpi5Tags) {
  OutputSink rank0{SinkOptions()}, rank1{SinkOptions()}, mpirun{SinkOptions()};
  MpiDemux demux({&rank0, &rank1}, &mpirun, MpiTagStyle::kOpenMpi5);
  const std::string text =
      "[1,0]<stdout>: abc[1,1]<stdout>:  indented\n[1,0]<stdout>: def\nprterun says\n";
  demux.write(Stream::kOut, text.data(), text.size());
  demux.finish();
  EXPECT_EQ(tail_of(rank0), (Strings{"abcdef"}));
  EXPECT_EQ(tail_of(rank1), (Strings{" indented"}));
  EXPECT_EQ(tail_of(mpirun), (Strings{"prterun says"}));
}

TEST(LaunchOutput, TagStyleFollowsTheOpenMpiVersion) {
  EXPECT_EQ(mpi_tag_style("mpirun (Open MPI) 4.1.4\n\nReport bugs to ..."), MpiTagStyle::kOpenMpi4);
  // The first failed rank from mpirun's report, in both versions' spellings.
  EXPECT_EQ(mpirun_first_failed_rank({"mpirun detected that one or more processes exited",
                                      "  Process name: [[17708,1],3]", "  Exit code:    1"}),
            3);
  EXPECT_EQ(mpirun_first_failed_rank({"   Process name: [prterun-vm-7712@1,12]"}), 12);
  EXPECT_EQ(mpirun_first_failed_rank({"no report", "Exit code: 1"}), -1);
  EXPECT_EQ(mpi_tag_style("mpirun (Open MPI) 5.0.7\n"), MpiTagStyle::kOpenMpi5);
  EXPECT_EQ(mpi_tag_style("mpirun (Open MPI) 10.0.0"), MpiTagStyle::kOpenMpi5);
  EXPECT_EQ(mpi_tag_style(""), MpiTagStyle::kOpenMpi4);  // no mpirun: fsdp-run reports that itself
}

// ---- the binary ----

TEST(Launch, BadFlagsExit2NamingTheFlag) {
  for (const Strings& args : {Strings{"--nproc-per-node", "x", "true"}, Strings{"--frobnicate"},
                              Strings{"--max-restarts"}, Strings{}}) {
    Launcher launcher(args);
    launcher.finish();
    EXPECT_EQ(launcher.exit_code(), 2) << launcher.err();
    EXPECT_TRUE(contains(launcher.err(), args.empty() ? "no program" : args[0])) << launcher.err();
    EXPECT_TRUE(contains(launcher.err(), "--help")) << launcher.err();
  }
  Launcher help({"--help"});
  help.finish();
  EXPECT_EQ(help.exit_code(), 0);
  EXPECT_TRUE(contains(help.out(), "--nproc-per-node N"));
}

TEST(Launch, SetsTorchrunVariablesForEachRank) {
  auto l = run({"--nproc-per-node", "3", "--prefix"}, {"env"});
  ASSERT_EQ(l->exit_code(), 0) << l->all();
  for (int r = 0; r < 3; ++r) {
    const std::string p = "[rank " + std::to_string(r) + "] ";
    for (const std::string& var :
         {"RANK=" + std::to_string(r), "LOCAL_RANK=" + std::to_string(r),
          std::string("WORLD_SIZE=3"), std::string("LOCAL_WORLD_SIZE=3"),
          std::string("GROUP_RANK=0"), std::string("MASTER_ADDR=127.0.0.1"),
          std::string("MASTER_PORT=29500"), std::string("TORCHELASTIC_RESTART_COUNT=0"),
          std::string("OMPI_COMM_WORLD_SIZE=<unset>")}) {
      EXPECT_TRUE(contains(l->out(), p + var + "\n")) << p + var << "\n" << l->out();
    }
  }
}

TEST(Launch, SecondNodeOffsetsRanks) {
  auto l = run({"--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "2", "--master-addr",
                "10.1.2.3", "--master-port", "1234", "--prefix"},
               {"env"});
  ASSERT_EQ(l->exit_code(), 0) << l->all();
  for (int local = 0; local < 2; ++local) {
    const std::string p = "[rank " + std::to_string(2 + local) + "] ";
    for (const std::string& var :
         {"RANK=" + std::to_string(2 + local), "LOCAL_RANK=" + std::to_string(local),
          std::string("WORLD_SIZE=4"), std::string("LOCAL_WORLD_SIZE=2"),
          std::string("GROUP_RANK=1"), std::string("MASTER_ADDR=10.1.2.3"),
          std::string("MASTER_PORT=1234")}) {
      EXPECT_TRUE(contains(l->out(), p + var + "\n")) << p + var << "\n" << l->out();
    }
  }
  EXPECT_FALSE(contains(l->out(), "[rank 0]"));
}

TEST(Launch, TerminalShowsRankZeroByDefault) {
  auto l = run({"--nproc-per-node", "3"}, {"lines=2", "err=complaint"});
  ASSERT_EQ(l->exit_code(), 0) << l->all();
  EXPECT_EQ(l->out(), "line 0 of rank 0\nline 1 of rank 0\n");
  EXPECT_EQ(l->err(), "complaint\n");
}

TEST(Launch, PrefixShowsEveryRank) {
  auto l = run({"--nproc-per-node", "3", "--prefix"}, {"lines=2", "err=complaint"});
  ASSERT_EQ(l->exit_code(), 0) << l->all();
  for (int r = 0; r < 3; ++r) {
    const std::string p = "[rank " + std::to_string(r) + "] ";
    EXPECT_TRUE(contains(l->out(), p + "line 1 of rank " + std::to_string(r) + "\n")) << l->out();
    EXPECT_TRUE(contains(l->err(), p + "complaint\n")) << l->err();
  }
  auto tee1 = run({"--nproc-per-node", "2", "--tee", "1"}, {"lines=1", "err=complaint"});
  EXPECT_TRUE(contains(tee1->out(), "[rank 1] line 0 of rank 1\n")) << tee1->out();
  EXPECT_EQ(tee1->err(), "complaint\n");  // stderr: rank 0's only, unprefixed
}

TEST(Launch, LogDirHoldsEveryRanksOutput) {
  const TempDir tmp;
  const std::string dir = tmp.path() + "/logs";  // created by fsdp-run
  auto l = run({"--nproc-per-node", "3", "--log-dir", dir}, {"lines=3", "err=to stderr"});
  ASSERT_EQ(l->exit_code(), 0) << l->all();
  for (int r = 0; r < 3; ++r) {
    const std::string log = read_file(dir + "/rank_" + std::to_string(r) + ".log");
    EXPECT_TRUE(contains(log, "line 0 of rank " + std::to_string(r) + "\n")) << log;
    EXPECT_TRUE(contains(log, "line 2 of rank " + std::to_string(r) + "\n")) << log;
    EXPECT_TRUE(contains(log, "to stderr\n")) << log;
  }
  EXPECT_FALSE(contains(l->out(), "of rank 1"));
}

TEST(Launch, FailingRankStopsTheOthersAndShowsItsTail) {
  auto l = run({"--nproc-per-node", "3"}, {"1:lines=30", "1:exit=3", "sleep=60"});
  std::printf("rank 1 exited 3: fsdp-run exited after %.2f s\n", l->seconds());
  EXPECT_EQ(l->exit_code(), 3);
  EXPECT_LT(l->seconds(), 5.0);
  EXPECT_TRUE(contains(l->err(), "rank 1 failed with exit code 3")) << l->err();
  EXPECT_TRUE(contains(l->err(), "[rank 1] line 29 of rank 1\n")) << l->err();
  EXPECT_TRUE(contains(l->err(), "[rank 1] line 10 of rank 1\n")) << l->err();
  EXPECT_FALSE(contains(l->err(), "line 9 of rank 1\n")) << "the tail is 20 lines\n" << l->err();
}

TEST(Launch, RankKilledBySignalIsNamed) {
  auto l = run({"--nproc-per-node", "3"}, {"2:err=about to die", "2:signal=KILL", "sleep=60"});
  std::printf("rank 2 got SIGKILL: fsdp-run exited after %.2f s\n", l->seconds());
  EXPECT_EQ(l->exit_code(), 128 + SIGKILL);
  EXPECT_LT(l->seconds(), 5.0);
  EXPECT_TRUE(contains(l->err(), "rank 2 failed with signal SIGKILL")) << l->err();
  EXPECT_TRUE(contains(l->err(), "[rank 2] about to die\n")) << l->err();
}

TEST(Launch, MissingProgramIsAFailedRank) {
  Launcher l({"--nproc-per-node", "2", "/nonexistent/program"});
  l.finish();
  EXPECT_EQ(l.exit_code(), 127);
  EXPECT_TRUE(contains(l.err(), "cannot run /nonexistent/program")) << l.err();
}

TEST(Launch, RestartsTheGroupUntilItSucceeds) {
  const TempDir tmp, tmp2;
  const std::string dir = tmp.path();
  // Rank 0 fails twice (it counts its runs in a file); rank 1 always succeeds.
  auto l = run({"--nproc-per-node", "2", "--max-restarts", "2"}, {"0:fail-until=" + dir + ":3"});
  EXPECT_EQ(l->exit_code(), 0) << l->all();
  EXPECT_EQ(count(l->err(), "restarting (attempt"), 2u) << l->err();
  EXPECT_TRUE(contains(l->err(), "restarting (attempt 2 of 2)")) << l->err();
  EXPECT_EQ(read_file(dir + "/count_0"), "3");

  auto not_enough =
      run({"--nproc-per-node", "2", "--max-restarts", "1"}, {"0:fail-until=" + tmp2.path() + ":3"});
  EXPECT_EQ(not_enough->exit_code(), 1);
  EXPECT_EQ(count(not_enough->err(), "restarting (attempt"), 1u) << not_enough->err();
}

// SIGTERM and SIGINT (Ctrl-C) to fsdp-run reach every rank; the ranks and the detached processes
// they started are all gone when it exits.
TEST(Launch, SignalsReachEveryRankAndLeaveNoOrphans) {
  for (int sig : {SIGTERM, SIGINT}) {
    const std::string name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
    Launcher l(
        {"--nproc-per-node", "3", "--prefix", LAUNCH_CHILD_EXE, "pid", "daemon=60", "sleep=60"});
    ASSERT_TRUE(l.read_until([&] { return pids_after(l.out(), "orphan").size() == 3; }, 10))
        << l.all();
    const auto stopped = Clock::now();
    kill(l.pid(), sig);
    l.finish();
    std::printf("%s to fsdp-run: it exited after %.2f s\n", name.c_str(), seconds_since(stopped));
    EXPECT_EQ(l.exit_code(), 128 + sig);
    EXPECT_TRUE(contains(l.err(), "got " + name)) << l.err();
    std::vector<pid_t> pids = pids_after(l.out(), "pid");
    const std::vector<pid_t> orphans = pids_after(l.out(), "orphan");
    ASSERT_EQ(pids.size(), 3u);
    pids.insert(pids.end(), orphans.begin(), orphans.end());
    EXPECT_TRUE(all_gone(pids, 0.5)) << name;
  }
}

TEST(Launch, RanksIgnoringSigtermAreKilled) {
  Launcher l({"--nproc-per-node", "2", "--prefix", "--grace-period", "1", LAUNCH_CHILD_EXE,
              "ignore-term", "pid", "sleep=60"});
  ASSERT_TRUE(l.read_until([&] { return pids_after(l.out(), "pid").size() == 2; }, 10));
  const auto stopped = Clock::now();
  kill(l.pid(), SIGTERM);
  l.finish();
  const double took = seconds_since(stopped);
  std::printf("SIGTERM ignored by the ranks: fsdp-run exited after %.2f s\n", took);
  EXPECT_GE(took, 0.9);
  EXPECT_LT(took, 4.0);
  EXPECT_TRUE(contains(l.err(), "sending SIGKILL")) << l.err();
  EXPECT_TRUE(all_gone(pids_after(l.out(), "pid"), 0.5));
}

TEST(Launch, RanksDieWithAKilledLauncher) {
  Launcher l({"--nproc-per-node", "2", "--prefix", LAUNCH_CHILD_EXE, "pid", "sleep=60"});
  ASSERT_TRUE(l.read_until([&] { return pids_after(l.out(), "pid").size() == 2; }, 10));
  kill(l.pid(), SIGKILL);
  l.finish();
  EXPECT_TRUE(all_gone(pids_after(l.out(), "pid"), 2.0));
}

TEST(Launch, MpiBackendGivesOpenMpiVariables) {
  if (system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun";
  // Rank 1 fails a second after rank 0 is done: Open MPI 5 ends the job on the first failure and
  // may drop output a rank has not yet had forwarded.
  auto l = run({"--backend", "mpi", "--nproc-per-node", "2", "--prefix"},
               {"env", "1:sleep=1", "1:exit=5"});
  EXPECT_EQ(l->exit_code(), 5) << l->all();
  for (int r = 0; r < 2; ++r) {
    const std::string p = "[rank " + std::to_string(r) + "] ";
    EXPECT_TRUE(contains(l->out(), p + "OMPI_COMM_WORLD_SIZE=2\n")) << l->all();
    EXPECT_TRUE(contains(l->out(), p + "OMPI_COMM_WORLD_RANK=" + std::to_string(r) + "\n"));
    EXPECT_TRUE(contains(l->out(), p + "RANK=<unset>\n")) << "RANK would select Gloo";
  }
  EXPECT_TRUE(contains(l->err(), "mpirun failed with exit code 5")) << l->err();
  // mpirun's report (Open MPI 4 prints one here, 5 not always) is on the terminal once; fsdp-run
  // names the rank it gives.
  EXPECT_EQ(contains(l->err(), "Process name:"),
            contains(l->err(), "mpirun names rank 1 as the first to fail"))
      << l->err();
  EXPECT_FALSE(contains(l->err(), "lines of mpirun's output")) << l->err();

  auto ok = run({"--backend", "mpi", "--nproc-per-node", "2"}, {"lines=1"});
  EXPECT_EQ(ok->exit_code(), 0) << ok->all();
  EXPECT_EQ(ok->out(), "line 0 of rank 0\n");
}

// A real fsdp.cpp program: Gloo rendezvous from the launcher's variables, 5 training steps.
TEST(LaunchEndToEnd, FsdpDemoTrainsUnderGloo) {
  if (std::string(FSDP_MISSING_GLOO) != "") GTEST_SKIP() << FSDP_MISSING_GLOO;
#ifdef FSDP_DEMO_EXE
  Launcher l({"--nproc-per-node", "2", "--master-port", "0", FSDP_DEMO_EXE, "--steps", "5",
              "--nproc", "1"});
  l.finish(120);
  std::printf("fsdp-demo, 2 ranks, 5 steps: %.1f s\n", l.seconds());
  EXPECT_EQ(l.exit_code(), 0) << l.all();
  EXPECT_TRUE(contains(l.out(), "on 2 ranks (gloo)")) << l.all();
#else
  GTEST_SKIP() << "fsdp-demo is not built";
#endif
}

}  // namespace
