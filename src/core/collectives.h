// Collectives over tensors on any device, for the layers above comm/ (the runtime, optimizers,
// checkpoints, the trainer). A tensor in memory the group's backend works in goes to it as it is;
// a CUDA tensor on a host backend (MPI, Gloo, local) goes through a pinned host buffer: copied
// there before the collective, and back when it is waited on. That is what lets several ranks
// share one GPU over MPI (NCCL refuses two ranks on one device), at the price of two copies.
// NCCL takes host tensors itself (see include/fsdp/comm.h). Tensors must be contiguous; the
// caller keeps them alive until the returned Work has been waited on.
#pragma once

#include <ATen/core/Tensor.h>

#include "fsdp/comm.h"

namespace fsdp {

// out (size()*n elements) <- every rank's in (n elements), in rank order.
WorkPtr all_gather(Comm& comm, const at::Tensor& in, const at::Tensor& out);
// out (n elements) <- the reduction over ranks of their chunk `rank` of in (size()*n elements).
WorkPtr reduce_scatter(Comm& comm, const at::Tensor& in, const at::Tensor& out, ReduceOp op);
WorkPtr all_reduce(Comm& comm, const at::Tensor& data, ReduceOp op);
WorkPtr broadcast(Comm& comm, const at::Tensor& data, int root);

}  // namespace fsdp
