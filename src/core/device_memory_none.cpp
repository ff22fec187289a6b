// device_memory.h in builds against a LibTorch without CUDA: no device allocator to ask.
#include "core/device_memory.h"

namespace fsdp {

DeviceMemory device_memory(c10::Device) { return {}; }

void reset_peak_device_memory(c10::Device) {}

}  // namespace fsdp
