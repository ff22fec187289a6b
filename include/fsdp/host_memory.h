// Host memory for LibTorch CPU tensors: an allocator installed in front of LibTorch's default one
// that counts the bytes of live tensor storage (and their peak) and keeps large blocks for reuse.
//
// Why: a training step allocates the same large tensors (activations, logits, their gradients)
// every step. glibc either hands them back to the system (mmap), so each step faults every page
// in again (here: a 124M-parameter step takes 4x as long), or keeps them in its heap, where
// blocks of mixed sizes fragment it and the resident set grows 1.3-2 GiB past what is live. This
// allocator maps each large block on its own and caches it by length, so a step reuses the last
// step's blocks (a request may take one somewhat longer), and it gives cached blocks back once what
// it holds would pass the highest live total so far by more than a headroom, so the resident set
// stays near the planner's figure. Small blocks go to malloc, counted but not cached; so do all
// blocks in a build with AddressSanitizer (FSDP_SANITIZE), which must see every allocation.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fsdp {

struct HostAllocatorOptions {
  // Blocks of at least this many bytes are mapped on their own and cached. Default: 1 MiB.
  size_t cache_min_bytes = size_t{1} << 20;
  // Cached-but-free blocks are given back when live + cached bytes would exceed the highest live
  // total (since install or release_cached_host_memory()) by more than this fraction of it.
  // Default: 0.5. A training step uses some sizes only in one phase (the tied embedding's V x h
  // gradients at the end of backward, for one), so the blocks a step comes back to add up to
  // 20-27 % above its live peak (GPT-2 124M); a bound that tight gives some back every step and
  // maps them again, page by page (0.3 cost FULL_SHARD 200 MiB of page faults per step). The
  // bound is a guard against sizes that keep changing, not a target: steady steps hold what they
  // reuse.
  double headroom = 0.5;
  // A request may take a cached block up to this fraction longer than it needs. Default: 0.5.
  // A step's phases ask for large sizes the others don't: GPT-2's V-wide logits and their
  // gradients at the loss, the tied embedding's V x h gradients at the end of backward. Reused
  // only at their exact length, each phase's blocks sat cached through the other's, and the
  // resident set carried both (124M at 2 x 512 tokens a rank, with LibTorch's cross entropy as
  // the loss: 550 MiB held above the live peak, 180 with this slack). A longer block's tail is
  // already resident: taking it costs nothing a fresh mapping would not. 0: exact lengths only.
  double reuse_slack = 0.5;
};

struct HostMemoryStats {
  int64_t live = 0;             // bytes of storage allocated and not yet freed
  int64_t peak_live = 0;        // largest `live` since install or reset_host_memory_peak()
  int64_t cached = 0;           // bytes of free large blocks kept for reuse
  int64_t peak_held = 0;        // largest live + cached since install or the last reset
  int64_t mapped_blocks = 0;    // large blocks obtained from the system, ever
  int64_t unmapped_blocks = 0;  // large blocks given back, ever
};

// Installs the allocator (once per process; later calls change nothing). Throws
// std::invalid_argument, naming the field, for a negative headroom or reuse_slack. Storage
// allocated before it is neither counted nor cached, nor is its release. LibTorch keeps the
// allocator for the rest of the process.
void install_host_allocator(const HostAllocatorOptions& options = {});
bool host_allocator_installed();
// All zero until install_host_allocator() has been called.
HostMemoryStats host_memory();
// Restarts peak_live and peak_held from the current values.
void reset_host_memory_peak();
// Gives every cached block back to the system, and bounds the cache from here on by the live
// totals to come (a new job in the same process: the previous one's peak no longer counts).
void release_cached_host_memory();

}  // namespace fsdp
