// BufferPool: the byte blocks behind gathered parameters, unsharded gradients and reduction
// scratch, kept for reuse instead of returned to the system. Units of one model come in a few
// sizes (a transformer's blocks are all alike), so a free block of exactly the requested size is
// almost always there from the previous unit or step: after the first step no block is fresh, no
// page faults in again, and the pool holds no more than the step's peak of concurrent buffers.
//
// A block goes back to the pool when the last tensor (or storage) using it dies, through the
// deleter of its DataPtr; the pool's state is shared with those deleters, so a tensor may outlive
// the pool (autograd may still hold one after the model is gone).
//
// On a GPU the pool keeps nothing itself: LibTorch's caching allocator already reuses blocks,
// per stream. Blocks come from it on the calling thread's current stream, and a collective that
// uses one is waited on (ordering that stream after it) before the block is dropped, so the
// allocator never hands out memory a collective still reads or writes.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>

#include <cstdint>
#include <memory>

namespace fsdp {

struct BufferPoolStats {
  int64_t held_bytes = 0;       // in use plus cached
  int64_t peak_held_bytes = 0;  // since construction
  int64_t fresh_blocks = 0;     // blocks obtained from the system, ever
};

class BufferPool {
 public:
  explicit BufferPool(c10::Device device = c10::Device(c10::kCPU));

  // `nbytes` bytes on the pool's device (64-byte aligned, contents undefined).
  c10::DataPtr take(size_t nbytes);
  // A 1-D tensor of `numel` elements on the pool's device, whose bytes come from the pool.
  at::Tensor empty(int64_t numel, at::ScalarType dtype);
  c10::Device device() const { return device_; }

  BufferPoolStats stats() const;

  struct State;

 private:
  c10::Device device_;
  std::shared_ptr<State> state_;  // CPU pools only
};

}  // namespace fsdp
