// Memory a device's allocator holds for this process: what PyTorch users read from
// torch.cuda.memory_allocated and memory_reserved (and their max_ forms). Known for CUDA devices in
// builds against a CUDA LibTorch (device_memory_cuda.cpp, LibTorch's caching allocator);
// elsewhere (device_memory_none.cpp, or a CPU device) `known` is false and the host's figures
// (fsdp/host_memory.h, the resident set) are the ones to read.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>

namespace fsdp {

struct DeviceMemory {
  bool known = false;
  int64_t allocated_bytes = 0;  // in tensors now
  int64_t peak_allocated_bytes = 0;
  int64_t reserved_bytes = 0;  // held by the allocator, in tensors or cached
  int64_t peak_reserved_bytes = 0;
};

DeviceMemory device_memory(c10::Device device);
// Peaks start again from the current figures (torch.cuda.reset_peak_memory_stats).
void reset_peak_device_memory(c10::Device device);
// The device's whole memory (torch.cuda.mem_get_info()'s total); 0 where unknown: a CPU device, a
// build without CUDA, no GPU visible.
int64_t device_capacity_bytes(c10::Device device);

}  // namespace fsdp
