// Traffic counting: a Comm that forwards every collective to another and adds up what each kind
// moves, for benchmarks and tests that hold the runtime to its communication theory. Groups split
// from it count into the same totals. Bytes are the collectives' full buffers: an all-gather's
// output (size() x count elements), a reduce-scatter's input (the same), an all-reduce's or a
// broadcast's buffer. Time is what the calling threads spent inside the collectives' calls (issue
// and wait): the communication a step did not overlap with compute.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "fsdp/comm.h"

namespace fsdp {

struct TrafficCounts {
  std::atomic<int64_t> all_gather_bytes{0}, reduce_scatter_bytes{0}, all_reduce_bytes{0},
      broadcast_bytes{0}, collectives{0};
  std::atomic<int64_t> blocked_ns{0};  // inside issue and wait calls, summed over calling threads
  int64_t total_bytes() const {
    return all_gather_bytes + reduce_scatter_bytes + all_reduce_bytes + broadcast_bytes;
  }
  void reset() {
    all_gather_bytes = reduce_scatter_bytes = all_reduce_bytes = broadcast_bytes = collectives =
        blocked_ns = 0;
  }
};

// `inner` with every collective counted into `counts`. Its context label, timeout and local size
// are passed on to `inner` as each collective is issued.
CommPtr count_traffic(CommPtr inner, std::shared_ptr<TrafficCounts> counts);

}  // namespace fsdp
