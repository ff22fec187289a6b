// The multi-rank tests' group: one per process, created lazily so that single-process tests in the
// same binary never start a rendezvous. And the model-free parts of the parity tests.
#include "test_util.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "compat.h"

namespace fsdp {
namespace test {
namespace {
CommPtr& world_slot() {
  static CommPtr comm;
  return comm;
}
}  // namespace

std::string backend_under_test() {
  const char* b = std::getenv("FSDP_TEST_BACKEND");
  return b ? b : "auto";
}

c10::Device device_under_test() {
  const char* d = std::getenv("FSDP_TEST_DEVICE");
  return c10::Device(d && *d ? d : "cpu");
}

std::string device_skip_reason() {
  const c10::Device device = device_under_test();
  if (device.is_cuda() && !at::globalContext().hasCUDA()) {
    return std::string("FSDP_TEST_DEVICE=") + std::getenv("FSDP_TEST_DEVICE") +
           ", and CUDA is not available here (this LibTorch has no CUDA, or no GPU is visible): "
           "CUDA tests run on a GPU machine (scripts/gpu.sh)";
  }
  return "";
}

std::string fp16_skip_reason() {
  if (!device_under_test().is_cpu() || compat::kHasCpuHalfKernels) return "";
  return "LibTorch " TORCH_VERSION
         " has no fp16 matmul on the CPU (LibTorch 2.x has): the fp16 compute tests run in the "
         "LibTorch 2.x suite and on GPUs";
}

CommPtr world() {
  CommPtr& comm = world_slot();
  if (!comm) {
    CommOptions options;
    options.backend = backend_under_test();
    options.device = device_under_test().is_cuda() ? "cuda" : "cpu";
    options.timeout = std::chrono::seconds(60);
    comm = init_comm(options);
  }
  return comm;
}

// A barrier first: a test that ended on an error every rank expected (note_local_error) must not
// make the MPI backend abort the job at exit.
void shutdown() {
  if (world_slot()) world_slot()->barrier();
  world_slot().reset();
}

at::Tensor bigram_tokens(uint64_t seed, int64_t rows, int64_t T, int64_t V) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor tokens = at::empty({rows, T + 1}, at::kLong);
  tokens.select(1, 0).copy_(at::randint(V, {rows}, gen, at::kLong));
  for (int64_t i = 1; i <= T; ++i) {
    tokens.select(1, i).copy_((tokens.select(1, i - 1) * 5 + 3).remainder(V));
  }
  return tokens;
}

double reference_gradients(const std::vector<at::Tensor>& compute,
                           const std::vector<at::Tensor>& master, int world_size, int micro_batches,
                           at::ScalarType reduce_dtype,
                           const std::function<at::Tensor(int rank, int micro_batch)>& loss) {
  std::vector<at::Tensor> sum(compute.size());
  double reported = 0;
  for (int r = 0; r < world_size; ++r) {
    for (auto& p : compute) p.mutable_grad().reset();
    double rank_loss = 0;
    for (int m = 0; m < micro_batches; ++m) {
      at::Tensor l = loss(r, m);
      (l / micro_batches).backward();
      rank_loss += l.item<double>() / micro_batches;
    }
    reported += static_cast<float>(rank_loss);
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < compute.size(); ++i) {
      at::Tensor g = compute[i].grad().to(reduce_dtype);
      sum[i] = r == 0 ? g.clone() : sum[i].add(g);
    }
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < master.size(); ++i) {
    if (world_size > 1) sum[i].div_(world_size);
    master[i].mutable_grad() = sum[i].to(at::kFloat);
  }
  return reported / world_size;
}

at::Tensor rank_rows(const at::Tensor& tokens, int micro_batch, int rank, int64_t rows_per_rank,
                     int world_size) {
  return tokens.narrow(0, (micro_batch * world_size + rank) * rows_per_rank, rows_per_rank);
}

void apply_onednn_setting() {
  const char* v = std::getenv("FSDP_TEST_ONEDNN");
  if (v && std::string(v) == "off") at::globalContext().setUserEnabledMkldnn(false);
}

std::unique_ptr<torch::optim::AdamW> reference_adamw(const std::vector<at::Tensor>& params,
                                                     double lr, double eps, double weight_decay) {
  std::vector<at::Tensor> decay, no_decay;
  for (const auto& p : params) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto options = [&](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(lr).eps(eps).weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, options(weight_decay));
  groups.emplace_back(no_decay, options(0.0));
  return std::make_unique<torch::optim::AdamW>(std::move(groups));
}

ParityErrors expect_parity(const RunResult& ref, const RunResult& got,
                           const std::map<std::string, at::Tensor>& initial, Tolerance tol) {
  ParityErrors worst;
  EXPECT_EQ(ref.losses.size(), got.losses.size());
  EXPECT_EQ(ref.grad_norms.size(), got.grad_norms.size());
  for (size_t i = 0; i < std::min(ref.losses.size(), got.losses.size()); ++i) {
    EXPECT_NEAR(ref.losses[i], got.losses[i], tol.loss) << "loss at step " << i;
    const double norm_tol = i == 0 ? tol.first_grad_norm : tol.grad_norm;
    EXPECT_NEAR(ref.grad_norms[i], got.grad_norms[i], norm_tol * ref.grad_norms[i])
        << "gradient norm at step " << i;
    worst.loss = std::max(worst.loss, std::abs(ref.losses[i] - got.losses[i]));
    const double norm_err = std::abs(ref.grad_norms[i] - got.grad_norms[i]) / ref.grad_norms[i];
    if (i == 0) worst.first_grad_norm_rel = norm_err;
    worst.grad_norm_rel = std::max(worst.grad_norm_rel, norm_err);
  }
  EXPECT_EQ(ref.params.size(), got.params.size());
  double err_sq = 0, update_sq = 0;
  for (const auto& [name, expected] : ref.params) {
    auto it = got.params.find(name);
    auto init = initial.find(name);
    if (it == got.params.end() || init == initial.end()) {
      ADD_FAILURE() << "parameter " << name << " missing from the sharded run or the initial model";
      continue;
    }
    if (expected.sizes() != it->second.sizes()) {
      ADD_FAILURE() << "parameter " << name << ": shape " << it->second.sizes() << ", expected "
                    << expected.sizes();
      continue;
    }
    const double diff = (expected - it->second).abs().max().item<double>();
    const at::Tensor ref_update = expected - init->second;
    const double err = (it->second - expected).norm().item<double>();
    const double rel = err / ref_update.norm().item<double>();
    err_sq += err * err;
    update_sq += ref_update.norm().pow(2).item<double>();
    if (diff >= worst.param) {
      worst.param = diff;
      worst.param_name = name;
    }
    EXPECT_LE(diff, tol.param) << "parameter " << name;
    if (rel >= worst.tensor_update_rel) {
      worst.tensor_update_rel = rel;
      worst.tensor_name = name;
    }
    if (tol.tensor_update_rel > 0) {
      EXPECT_LE(rel, tol.tensor_update_rel) << "update of " << name;
    }
    // Training moved every parameter (10 steps of lr 1e-2 move most elements by 0.05-0.1):
    // parity is not met by an untouched model.
    EXPECT_GT(ref_update.abs().max().item<double>(), 1e-2) << name;
  }
  worst.model_update_rel = std::sqrt(err_sq / update_sq);
  EXPECT_LE(worst.model_update_rel, tol.model_update_rel) << "update of the whole model";
  if (!got.losses.empty()) {
    EXPECT_LT(got.losses.back(), 0.8 * got.losses.front()) << "the model learned";
  }
  return worst;
}

}  // namespace test
}  // namespace fsdp
