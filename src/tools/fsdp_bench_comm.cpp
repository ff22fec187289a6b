// fsdp-bench-comm: the three collectives FSDP runs, timed alone through fsdp's Comm on whatever
// group the environment describes (fsdp-run's, mpirun's, or bench/netem.sh's emulated hosts with
// `--comm`): an all-gather into, a reduce-scatter of, and an all-reduce of a buffer
// of N fp32 elements (each rank's shard is N / world). Each repeat runs the three in turn, each
// after a barrier so that it starts on every rank together; rank 0 prints each one's median, least
// and most milliseconds and, given the link's rate, the time a ring's bytes need on it (what the
// time model prices, docs/plan.md) and the share of that rate the collective got.
// --in-flight K issues K of a collective (on K buffers) before waiting on the first, as FSDP's
// prefetch has gathers overlap, and --busy-ms M keeps the issuing thread computing for M ms
// before it waits, as a block's forward does: what a backend moves while nobody waits on it, on
// cores its ranks' compute also wants. Times are then of all K together.
//
//   fsdp-run --nproc-per-node 2 build/bin/fsdp-bench-comm [--elements 4194304] [--repeats 12]
//                                                        [--warmup 1] [--link-gbit G]
//                                                        [--in-flight 1] [--busy-ms 0]
//
// A collective's speed on a shaped link is what decides the time model's error below the grid's
// links (docs/plan.md, "Where it is wrong"): this is how that was measured.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "fsdp/comm.h"
#include "tools/tool_util.h"
#include "util/number_flag.h"

namespace {

struct Args {
  int64_t elements = int64_t{1} << 22;  // 16 MB of fp32
  int repeats = 12;
  int warmup = 1;
  double link_gbit = 0;  // 0: not given, no share printed
  int in_flight = 1;
  double busy_ms = 0;
};

using Flag = fsdp::tools::FlagSpec<Args>;

constexpr int64_t kMaxElements = int64_t{1} << 32, kMaxRepeats = 100000;

const std::vector<Flag>& flags() {
  static const std::vector<Flag> table = {
      {"--elements",
       "fp32 elements in the whole buffer, a multiple of the world size (default 4194304)",
       [](Args& a, const std::string& v) {
         a.elements = fsdp::flags::parse_int("--elements", v, 1, kMaxElements);
       }},
      {"--repeats", "timed repeats of the three; medians are reported (default 12)",
       [](Args& a, const std::string& v) {
         a.repeats = static_cast<int>(fsdp::flags::parse_int("--repeats", v, 1, kMaxRepeats));
       }},
      {"--warmup", "untimed repeats first (default 1)",
       [](Args& a, const std::string& v) {
         a.warmup = static_cast<int>(fsdp::flags::parse_int("--warmup", v, 0, kMaxRepeats));
       }},
      {"--link-gbit",
       "each rank's link in Gbit/s each way, for the share of it each got (default: none)",
       [](Args& a, const std::string& v) {
         a.link_gbit = fsdp::flags::parse_number("--link-gbit", v, 1e-6, 1e6);
       }},
      {"--in-flight", "collectives of a kind issued before the first is waited on (default 1)",
       [](Args& a, const std::string& v) {
         a.in_flight = static_cast<int>(fsdp::flags::parse_int("--in-flight", v, 1, 64));
       }},
      {"--busy-ms",
       "milliseconds the issuing thread computes before it waits (default 0: waits at once)",
       [](Args& a, const std::string& v) {
         a.busy_ms = fsdp::flags::parse_number("--busy-ms", v, 0, 1e6);
       }},
  };
  return table;
}

struct Collective {
  const char* name;
  double ring_passes;  // a ring moves (g - 1) / g of the buffer this many times each way
  std::function<fsdp::WorkPtr(int k)> issue;  // on the k-th set of buffers
  std::vector<double> ms;
};

void report(const Collective& c, const Args& a, int world) {
  std::vector<double> ms = c.ms;
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2];
  std::printf("%-15s median %8.2f ms  least %8.2f  most %8.2f", c.name, median, ms.front(),
              ms.back());
  if (a.link_gbit > 0) {
    const double bytes =
        a.in_flight * c.ring_passes * (world - 1) / world * static_cast<double>(a.elements) * 4;
    const double link_ms = bytes * 8 / (a.link_gbit * 1e9) * 1e3;
    std::printf("  ring on the link %8.2f ms  got %3.0f%% of it", link_ms,
                100 * link_ms / std::max(median, a.busy_ms));
  }
  std::printf("\n");
}

