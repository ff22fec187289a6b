// Whether a job fits the host it starts on, asked before anything is built: the trainer refuses a
// config whose ranks on this host cannot hold their share (a vocab_size of 20 million once ran for
// 106 s to 16.7 GB and was killed by the kernel without a word), naming the plan's figure and the
// limit, as fsdp-plan would show them. Refusals only: the plan counts tensors, which the measured
// peaks match within 2% (bench/README.md), and a process needs more than its tensors, so a job the
// check passes may still not fit; one it refuses cannot.
#pragma once

#include <cstdint>
#include <string>

#include "fsdp/config/config.h"

namespace fsdp {

// The memory this host gives its processes: /proc/meminfo's MemTotal, or the memory cgroup's
// limit where it is lower. bytes 0: unknown (nothing is refused then).
struct HostMemory {
  int64_t bytes = 0;
  std::string source;  // "MemTotal in /proc/meminfo", "the cgroup limit in /sys/fs/cgroup/..."
};
HostMemory host_memory_limit();

// Throws std::invalid_argument when `local_ranks` ranks of a `world_size`-rank job of `config`
// need more than `host`: first the fp32 parameters, gradients and AdamW state from the config
// alone (factory's model_shapes: nothing is built, so sizes far beyond memory are refused at
// once), then fsdp-plan's per-rank total (which builds the model deferred). `training` false
// (eval, sample): only the parameters count. On a GPU run only what lives in host memory (the
// offloaded state) is held against `host`.
void check_host_memory(const TrainConfig& config, int world_size, int local_ranks,
                       const HostMemory& host, bool training = true);

}  // namespace fsdp
