// The pool behind BufferPool (see buffer_pool.h): an exact-size cache of free blocks under a
// mutex, because a block may come back on whatever thread drops the last tensor using it.
#include "core/buffer_pool.h"

#include <ATen/ops/empty.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <map>
#include <mutex>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#else
#define ASAN_POISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#define ASAN_UNPOISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#endif

namespace fsdp {

struct BufferPool::State {
  // LibTorch's CPU allocator when the pool was made (fsdp/host_memory.h's, once installed, so
  // that pooled blocks count as tensor memory); every block goes back to the one it came from.
  c10::Allocator* allocator = c10::GetCPUAllocator();
  std::mutex mutex;
  std::multimap<size_t, void*> free_blocks;
  BufferPoolStats stats;

  void put(void* ptr, size_t nbytes) {
    ASAN_POISON_MEMORY_REGION(ptr,
                              nbytes);  // a stale tensor's access to a pooled block is an error
    std::lock_guard<std::mutex> lock(mutex);
    free_blocks.emplace(nbytes, ptr);
  }

  ~State() {
    for (auto& [nbytes, ptr] : free_blocks) {
      ASAN_UNPOISON_MEMORY_REGION(ptr, nbytes);
      allocator->raw_deleter()(ptr);
    }
  }
};

namespace {

// The deleter's context: which block, and the state it goes back to.
struct Lease {
  std::shared_ptr<BufferPool::State> state;
  void* ptr;
  size_t nbytes;
};

void give_back(void* ctx) {
  auto* lease = static_cast<Lease*>(ctx);
  lease->state->put(lease->ptr, lease->nbytes);
  delete lease;
}

}  // namespace

BufferPool::BufferPool(c10::Device device)
    : device_(device), state_(device.is_cpu() ? std::make_shared<State>() : nullptr) {}

c10::DataPtr BufferPool::take(size_t nbytes) {
  if (!state_) {
    c10::DeviceGuard guard(device_);
    return c10::GetAllocator(device_.type())->allocate(nbytes);
  }
  void* ptr = nullptr;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    BufferPoolStats& s = state_->stats;
    auto it = state_->free_blocks.find(nbytes);
    if (it != state_->free_blocks.end()) {
      ptr = it->second;
      state_->free_blocks.erase(it);
      ASAN_UNPOISON_MEMORY_REGION(ptr, nbytes);
    } else {
      ptr = state_->allocator->raw_allocate(std::max<size_t>(nbytes, 1));
      ++s.fresh_blocks;
      s.held_bytes += static_cast<int64_t>(nbytes);
      s.peak_held_bytes = std::max(s.peak_held_bytes, s.held_bytes);
    }
  }
  return c10::DataPtr(ptr, new Lease{state_, ptr, nbytes}, &give_back, c10::Device(c10::kCPU));
}

at::Tensor BufferPool::empty(int64_t numel, at::ScalarType dtype) {
  const size_t nbytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, take(nbytes), /*allocator=*/nullptr,
                       /*resizable=*/false);
  return at::empty({0}, at::TensorOptions().dtype(dtype).device(device_))
      .set_(storage, 0, {numel}, {1});
}

BufferPoolStats BufferPool::stats() const {
  if (!state_) return {};  // the device allocator's own statistics tell more
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->stats;
}

}  // namespace fsdp
