// The one-rank group: what a single process trains with, and what the sharding runtime uses for
// a mesh dimension of size 1. Every collective is a copy or nothing, and completes before it
// returns, so its Work is already done.
#include <cstring>

#include "comm/internal.h"

namespace fsdp {
namespace {

class DoneWork : public Work {
 public:
  void wait() override {}
};

WorkPtr done() {
  static const WorkPtr work = std::make_shared<DoneWork>();
  return work;
}

class LocalComm : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "local"; }

  WorkPtr all_gather_async(const void* in, void* out, size_t count, DType dtype) override {
    copy(in, out, count, dtype);
    return done();
  }
  // The average over one rank is the value itself.
  WorkPtr reduce_scatter_async(const void* in, void* out, size_t count, DType dtype,
                               ReduceOp) override {
    copy(in, out, count, dtype);
    return done();
  }
  WorkPtr all_reduce_async(void*, size_t, DType, ReduceOp) override { return done(); }
  WorkPtr broadcast_async(void*, size_t, DType, int root) override {
    if (root != 0)
      throw CommError("fsdp: broadcast root " + std::to_string(root) +
                      " is out of range for a group of size 1");
    return done();
  }
  void barrier() override {}

  std::shared_ptr<Comm> split(int color, int key) override {
    if (color < 0) throw CommError("fsdp: split color must be >= 0, got " + std::to_string(color));
    auto child = std::make_shared<LocalComm>();
    child->set_timeout(timeout());
    return child;
  }

 private:
  static void copy(const void* in, void* out, size_t count, DType dtype) {
    if (count > 0 && in != out) std::memcpy(out, in, count * dtype_size(dtype));
  }
};

}  // namespace

CommPtr make_local_comm() { return std::make_shared<LocalComm>(); }

}  // namespace fsdp
