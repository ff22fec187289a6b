// The allocator behind fsdp/host_memory.h. Every block starts with a header one alignment unit
// long (the requested size and, for a large block, its mapping's length), so the deleter needs no
// table and LibTorch's raw allocations (raw_allocate/raw_deleter) work as with its default
// allocator. Large blocks are rounded up to 64 KiB so that tensors of nearly equal sizes share
// cached blocks; a request takes the shortest cached block that fits, up to reuse_slack longer,
// and the block keeps its own length for its life (the header says which). The cache gives back
// the blocks freed longest ago first: blocks of sizes a step no longer uses (the model as built
// before sharding, a finished run's buffers) go before the ones each step comes back to.
#include "fsdp/host_memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/alignment.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

#include "compat.h"

namespace fsdp {
namespace {

constexpr size_t kHeader = c10::gAlignment;  // keeps data aligned as the default allocator does
constexpr size_t kGranule = size_t{64} << 10;

struct Header {
  int64_t bytes;  // requested
  size_t mapped;  // the mapping's length; 0 for a block from malloc
};

class HostAllocator final : public compat::Allocator {
 public:
  explicit HostAllocator(const HostAllocatorOptions& o) : options_(o) {}

  c10::DataPtr allocate_block(size_t n) override {
    void* data = take(n);
    return {data, data, &host_free, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &host_free; }

  HostMemoryStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_live = stats_.live;
    stats_.peak_held = stats_.live + stats_.cached;
  }
  void release_cached() {
    std::lock_guard<std::mutex> lock(mutex_);
    while (!lru_.empty()) unmap_oldest_free();
    high_water_ = stats_.live;
  }

  static void host_free(void* data);

 private:
  void* take(size_t n) {
    const auto bytes = static_cast<int64_t>(n);
    size_t length = 0;
    void* base = nullptr;
    if (n >= options_.cache_min_bytes) {
      length = (n + kHeader + kGranule - 1) / kGranule * kGranule;
      std::lock_guard<std::mutex> lock(mutex_);
      base = reuse_or_map(length, bytes);  // `length` becomes the block's, which may be longer
      count_live(bytes);
    } else {
      base = c10::alloc_cpu(n + kHeader);  // throws c10::Error when out of memory
      std::lock_guard<std::mutex> lock(mutex_);
      count_live(bytes);
    }
    auto* h = static_cast<Header*>(base);
    h->bytes = bytes;
    h->mapped = length;
    return static_cast<char*>(base) + kHeader;
  }

  void give_back(Header* h) {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.live -= h->bytes;
    if (h->mapped == 0) return;
    lru_.push_back({h->mapped, h});
    by_length_.emplace(h->mapped, std::prev(lru_.end()));
    stats_.cached += static_cast<int64_t>(h->mapped);
  }

  // Under the lock: the shortest cached block of at least `length` and at most reuse_slack
  // longer, or a fresh mapping once enough cached blocks are given back that what is held stays
  // within the headroom over the live peak. Sets `length` to the block's.
  void* reuse_or_map(size_t& length, int64_t n) {
    const auto longest =
        static_cast<size_t>(static_cast<double>(length) * (1 + options_.reuse_slack));
    auto it = by_length_.lower_bound(length);
    if (it != by_length_.end() && it->first <= longest) {
      length = it->first;
      void* base = it->second->base;
      lru_.erase(it->second);
      by_length_.erase(it);
      stats_.cached -= static_cast<int64_t>(length);
      return base;
    }
    high_water_ = std::max(high_water_, stats_.live + n);
    const auto bound =
        static_cast<int64_t>(static_cast<double>(high_water_) * (1.0 + options_.headroom));
    while (!lru_.empty() && stats_.live + stats_.cached + static_cast<int64_t>(length) > bound) {
      unmap_oldest_free();
    }
    void* base = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    TORCH_CHECK(base != MAP_FAILED, "fsdp host allocator: cannot map ", length,
                " bytes: ", std::strerror(errno));
    ++stats_.mapped_blocks;
    return base;
  }

  void unmap_oldest_free() {
    const FreeBlock oldest = lru_.front();
    auto [first, last] = by_length_.equal_range(oldest.length);
    for (auto it = first; it != last; ++it) {
      if (it->second == lru_.begin()) {
        by_length_.erase(it);
        break;
      }
    }
    lru_.pop_front();
    munmap(oldest.base, oldest.length);
    stats_.cached -= static_cast<int64_t>(oldest.length);
    ++stats_.unmapped_blocks;
  }

  void count_live(int64_t n) {
    stats_.live += n;
    stats_.peak_live = std::max(stats_.peak_live, stats_.live);
    stats_.peak_held = std::max(stats_.peak_held, stats_.live + stats_.cached);
  }

  const HostAllocatorOptions options_;
  std::mutex mutex_;
  struct FreeBlock {
    size_t length;
    void* base;
  };
  std::list<FreeBlock> lru_;  // cached blocks, freed longest ago first
  std::multimap<size_t, std::list<FreeBlock>::iterator> by_length_;
  HostMemoryStats stats_;
  int64_t high_water_ = 0;  // the highest live total since install or release_cached()
};

HostAllocator* g_allocator = nullptr;

void HostAllocator::host_free(void* data) {
  if (data == nullptr) return;
  auto* h = reinterpret_cast<Header*>(static_cast<char*>(data) - kHeader);
  const bool from_malloc = h->mapped == 0;
  g_allocator->give_back(h);  // a large block may be another thread's from here on
  if (from_malloc) c10::free_cpu(h);
}

}  // namespace

void install_host_allocator(const HostAllocatorOptions& options) {
  // NaN fails both comparisons too.
  if (!(options.headroom >= 0)) {
    throw std::invalid_argument("HostAllocatorOptions::headroom must be at least 0, got " +
                                std::to_string(options.headroom));
  }
  if (!(options.reuse_slack >= 0)) {
    throw std::invalid_argument("HostAllocatorOptions::reuse_slack must be at least 0, got " +
                                std::to_string(options.reuse_slack));
  }
  static std::once_flag once;
  std::call_once(once, [&] {
    HostAllocatorOptions o = options;
#if defined(__SANITIZE_ADDRESS__)
    o.cache_min_bytes = SIZE_MAX;  // every block through malloc, where AddressSanitizer sees it
#endif
    g_allocator = new HostAllocator(o);  // LibTorch keeps the pointer for the process's life
    // Priority above the default allocator's (0), so that a later default registration keeps ours.
    c10::SetCPUAllocator(g_allocator, /*priority=*/1);
  });
}

bool host_allocator_installed() { return g_allocator != nullptr; }

HostMemoryStats host_memory() { return g_allocator ? g_allocator->stats() : HostMemoryStats{}; }

void reset_host_memory_peak() {
  if (g_allocator) g_allocator->reset_peak();
}

void release_cached_host_memory() {
  if (g_allocator) g_allocator->release_cached();
}

}  // namespace fsdp