// Arithmetic the optimiser cannot drop, for about `ms` milliseconds on this thread.
void compute_for(double ms) {
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(ms);
  volatile double x = 1;
  while (std::chrono::steady_clock::now() < until) {
    for (int i = 0; i < 10000; ++i) x = x * 1.0000001 + 1e-9;
  }
}

int run(int argc, char** argv, const Args& a) {
  fsdp::CommPtr world = fsdp::tools::start_ranks(argc, argv, 2);
  const int g = world->size();
  if (a.elements % g != 0) {
    throw std::invalid_argument("--elements " + std::to_string(a.elements) +
                                " is not a multiple of the world size " + std::to_string(g));
  }
  const size_t n = static_cast<size_t>(a.elements), shard = n / static_cast<size_t>(g);
  // Allocated and touched once: fresh pages would be timed otherwise.
  std::vector<std::vector<float>> whole(a.in_flight, std::vector<float>(n, 1.0f));
  std::vector<std::vector<float>> part(
      a.in_flight, std::vector<float>(shard, static_cast<float>(world->rank() + 1)));
  const fsdp::DType f32 = fsdp::DType::kFloat32;
  std::vector<Collective> collectives = {
      {"all_gather",
       1,
       [&](int k) { return world->all_gather_async(part[k].data(), whole[k].data(), shard, f32); },
       {}},
      {"reduce_scatter",
       1,
       [&](int k) {
         return world->reduce_scatter_async(whole[k].data(), part[k].data(), shard, f32,
                                            fsdp::ReduceOp::kSum);
       },
       {}},
      {"all_reduce",
       2,
       [&](int k) {
         return world->all_reduce_async(whole[k].data(), n, f32, fsdp::ReduceOp::kAvg);
       },
       {}},
  };
  std::vector<fsdp::WorkPtr> works(a.in_flight);
  for (int i = 0; i < a.warmup + a.repeats; ++i) {
    for (auto& c : collectives) {
      world->barrier();
      const auto t0 = std::chrono::steady_clock::now();
      for (int k = 0; k < a.in_flight; ++k) works[k] = c.issue(k);
      if (a.busy_ms > 0) compute_for(a.busy_ms);
      for (auto& w : works) w->wait();
      const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - t0;
      if (i >= a.warmup) c.ms.push_back(took.count());
    }
  }
  if (world->rank() == 0) {
    std::printf(
        "fsdp-bench-comm: %s, %d ranks, %lld fp32 elements (%.1f MB), %d repeats, "
        "%d in flight, %.0f ms busy\n",
        world->backend().c_str(), g, static_cast<long long>(a.elements), n * 4 / 1e6, a.repeats,
        a.in_flight, a.busy_ms);
    for (const auto& c : collectives) report(c, a, g);
  }
  world->barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  fsdp::tools::write_whole_lines();
  Args a;
  try {  // bad arguments exit 2 before any rank starts, as the other tools' do
    if (!fsdp::tools::parse_flag_table(argc, argv, flags(), a)) {
      fsdp::tools::print_flag_table(
          "usage: fsdp-bench-comm [options]  (under fsdp-run, mpirun or bench/netem.sh)", flags());
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-bench-comm: %s\n", e.what());
    return 2;
  }
  try {
    return run(argc, argv, a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-bench-comm: %s\n", e.what());
    return 1;
  }
}
