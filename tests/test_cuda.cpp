// CUDA in one process: the choice of NCCL, ShardingOptions::device and its errors (these run on
// every machine), and, on a GPU, the NCCL backend at world size 1, the pinned host staging that
// lets host backends carry CUDA tensors, a sharded model placed on the GPU, and CPU offload (its
// logic on the CPU too). Multi-rank CUDA
// training is in the parity tests (parity_cuda_*). Tests that need a GPU skip, with the reason,
// where there is none.
#include <c10/core/impl/VirtualGuardImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <iostream>
#include <map>
#include <string>

#include "comm/rendezvous.h"
#include "compat.h"
#include "core/collectives.h"
#include "core/streams.h"
#include "fsdp/fsdp.h"

namespace fsdp {
namespace {

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

#define REQUIRE_CUDA()                                                                             \
  if (!at::globalContext().hasCUDA())                                                              \
  GTEST_SKIP() << "CUDA is not available here (a LibTorch without CUDA, or no GPU visible): this " \
                  "runs on a GPU machine (scripts/gpu.sh)"

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

comm_internal::EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

torch::nn::Sequential small_model() {
  torch::manual_seed(7);
  return torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::ReLU(),
                               torch::nn::Linear(16, 4));
}

TEST(CudaChoice, AutoPicksNcclForCudaJobsOutsideMpirun) {
  using comm_internal::resolve_launch;
  const auto torchrun = env_of({{"RANK", "0"},
                                {"WORLD_SIZE", "2"},
                                {"MASTER_ADDR", "127.0.0.1"},
                                {"MASTER_PORT", "29999"},
                                {"LOCAL_RANK", "0"},
                                {"LOCAL_WORLD_SIZE", "2"}});
  EXPECT_EQ(resolve_launch("auto", torchrun, true, /*cuda=*/true).backend, "nccl");
  EXPECT_EQ(resolve_launch("auto", torchrun, true, /*cuda=*/false).backend, "gloo");
  EXPECT_EQ(resolve_launch("auto", env_of({}), true, /*cuda=*/true).backend, "nccl");
  // mpirun's ranks may share a GPU, which NCCL refuses: MPI stays.
  const auto mpirun = env_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  EXPECT_EQ(resolve_launch("auto", mpirun, true, /*cuda=*/true).backend, "mpi");
  const std::string e = error_of([&] {
    resolve_launch("nccl", env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}}), true, true);
  });
  EXPECT_CONTAINS(e, "nccl backend with 2 ranks needs MASTER_PORT");
}

TEST(CudaChoice, BadCommDeviceIsNamed) {
  CommOptions options;
  options.device = "gpu";
  EXPECT_CONTAINS(error_of([&] { init_comm(options); }), "CommOptions::device must be");
}

TEST(CudaChoice, NcclInABuildWithoutItSaysWhy) {
  if (at::globalContext().hasCUDA()) GTEST_SKIP() << "this build has CUDA: NCCL is built";
  CommOptions options;
  options.backend = "nccl";
  EXPECT_CONTAINS(error_of([&] { init_comm(options); }), "built without NCCL");
}

TEST(DeviceOption, UnknownDeviceNamesTheOption) {
  const std::string e = error_of([] {
    fully_shard(small_model().ptr(), make_local_comm(), ShardingOptions().device("tpu:0"));
  });
  EXPECT_CONTAINS(e, "ShardingOptions::device 'tpu:0'");
}

TEST(DeviceOption, CudaWithoutCudaSaysSo) {
  if (at::globalContext().hasCUDA()) GTEST_SKIP() << "CUDA is available: the error needs none";
  const std::string e = error_of([] {
    fully_shard(small_model().ptr(), make_local_comm(), ShardingOptions().device("cuda"));
  });
  EXPECT_CONTAINS(e, "CUDA is not available");
}

// fp16 on the CPU needs LibTorch's fp16 CPU kernels (2.x); where they exist it shards.
TEST(DeviceOption, Fp16OnTheCpuNeedsItsKernels) {
  const std::string e = error_of([] {
    fully_shard(small_model().ptr(), make_local_comm(),
                ShardingOptions().param_dtype(DType::kFloat16));
  });
  if (compat::kHasCpuHalfKernels) {
    EXPECT_EQ(e, "");
  } else {
    EXPECT_CONTAINS(e, "fp16 is not supported on CPU with LibTorch");
  }
}

