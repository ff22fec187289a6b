// The tensor collectives of collectives.h: the direct call, or the pinned host staging of CUDA
// tensors for host backends.
#include "core/collectives.h"

#include <ATen/ops/empty.h>

#include "core/check.h"
#include "core/dtypes.h"

namespace fsdp {
namespace {

size_t count_of(const at::Tensor& t) { return static_cast<size_t>(t.numel()); }

void check_contiguous(const at::Tensor& t, const char* what) {
  FSDP_CHECK(t.is_contiguous(), "collective on a non-contiguous ", what, " tensor");
}

// A host backend given a device tensor.
bool staged(const Comm& comm, const at::Tensor& t) {
  return !t.device().is_cpu() && comm.device() == CommDevice::kCpu;
}

// A pinned host copy of `t` (its contents when `copy`), so that the device copies are DMA.
at::Tensor host_copy(const at::Tensor& t, bool copy) {
  at::Tensor host = at::empty({t.numel()}, t.options().device(at::kCPU).pinned_memory(true));
  if (copy) host.copy_(t.reshape({-1}));  // blocking: the host backend reads it next
  return host;
}

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

}  // namespace

WorkPtr all_gather(Comm& comm, const at::Tensor& in, const at::Tensor& out) {
  check_contiguous(in, "input");
  check_contiguous(out, "output");
  const DType dtype = to_dtype(in.scalar_type());
  if (!staged(comm, in)) {
    return comm.all_gather_async(in.data_ptr(), out.data_ptr(), count_of(in), dtype);
  }
  at::Tensor host_in = host_copy(in, true), host_out = host_copy(out, false);
  WorkPtr work =
      comm.all_gather_async(host_in.data_ptr(), host_out.data_ptr(), count_of(in), dtype);
  return std::make_shared<StagedWork>(std::move(work), host_in, host_out, out);
}

WorkPtr reduce_scatter(Comm& comm, const at::Tensor& in, const at::Tensor& out, ReduceOp op) {
  check_contiguous(in, "input");
  check_contiguous(out, "output");
  const DType dtype = to_dtype(in.scalar_type());
  if (!staged(comm, in)) {
    return comm.reduce_scatter_async(in.data_ptr(), out.data_ptr(), count_of(out), dtype, op);
  }
  at::Tensor host_in = host_copy(in, true), host_out = host_copy(out, false);
  WorkPtr work =
      comm.reduce_scatter_async(host_in.data_ptr(), host_out.data_ptr(), count_of(out), dtype, op);
  return std::make_shared<StagedWork>(std::move(work), host_in, host_out, out);
}

WorkPtr all_reduce(Comm& comm, const at::Tensor& data, ReduceOp op) {
  check_contiguous(data, "input");
  const DType dtype = to_dtype(data.scalar_type());
  if (!staged(comm, data)) {
    return comm.all_reduce_async(data.data_ptr(), count_of(data), dtype, op);
  }
  at::Tensor host = host_copy(data, true);
  WorkPtr work = comm.all_reduce_async(host.data_ptr(), count_of(data), dtype, op);
  return std::make_shared<StagedWork>(std::move(work), at::Tensor(), host, data);
}

WorkPtr broadcast(Comm& comm, const at::Tensor& data, int root) {
  check_contiguous(data, "input");
  const DType dtype = to_dtype(data.scalar_type());
  if (!staged(comm, data)) {
    return comm.broadcast_async(data.data_ptr(), count_of(data), dtype, root);
  }
  at::Tensor host = host_copy(data, true);
  WorkPtr work = comm.broadcast_async(host.data_ptr(), count_of(data), dtype, root);
  return std::make_shared<StagedWork>(std::move(work), at::Tensor(), host, data);
}

}  // namespace fsdp
