// device_memory.h in builds against a LibTorch without CUDA: no device allocator to ask.
#include "core/device_memory.h"

namespace fsdp {

DeviceMemory device_memory(c10::Device) { return {}; }

void reset_peak_device_memory(c10::Device) {}

int64_t device_capacity_bytes(c10::Device) { return 0; }

}  // namespace fsdp
