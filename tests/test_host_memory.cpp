// The host allocator (fsdp/host_memory.h): it counts live tensor bytes exactly, reuses a cached
// block for a tensor of the same size (or up to half as large again) instead of mapping a new
// one, serves LibTorch's raw allocations, and gives cached blocks back once it would hold more
// than its headroom over the live peak.
#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "fsdp/host_memory.h"

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// Under AddressSanitizer the allocator caches nothing (every block goes through malloc).
#if defined(__SANITIZE_ADDRESS__)
#define SKIP_WITHOUT_CACHE() GTEST_SKIP() << "AddressSanitizer build: no block is cached"
#else
#define SKIP_WITHOUT_CACHE() (void)0
#endif

class HostMemory : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fsdp::HostAllocatorOptions o;
    o.cache_min_bytes = kMiB;
    o.headroom = 0.5;
    fsdp::install_host_allocator(o);
  }
  void SetUp() override {
    fsdp::release_cached_host_memory();
    fsdp::reset_host_memory_peak();
  }
};

TEST_F(HostMemory, CountsLiveBytesOfLargeAndSmallTensors) {
  ASSERT_TRUE(fsdp::host_allocator_installed());
  const int64_t before = fsdp::host_memory().live;
  {
    at::Tensor big = at::empty({3 * kMiB / 4}, at::kFloat);  // 3 MiB: mapped
    at::Tensor small = at::empty({1000}, at::kFloat);        // 4000 bytes: malloc
    EXPECT_EQ(fsdp::host_memory().live - before, 3 * kMiB + 4000);
    EXPECT_EQ(fsdp::host_memory().peak_live - before, 3 * kMiB + 4000);
    big.fill_(1.5f);
    small.fill_(2.5f);
    EXPECT_EQ(big.sum().item<float>(), 1.5f * big.numel());
    EXPECT_EQ(small.sum().item<float>(), 2.5f * 1000);
  }
  const fsdp::HostMemoryStats s = fsdp::host_memory();
  EXPECT_EQ(s.live, before);
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_GE(s.cached, 3 * kMiB);  // the large block, kept
#endif
}

TEST_F(HostMemory, ReusesACachedBlockOfTheSameSize) {
  SKIP_WITHOUT_CACHE();
  { at::Tensor a = at::empty({2 * kMiB}, at::kByte); }
  const int64_t mapped = fsdp::host_memory().mapped_blocks;
  for (int i = 0; i < 5; ++i) {
    at::Tensor a = at::empty({2 * kMiB}, at::kByte);
    a.fill_(i);
  }
  EXPECT_EQ(fsdp::host_memory().mapped_blocks, mapped);
  // A different size maps its own block.
  at::Tensor b = at::empty({5 * kMiB}, at::kByte);
  EXPECT_EQ(fsdp::host_memory().mapped_blocks, mapped + 1);
}

// The suite's allocator has the default slack (0.5): a request takes the shortest cached block
// that fits up to half as long again, and the block stays its own length when it is cached again.
TEST_F(HostMemory, ReusesALongerCachedBlockWithinTheSlack) {
  SKIP_WITHOUT_CACHE();
  { at::Tensor a = at::empty({8 * kMiB}, at::kByte); }
  const fsdp::HostMemoryStats before = fsdp::host_memory();
  {
    at::Tensor b = at::empty({6 * kMiB}, at::kByte);  // 6 MiB in the cached 8 MiB block
    b.fill_(3);  // its last byte too (no reduction here: it would allocate)
    EXPECT_EQ(b[6 * kMiB - 1].item<uint8_t>(), 3);
    const fsdp::HostMemoryStats s = fsdp::host_memory();
    EXPECT_EQ(s.mapped_blocks, before.mapped_blocks);
    EXPECT_EQ(s.live - before.live, 6 * kMiB);                   // live counts what was asked for,
    EXPECT_EQ(before.cached - s.cached, 8 * kMiB + (64 << 10));  // held: the block's length
  }
  // Back in the cache at its own length: an 8 MiB request takes it again.
  EXPECT_EQ(fsdp::host_memory().cached, before.cached);
  { at::Tensor c = at::empty({8 * kMiB}, at::kByte); }
  EXPECT_EQ(fsdp::host_memory().mapped_blocks, before.mapped_blocks);
  // Past the slack (8 MiB is more than half as long again as 5 MiB) a request maps its own.
  { at::Tensor d = at::empty({5 * kMiB}, at::kByte); }
  EXPECT_EQ(fsdp::host_memory().mapped_blocks, before.mapped_blocks + 1);
  fsdp::release_cached_host_memory();
  EXPECT_EQ(fsdp::host_memory().cached, 0);
}

TEST_F(HostMemory, RefusesNegativeOptionsNamingThem) {
  const auto refusal = [](const fsdp::HostAllocatorOptions& o) -> std::string {
    try {
      fsdp::install_host_allocator(o);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "(accepted)";
  };
  fsdp::HostAllocatorOptions o;
  o.reuse_slack = -0.5;
  EXPECT_NE(refusal(o).find("reuse_slack must be at least 0"), std::string::npos) << refusal(o);
  o = fsdp::HostAllocatorOptions();
  o.headroom = -1;
  EXPECT_NE(refusal(o).find("headroom must be at least 0"), std::string::npos) << refusal(o);
}

TEST_F(HostMemory, ServesRawAllocations) {
  c10::Allocator* a = c10::GetCPUAllocator();
  const int64_t before = fsdp::host_memory().live;
  void* big = a->raw_allocate(4 * kMiB);
  void* small = a->raw_allocate(100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small) % 64, 0u);
  static_cast<char*>(big)[4 * kMiB - 1] = 1;
  EXPECT_EQ(fsdp::host_memory().live - before, 4 * kMiB + 100);
  a->raw_deleter()(big);
  a->raw_deleter()(small);
  EXPECT_EQ(fsdp::host_memory().live, before);
}

TEST_F(HostMemory, HoldsNoMoreThanTheHeadroomOverTheLivePeak) {
  SKIP_WITHOUT_CACHE();
  // Tensors of ever new sizes, one at a time: without the bound every block would stay cached.
  int64_t largest = 0;
  for (int64_t i = 0; i < 40; ++i) {
    const int64_t bytes = (4 + i) * kMiB;
    largest = std::max(largest, bytes);
    at::Tensor t = at::empty({bytes}, at::kByte);
    const fsdp::HostMemoryStats s = fsdp::host_memory();
    // What this process held before (tests, LibTorch) counts toward the live peak too.
    EXPECT_LE(s.live + s.cached, static_cast<int64_t>(1.5 * s.peak_live) + kMiB) << "size " << i;
  }
  const fsdp::HostMemoryStats s = fsdp::host_memory();
  EXPECT_GT(s.unmapped_blocks, 0);
  fsdp::release_cached_host_memory();
  EXPECT_EQ(fsdp::host_memory().cached, 0);
}

TEST_F(HostMemory, FreesFromAnyThread) {
  at::Tensor t = at::empty({3 * kMiB}, at::kByte);
  const int64_t live = fsdp::host_memory().live;
  std::thread([moved = std::move(t)]() mutable { moved.reset(); }).join();
  EXPECT_EQ(fsdp::host_memory().live, live - 3 * kMiB);
}

}  // namespace
