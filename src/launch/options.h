// fsdp-run's command line: what the user asked the launcher to do. One table of flags (name,
// value placeholder, default, help, setter) feeds both the parser and `--help`, so the usage text
// cannot drift from what is accepted. Parsing does no I/O and throws UsageError, so tests call it
// directly and the tool turns the error into a message and exit code 2.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace fsdp {
namespace launch {

struct Options {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;  // 0: pick a free port (single node only)
  std::string backend = "gloo";
  std::string log_dir;  // empty: no log files
  // torchrun's --tee: bit 1 shows every rank's stdout on the terminal, bit 2 every rank's stderr,
  // each line prefixed with "[rank R] ". 0: only the first local rank, unprefixed.
  int tee = 0;
  int max_restarts = 0;
  double grace_period_s = 5;  // between SIGTERM and SIGKILL when stopping ranks
  bool help = false;
  std::vector<std::string> program;  // the program to run and its arguments

  int world_size() const { return nnodes * nproc_per_node; }
  int global_rank(int local_rank) const { return node_rank * nproc_per_node + local_rank; }
};

// A bad command line. The message names the flag and what is wrong with it.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses the arguments after argv[0]. Flags come first; the first argument that is not a flag
// (or everything after "--") is the program and its arguments. "--flag=value" and torchrun's
// underscore spellings (--nproc_per_node) are accepted.
Options parse_options(const std::vector<std::string>& args);

// The text `fsdp-run --help` prints, generated from the flag table.
std::string usage_text();

}  // namespace launch
}  // namespace fsdp
