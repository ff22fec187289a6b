// The counting decorator of fsdp/comm_stats.h.
#include <chrono>

#include "fsdp/comm_stats.h"

namespace fsdp {
namespace {

// Adds the time from its construction to its destruction to a counter.
class BlockedTimer {
 public:
  explicit BlockedTimer(std::atomic<int64_t>& ns) : ns_(ns) {}
  ~BlockedTimer() {
    ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start_).count();
  }

 private:
  using Clock = std::chrono::steady_clock;
  std::atomic<int64_t>& ns_;
  Clock::time_point start_ = Clock::now();
};

class TimedWork : public Work {
 public:
  TimedWork(WorkPtr inner, std::shared_ptr<TrafficCounts> counts)
      : inner_(std::move(inner)), counts_(std::move(counts)) {}
  void wait() override {
    BlockedTimer timer(counts_->blocked_ns);
    inner_->wait();
  }

 private:
  WorkPtr inner_;
  std::shared_ptr<TrafficCounts> counts_;
};

class CountingComm : public Comm {
 public:
  CountingComm(CommPtr inner, std::shared_ptr<TrafficCounts> counts)
      : inner_(std::move(inner)), counts_(std::move(counts)) {
    set_timeout(inner_->timeout());
    set_local_size(inner_->local_size());
  }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend() const override { return inner_->backend(); }
  bool progresses_in_background() const override { return inner_->progresses_in_background(); }

  WorkPtr all_gather_async(const void* in, void* out, size_t count, DType dtype) override {
    add(counts_->all_gather_bytes, count * static_cast<size_t>(size()), dtype);
    return timed([&] { return inner_->all_gather_async(in, out, count, dtype); });
  }
  WorkPtr reduce_scatter_async(const void* in, void* out, size_t count, DType dtype,
                               ReduceOp op) override {
    add(counts_->reduce_scatter_bytes, count * static_cast<size_t>(size()), dtype);
    return timed([&] { return inner_->reduce_scatter_async(in, out, count, dtype, op); });
  }
  WorkPtr all_reduce_async(void* data, size_t count, DType dtype, ReduceOp op) override {
    add(counts_->all_reduce_bytes, count, dtype);
    return timed([&] { return inner_->all_reduce_async(data, count, dtype, op); });
  }
  WorkPtr broadcast_async(void* data, size_t count, DType dtype, int root) override {
    add(counts_->broadcast_bytes, count, dtype);
    return timed([&] { return inner_->broadcast_async(data, count, dtype, root); });
  }
  void barrier() override {
    pass_settings();
    BlockedTimer timer(counts_->blocked_ns);
    inner_->barrier();
  }
  std::shared_ptr<Comm> split(int color, int key) override {
    pass_settings();
    return std::make_shared<CountingComm>(inner_->split(color, key), counts_);
  }

 private:
  template <typename Issue>
  WorkPtr timed(const Issue& issue) {
    BlockedTimer timer(counts_->blocked_ns);
    return std::make_shared<TimedWork>(issue(), counts_);
  }
  void add(std::atomic<int64_t>& bytes, size_t count, DType dtype) {
    pass_settings();
    bytes += static_cast<int64_t>(count * dtype_size(dtype));
    ++counts_->collectives;
  }
  void pass_settings() {
    inner_->set_context(context());
    inner_->set_timeout(timeout());
  }

  CommPtr inner_;
  std::shared_ptr<TrafficCounts> counts_;
};

}  // namespace

CommPtr count_traffic(CommPtr inner, std::shared_ptr<TrafficCounts> counts) {
  return std::make_shared<CountingComm>(std::move(inner), std::move(counts));
}

}  // namespace fsdp
