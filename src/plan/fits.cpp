// The host-memory check before a run builds its model (fsdp/plan/fits.h): the host's limit read
// from /proc/meminfo and the memory cgroup, and the plan held against it, cheapest bound first.
#include "fsdp/plan/fits.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "factory/model_factory.h"
#include "fsdp/plan/plan.h"

namespace fsdp {
namespace {

int64_t mem_total_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  while (f >> key >> kib) {
    if (key == "MemTotal:") return kib * 1024;
    f.ignore(256, '\n');
  }
  return 0;
}

// A cgroup limit file's value; 0 for "max", a value no machine has (v1's unlimited is 2^63 - 4096),
// or a file that is not there.
int64_t read_limit(const std::string& path) {
  std::ifstream f(path);
  std::string text;
  if (!(f >> text) || text == "max") return 0;
  try {
    const long double v = std::stold(text);
    return v > 0 && v < static_cast<long double>(int64_t{1} << 60) ? static_cast<int64_t>(v) : 0;
  } catch (const std::exception&) {
    return 0;
  }
}

// The memory cgroup's files for this process: v2's memory.max, v1's memory.limit_in_bytes (at
// its path, and at the hierarchy's root where the path is not mounted inside a container).
std::vector<std::string> cgroup_limit_files() {
  std::vector<std::string> files;
  std::ifstream f("/proc/self/cgroup");
  std::string line;
  while (std::getline(f, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) files.push_back("/sys/fs/cgroup" + path + "/memory.max");
    if (controllers == "memory") {
      files.push_back("/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes");
      files.push_back("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    }
  }
  return files;
}

std::string gib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (int64_t{1} << 30));
  return text;
}

[[noreturn]] void refuse(const std::string& need, int64_t per_rank, int local_ranks,
                         const HostMemory& host) {
  const int64_t total = per_rank > INT64_MAX / local_ranks ? INT64_MAX : per_rank * local_ranks;
  throw std::invalid_argument(
      need + " " + gib(per_rank) + " per rank; the " + std::to_string(local_ranks) + " rank" +
      (local_ranks == 1 ? "" : "s") + " on this host need " + gib(total) + ", more than its " +
      gib(host.bytes) + " (" + host.source +
      "); nothing was built (fsdp-plan shows the plan: more ranks, FULL_SHARD, a smaller model "
      "or fsdp_offload_params on a GPU)");
}

}  // namespace

HostMemory host_memory_limit() {
  HostMemory m{mem_total_bytes(), "MemTotal in /proc/meminfo"};
  for (const std::string& file : cgroup_limit_files()) {
    const int64_t limit = read_limit(file);
    if (limit > 0 && (m.bytes == 0 || limit < m.bytes)) m = {limit, "the cgroup limit in " + file};
  }
  return m;
}

void check_host_memory(const TrainConfig& config, int world_size, int local_ranks,
                       const HostMemory& host, bool training) {
  if (host.bytes <= 0 || world_size < 1) return;
  local_ranks = std::max(local_ranks, 1);
  const bool on_gpu = config.train.device == TrainDevice::kCuda;
  const bool host_state = !on_gpu || config.fsdp.offload_params;
  // From the config alone: fp32 parameters (and, training, their gradients and AdamW's m and v),
  // sharded at best over every rank. With parameters frozen (train.freeze, LoRA) the config alone
  // does not say how many: at best all but a few, at the compute dtype's bytes each; the plan below
  // counts them.
  const int64_t params = model_shapes(config).parameters();
  const bool frozen = training && config.freezes_parameters();
  const int64_t bytes_per_param = frozen ? static_cast<int64_t>(dtype_size(config.mixed_precision))
                                  : training ? 16
                                             : 4;
  const int64_t state = params > INT64_MAX / bytes_per_param ? INT64_MAX : params * bytes_per_param;
  const int64_t least = state / world_size;
  if (host_state && least > host.bytes / local_ranks) {
    refuse(std::string("the model's ") + std::to_string(params) + " parameters (" +
               (frozen     ? std::string("frozen, in ") + dtype_name(config.mixed_precision)
                : training ? std::string("fp32, with gradients and AdamW's state")
                           : std::string("fp32")) +
               ") need at least",
           least, local_ranks, host);
  }
  if (!training) return;
  const Plan plan = plan_training(config, world_size, local_ranks);
  const int64_t per_rank = on_gpu ? plan.memory.host() : plan.memory.total();
  if (per_rank > host.bytes / local_ranks) {
    refuse("the plan (fsdp-plan: " + std::string(to_string(plan.strategy)) + " over " +
               std::to_string(world_size) + " ranks) needs",
           per_rank, local_ranks, host);
  }
}

}  // namespace fsdp
