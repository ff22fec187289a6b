// device_memory.h for CUDA devices: LibTorch's caching allocator's own statistics (the aggregate
// over its small and large pools). Compiled in builds against a CUDA LibTorch only.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

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

int64_t device_capacity_bytes(c10::Device device) {
  const c10::DeviceIndex index = device.has_index() ? device.index() : 0;
  if (!device.is_cuda() || index >= c10::cuda::device_count()) return 0;
  const c10::cuda::CUDAGuard guard(index);
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: later CUDA calls must not see it
    return 0;
  }
  return static_cast<int64_t>(total);
}

}  // namespace fsdp