TEST(DeviceOption, ExplicitCpuKeepsEverythingOnTheCpu) {
  auto model = small_model();
  auto sharded = fully_shard(model.ptr(), make_local_comm(), ShardingOptions().device("cpu"));
  for (const auto& s : sharded->shards()) EXPECT_TRUE(s.param.device().is_cpu());
  for (const auto& p : model->parameters()) EXPECT_TRUE(p.device().is_cpu());
}

TEST(CudaCollectives, HostBackendsCarryCudaTensorsThroughPinnedBuffers) {
  REQUIRE_CUDA();
  CommPtr comm = make_local_comm();  // a host backend: the tensors below are staged
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  at::Tensor in = at::arange(6, cuda.dtype(at::kFloat));
  at::Tensor out = at::zeros({6}, cuda.dtype(at::kFloat));
  all_gather(*comm, in, out)->wait();
  EXPECT_TRUE(out.equal(in));
  at::Tensor scattered = at::zeros({6}, cuda.dtype(at::kFloat));
  reduce_scatter(*comm, in, scattered, ReduceOp::kSum)->wait();
  EXPECT_TRUE(scattered.equal(in));
  at::Tensor data = in.to(at::kBFloat16);
  all_reduce(*comm, data, ReduceOp::kAvg)->wait();
  EXPECT_TRUE(data.equal(in.to(at::kBFloat16)));
  broadcast(*comm, data, 0)->wait();
  EXPECT_TRUE(data.device().is_cuda());
}

TEST(Nccl, WorldOfOneRunsEveryCollectiveOnDeviceAndHostMemory) {
  REQUIRE_CUDA();
  CommOptions options;
  options.backend = "nccl";
  options.device = "cuda";
  CommPtr comm = init_comm(options);
  EXPECT_EQ(comm->backend(), "nccl");
  EXPECT_EQ(comm->device(), CommDevice::kCuda);
  const auto cuda = at::TensorOptions().device(at::kCUDA, comm->device_index());
  at::Tensor in = at::arange(10, cuda.dtype(at::kFloat));
  at::Tensor out = at::zeros({10}, cuda.dtype(at::kFloat));
  all_gather(*comm, in, out)->wait();
  reduce_scatter(*comm, in, out, ReduceOp::kAvg)->wait();
  EXPECT_TRUE(out.equal(in));
  at::Tensor bf16 = in.to(at::kBFloat16);
  all_reduce(*comm, bf16, ReduceOp::kSum)->wait();
  EXPECT_TRUE(bf16.equal(in.to(at::kBFloat16)));
  // Host memory: the control messages of checkpoints and the trainer.
  int64_t token = 41;
  comm->all_reduce(&token, 1, DType::kInt64, ReduceOp::kSum);
  EXPECT_EQ(token, 41);
  std::vector<float> host = {1, 2, 3}, gathered(3);
  comm->all_gather(host.data(), gathered.data(), 3, DType::kFloat32);
  EXPECT_EQ(gathered, host);
  comm->barrier();
  CommPtr child = comm->split(0, 0);
  EXPECT_EQ(child->size(), 1);
  child->all_reduce(&token, 1, DType::kInt64, ReduceOp::kSum);
  EXPECT_EQ(token, 41);
}

