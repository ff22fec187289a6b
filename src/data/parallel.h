// The data room's one way of spreading independent items over threads (tokenizing a corpus's
// documents, an instruction file's lines): a shared counter hands out indices in order, and the
// error of the lowest index that failed is the one rethrown, so a bad input is named as a serial
// run would name it whatever the thread count.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace fsdp::data {

// Calls fn(i) for each i in [0, n) on up to `threads` threads, this one included (0: one per
// hardware thread). After a failure no new index is handed out; every index below the lowest
// failed one has run, so its exception, rethrown once all threads stop, is the first bad item's.
template <typename Fn>
void parallel_for(size_t n, int threads, Fn fn) {
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  size_t error_index = n;
  std::mutex mu;
  auto work = [&] {
    for (size_t i; (i = next++) < n;) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (i < error_index) {
          error_index = i;
          error = std::current_exception();
        }
        next = n;
      }
    }
  };
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t count = std::min<size_t>(n, threads > 0 ? static_cast<size_t>(threads) : hw);
  std::vector<std::thread> pool;
  for (size_t t = 1; t < count; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace fsdp::data
