// Small pieces the executables share: starting a multi-rank job when a tool is run by hand.
#pragma once

#include <ATen/Parallel.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "fsdp/comm.h"

namespace fsdp {
namespace tools {

// Open MPI 5's mpirun tags a rank's output only where a line begins in what it has read so far,
// so a partial line of one rank runs on into the next rank's text under one tag: fsdp-run then
// shows rank 1's words as rank 0's, or cuts the start off rank 0's error. Each rank therefore
// writes whole lines: stdout and stderr line-buffered, std::cerr not flushed per insertion.
// Called first thing in main, before anything is written.
inline void write_whole_lines() {
  constexpr size_t kBuffer = 1 << 16;  // a longer line is still cut, at this size
  std::setvbuf(stdout, nullptr, _IOLBF, kBuffer);
  std::setvbuf(stderr, nullptr, _IOLBF, kBuffer);
  std::cerr.unsetf(std::ios_base::unitbuf);
}

// Replaces this process with `mpirun -np nproc <this executable> args...`. Used by tools that
// need several ranks when a user starts them directly (the launcher fsdp-run will supersede it).
[[noreturn]] inline void relaunch_under_mpirun(int argc, char** argv, int nproc) {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  std::vector<std::string> args = {"mpirun",
                                   "--allow-run-as-root",
                                   "--oversubscribe",
                                   "--bind-to",
                                   "none",
                                   "-np",
                                   std::to_string(nproc),
                                   n > 0 ? std::string(exe, static_cast<size_t>(n)) : argv[0]};
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  std::vector<char*> cargs;
  for (auto& s : args) cargs.push_back(s.data());
  cargs.push_back(nullptr);
  execvp("mpirun", cargs.data());
  std::perror("could not start mpirun");
  std::exit(1);
}

// The CPUs this process may run on (its affinity mask; the machine's count where that fails).
inline int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

// Joins the group this process was started in; a tool started by hand (one rank) re-launches
// itself on `nproc` ranks instead. `device` is CommOptions::device ("cuda": NCCL where it can).
// On the CPU one intra-op thread per rank: ranks share the cores for compute. On a GPU the
// node's cores are divided among its ranks, for the host work (offload's CPU optimizer).
inline CommPtr start_ranks(int argc, char** argv, int nproc, const std::string& device = "cpu") {
  CommOptions options;
  options.device = device;
  CommPtr world = init_comm(options);
  if (world->size() == 1 && nproc > 1) relaunch_under_mpirun(argc, argv, nproc);
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  at::set_num_threads(device == "cpu" ? 1 : std::max(1, cores / std::max(1, world->local_size())));
  return world;
}

// A tool's flags as one table of name, help and what a value sets, so that --help is printed from
// the same table the parser reads. Every flag takes a value.
template <class Args>
struct FlagSpec {
  const char* name;
  const char* help;
  std::function<void(Args&, const std::string&)> set;
};

// Applies argv's `--flag value` pairs; false when --help (or -h) was asked for. An unknown flag
// or a missing value throws std::invalid_argument naming it.
template <class Args>
bool parse_flag_table(int argc, char** argv, const std::vector<FlagSpec<Args>>& table, Args& a) {
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--help" || k == "-h") return false;
    auto f = std::find_if(table.begin(), table.end(),
                          [&](const FlagSpec<Args>& f) { return k == f.name; });
    if (f == table.end()) throw std::invalid_argument("unknown option " + k + " (see --help)");
    if (i + 1 >= argc) throw std::invalid_argument("missing value after " + k);
    f->set(a, argv[++i]);
  }
  return true;
}

template <class Args>
void print_flag_table(const char* usage, const std::vector<FlagSpec<Args>>& table) {
  std::printf("%s\n", usage);
  for (const auto& f : table) std::printf("  %-12s %s\n", f.name, f.help);
}

}  // namespace tools
}  // namespace fsdp
