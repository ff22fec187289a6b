// device_memory.h for CUDA devices: LibTorch's caching allocator's own statistics (the aggregate
// over its small and large pools). Compiled in builds against a CUDA LibTorch only.
#include <c10/cuda/CUDACachingAllocator.h>

#include "core/device_memory.h"

namespace fsdp {

DeviceMemory device_memory(c10::Device device) {
  if (!device.is_cuda()) return {};
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  constexpr size_t kAggregate = 0;  // StatType::AGGREGATE
  DeviceMemory m;
  m.known = true;
  m.allocated_bytes = stats.allocated_bytes[kAggregate].current;
  m.peak_allocated_bytes = stats.allocated_bytes[kAggregate].peak;
  m.reserved_bytes = stats.reserved_bytes[kAggregate].current;
  m.peak_reserved_bytes = stats.reserved_bytes[kAggregate].peak;
  return m;
}

void reset_peak_device_memory(c10::Device device) {
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
}

}  // namespace fsdp
