// The tensor collectives of collectives.h: the direct call, or the pinned host staging of CUDA
// tensors for host backends.
#include "core/collectives.h"

#include <ATen/ops/empty.h>

#include "comm/scalar_type.h"
#include "core/check.h"

namespace fsdp {
namespace {

// Waits for the host collective, then copies its result back to the device tensor.
class StagedWork : public Work {
 public:
  StagedWork(WorkPtr inner, at::Tensor host_in, at::Tensor host_out, at::Tensor device_out)
      : inner_(std::move(inner)),
        host_in_(std::move(host_in)),
        host_out_(std::move(host_out)),
        device_out_(std::move(device_out)) {}

  void wait() override {
    if (!inner_) return;
    inner_->wait();
    inner_.reset();
    device_out_.view({-1}).copy_(host_out_);
    host_in_.reset();
    host_out_.reset();
  }

 private:
  WorkPtr inner_;
  at::Tensor host_in_, host_out_, device_out_;
};

// A pinned host copy of `t` (of its contents when `copy`), so that the device copies are DMA.
at::Tensor host_copy(const at::Tensor& t, bool copy) {
  at::Tensor host = at::empty({t.numel()}, t.options().device(at::kCPU).pinned_memory(true));
  if (copy) host.copy_(t.reshape({-1}));  // blocking: the host backend reads it next
  return host;
}

// Runs `issue(in, out)` (raw pointers) on the tensors themselves, or, for a host backend given
// device tensors, on pinned host copies; `out` may be `in` (in-place collectives).
template <typename Issue>
WorkPtr run(Comm& comm, const at::Tensor& in, const at::Tensor& out, Issue issue) {
  FSDP_CHECK(in.is_contiguous() && out.is_contiguous(), "collective on a non-contiguous tensor");
  const bool staged = !in.device().is_cpu() && comm.device() == CommDevice::kCpu;
  if (!staged) return issue(in.data_ptr(), out.data_ptr());
  at::Tensor host_in = host_copy(in, true);
  at::Tensor host_out = out.is_same(in) ? host_in : host_copy(out, false);
  WorkPtr work = issue(host_in.data_ptr(), host_out.data_ptr());
  return std::make_shared<StagedWork>(std::move(work), host_in, host_out, out);
}

size_t count_of(const at::Tensor& t) { return static_cast<size_t>(t.numel()); }

}  // namespace

WorkPtr all_gather(Comm& comm, const at::Tensor& in, const at::Tensor& out) {
  return run(comm, in, out, [&](void* i, void* o) {
    return comm.all_gather_async(i, o, count_of(in), to_dtype(in.scalar_type()));
  });
}

WorkPtr reduce_scatter(Comm& comm, const at::Tensor& in, const at::Tensor& out, ReduceOp op) {
  return run(comm, in, out, [&](void* i, void* o) {
    return comm.reduce_scatter_async(i, o, count_of(out), to_dtype(in.scalar_type()), op);
  });
}

WorkPtr all_reduce(Comm& comm, const at::Tensor& data, ReduceOp op) {
  return run(comm, data, data, [&](void*, void* d) {
    return comm.all_reduce_async(d, count_of(data), to_dtype(data.scalar_type()), op);
  });
}

WorkPtr broadcast(Comm& comm, const at::Tensor& data, int root) {
  return run(comm, data, data, [&](void*, void* d) {
    return comm.broadcast_async(d, count_of(data), to_dtype(data.scalar_type()), root);
  });
}

}  // namespace fsdp