// Five AdamW steps of a regression on fixed data; the losses.
std::vector<double> train_five_steps(torch::nn::Sequential& model, FullyShardedModel& sharded,
                                     c10::Device where) {
  AdamW opt(sharded_params(sharded), AdamWOptions());
  torch::manual_seed(11);
  const at::Tensor x = torch::randn({32, 8}).to(where), y = torch::randn({32, 4}).to(where);
  std::vector<double> losses;
  for (int step = 0; step < 5; ++step) {
    opt.zero_grad();
    at::Tensor loss = (fsdp::forward(model, x) - y).pow(2).mean();
    loss.backward();
    opt.step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

// Gradient accumulation: three steps of two micro-batches, the first under no_sync (which, under
// offload on a GPU, ends its backward without waiting for the GPU), then a step tried right after
// a no_sync backward, which is refused (its gradients never reached the shards) before it writes
// anything, and the step after the synchronised micro-batch, which waits for the queued copies of
// the shards before it writes them (ShardedParam::wait_writable).
std::vector<double> train_accumulating(torch::nn::Sequential& model, FullyShardedModel& sharded,
                                       c10::Device where) {
  AdamW opt(sharded_params(sharded), AdamWOptions());
  torch::manual_seed(12);
  const at::Tensor x = torch::randn({32, 8}).to(where), y = torch::randn({32, 4}).to(where);
  auto micro = [&](int i) {
    at::Tensor loss =
        (fsdp::forward(model, x.narrow(0, 16 * i, 16)) - y.narrow(0, 16 * i, 16)).pow(2).mean();
    loss.backward();
    return loss.item<double>();
  };
  std::vector<double> losses;
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    sharded.set_requires_gradient_sync(false);
    losses.push_back(micro(0));
    sharded.set_requires_gradient_sync(true);
    losses.push_back(micro(1));
    opt.step();
  }
  sharded.set_requires_gradient_sync(false);
  losses.push_back(micro(0));
  // A step here would not see micro-batch 0's gradients (unsharded, unreduced): refused, and
  // nothing written (the offloaded copies of the shards may still be in flight).
  EXPECT_THROW(opt.step(), std::runtime_error);
  EXPECT_EQ(opt.step_count(), 3);
  sharded.set_requires_gradient_sync(true);
  losses.push_back(micro(1));
  opt.step();
  return losses;
}

// The same model and steps sharded on the CPU and on the GPU: the GPU run keeps shards, gathered
// parameters, gradients and buffers there, and trains to the same losses within the difference
// of two sets of kernels (fp32 matmuls summed in other orders: 1e-5 relative on losses near 1).
TEST(CudaSharding, ParametersMovedToTheGpuTrainAsOnTheCpu) {
  REQUIRE_CUDA();
  auto losses = [](const std::string& device) {
    auto model = small_model();
    model->register_buffer("scale", torch::ones({1}));
    auto sharded = fully_shard(model.ptr(), make_local_comm(), ShardingOptions().device(device));
    const c10::Device where(device);
    for (const auto& p : model->parameters()) EXPECT_EQ(p.device().type(), where.type());
    for (const auto& b : model->buffers()) EXPECT_EQ(b.device().type(), where.type());
    return train_five_steps(model, *sharded, where);
  };
  const std::vector<double> cpu = losses("cpu"), gpu = losses("cuda");
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(gpu[i], cpu[i], 1e-5 * cpu[i]) << i;
  EXPECT_LT(gpu.back(), gpu.front());
}

// CPU offload: shards, gradient shards and the optimizer state in host memory (pinned when the
// model computes on a GPU), the model's parameters on its device, and the same training as
// without offload, with and without gradient accumulation under no_sync. On a CPU device it runs
// the offload path (staged shard copies, gradients landed
// after backward) with host memory on both sides, and must match bit for bit: the same kernels on
// the same values. On a GPU, forward and backward are the same kernels, but AdamW steps on the CPU
// under offload and on the GPU without: the two compilers fuse AdamW's multiply-adds differently,
// so an update may round a few ulps apart. Over the nine steps of lr 1e-3 that stays below 1e-6
// absolute on parameters of order 1 (a float's ulp there is 1.2e-7; measured on an H100: 1.5e-8),
// and the losses agree to 1e-6 relative.
void expect_offload_trains_as_without(const std::string& device) {
  auto run = [&](bool offload) {
    auto model = small_model();
    auto sharded = fully_shard(model.ptr(), make_local_comm(),
                               ShardingOptions().device(device).offload_params(offload));
    const c10::Device where(device);
    EXPECT_EQ(sharded->device().type(), where.type());
    for (const auto& p : model->parameters()) EXPECT_EQ(p.device().type(), where.type());
    for (const auto& s : sharded->shards()) {
      EXPECT_EQ(s.param.device().type(), offload ? c10::kCPU : where.type());
      EXPECT_EQ(s.param.is_pinned(), offload && where.is_cuda());
      EXPECT_EQ(s.grad.device(), s.param.device());
      EXPECT_EQ(static_cast<bool>(s.wait_writable), offload && where.is_cuda());
    }
    const MemoryStats m = sharded->memory();
    EXPECT_EQ(m.host_shard_bytes, offload ? m.sharded_param_bytes + m.sharded_grad_bytes : 0);
    std::vector<double> losses = train_five_steps(model, *sharded, where);
    for (double l : train_accumulating(model, *sharded, where)) losses.push_back(l);
    for (const auto& s : sharded->shards()) EXPECT_GT(s.grad.abs().sum().item<double>(), 0);
    return std::make_pair(losses, sharded->gather_full_params());
  };
  const auto plain = run(false), offloaded = run(true);
  const bool exact = c10::Device(device).is_cpu();
  for (size_t i = 0; i < plain.first.size(); ++i) {
    const double tolerance = exact ? 0 : 1e-6 * std::abs(plain.first[i]);
    EXPECT_NEAR(offloaded.first[i], plain.first[i], tolerance) << "step " << i;
  }
  for (const auto& [name, value] : plain.second) {
    const at::Tensor& got = offloaded.second.at(name);
    EXPECT_EQ(got.device().type(), c10::kCPU) << name << ": not where the offloaded shards are";
    const double diff = (got - value.to(at::kCPU)).abs().max().item<double>();
    EXPECT_LE(diff, exact ? 0 : 1e-6) << name;
    std::cout << "[ offload ] " << device << " " << name << ": max |difference| " << diff << "\n";
  }
}

// Side streams (core/streams.h): work issued on one runs beside the compute stream's later work
// instead of queueing before it. A large copy from pinned memory on the gather stream (about 40 ms
// over PCIe), then a tiny kernel on the compute stream: the kernel finishes while the copy is
// still running; on one stream it could not. The compute stream then waits for the copy's event
// before reading its result. On the CPU there are no side streams and nothing to wait for. (1 GiB
// of pinned host memory and 1 GiB on the GPU.)
TEST(Streams, SideStreamWorkRunsBesideLaterCompute) {
  EXPECT_FALSE(SideStreams(c10::Device(c10::kCPU)).gather().has_value());
  EXPECT_EQ(OnSideStream(std::nullopt).record(), nullptr);
  REQUIRE_CUDA();
  const c10::Device gpu(c10::kCUDA, 0);
  const SideStreams streams(gpu);
  ASSERT_TRUE(streams.gather().has_value());
  const at::Tensor host = at::ones({256 << 20}, at::TensorOptions().pinned_memory(true));
  const at::Tensor device = at::empty({256 << 20}, at::TensorOptions().device(gpu));
  at::Tensor small = at::zeros({16}, at::TensorOptions().device(gpu));
  streams.synchronize(std::chrono::seconds(60), "the test's set-up");
  std::unique_ptr<c10::Event> copied;
  {
    OnSideStream side(streams.gather());
    device.copy_(host, /*non_blocking=*/true);
    copied = side.record();
  }
  small.add_(1);  // on the compute stream, queued after the copy
  c10::Event computed(c10::kCUDA);
  computed.record(c10::impl::VirtualGuardImpl(c10::kCUDA).getStream(gpu));
  while (!computed.query()) {
  }
  EXPECT_FALSE(copied->query()) << "the compute stream's kernel waited for the side stream's copy";
  wait_for(copied, gpu);
  EXPECT_EQ(copied, nullptr);
  EXPECT_TRUE(device.eq(1).all().item<bool>());
}

TEST(Offload, OnTheCpuTrainsAsWithout) { expect_offload_trains_as_without("cpu"); }

TEST(Offload, OnTheGpuKeepsShardsPinnedOnTheHostAndTrainsAsWithout) {
  REQUIRE_CUDA();
  expect_offload_trains_as_without("cuda");
}

}  // namespace
}  // namespace fsdp
