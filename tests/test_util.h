// Helpers shared by the multi-rank tests: the process-wide group under test, and the parts of a
// parity test that know no model (training data, the reference optimizer, the comparison).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/optim/adamw.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fsdp/comm.h"

namespace fsdp {
namespace test {

// The group every rank of this test run belongs to, joined on first use with the backend named
// by FSDP_TEST_BACKEND ("mpi", "gloo"; default "auto") and a 60 s collective timeout.
CommPtr world();
// Name of the backend under test.
std::string backend_under_test();
// The device the test's models and data live on: FSDP_TEST_DEVICE ("cpu" by default, or "cuda").
c10::Device device_under_test();
// Why this process cannot run on that device ("" when it can): the shared test main reports the
// binary skipped (exit 77) with it.
std::string device_skip_reason();
void shutdown();
// Why this process cannot compute in fp16 on the device under test ("" when it can): LibTorch
// 1.13 has no fp16 CPU matmul, so its fp16 compute tests skip with this reason (the LibTorch 2.x
// suite and the GPU runs hold them).
std::string fp16_skip_reason();

// --- parity: FSDP against one process ----------------------------------------------------------

// Token rows [rows, T + 1] drawn from `seed`: each row starts at a random token and follows
// x[i+1] = (5 x[i] + 3) mod V, a bigram rule a small model learns within 10 steps, so that a parity
// comparison is made on a model that actually trained.
at::Tensor bigram_tokens(uint64_t seed, int64_t rows, int64_t T, int64_t V);

// torch::optim::AdamW over `params` with weight decay on matrices and embeddings only (dim >= 2,
// as fsdp::default_decay_rule), the reference optimizer of the parity tests.
std::unique_ptr<torch::optim::AdamW> reference_adamw(const std::vector<at::Tensor>& params,
                                                     double lr, double eps, double weight_decay);

// The reference of a sharded step, in one process: sets each master parameter's .grad to what a
// sharded run over `world_size` ranks reduces. Rank r's gradient is that of its own micro-batches,
// loss(r, m) / micro_batches accumulated in the compute parameters' dtype, exactly as rank r
// computes it (same rows, same shapes, hence the same kernels: a bf16 matmul rounds differently
// per shape and per kernel, oneDNN or native); the ranks' gradients are cast to `reduce_dtype`,
// summed in rank order and divided by world_size in that dtype, as the runtime's reduce-scatter
// does. What is left between the two runs is the order of that one sum over ranks (and, after it,
// the optimizers' own rounding). `compute` and `master` may be the same tensors (fp32). Returns
// the step's loss as the sharded run reports it: each rank's mean over its micro-batches, as a
// float, averaged over ranks.
double reference_gradients(const std::vector<at::Tensor>& compute,
                           const std::vector<at::Tensor>& master, int world_size, int micro_batches,
                           at::ScalarType reduce_dtype,
                           const std::function<at::Tensor(int rank, int micro_batch)>& loss);

// Rows [rows_per_rank] of micro-batch `micro_batch` that rank `rank` trains on, out of a step's
// tokens [micro_batches * world_size * rows_per_rank, T + 1]; the reference takes the same ones.
at::Tensor rank_rows(const at::Tensor& tokens, int micro_batch, int rank, int64_t rows_per_rank,
                     int world_size);

// Makes the process run bf16 (and other oneDNN-eligible) CPU kernels without oneDNN when
// FSDP_TEST_ONEDNN=off, as LibTorch 1.13 does on CPUs without AVX-512: lets one machine test the
// kernel another machine gets. Called by the shared test main.
void apply_onednn_setting();

// One training run: per-step loss and global gradient norm, and the final parameters by name.
struct RunResult {
  std::vector<double> losses;
  std::vector<double> grad_norms;  // before clipping; catches gradient-scale errors Adam hides
  std::map<std::string, at::Tensor> params;
};

struct Tolerance {
  double loss;             // absolute, per step
  double first_grad_norm;  // relative, at step 0 (same parameters in both runs)
  double grad_norm;        // relative, at later steps (parameters apart by the error so far)
  double param;            // absolute, per element, after the last step
  // Relative error of the training update, |p_got - p_ref| / |p_ref - p0| (L2 norms): per tensor
  // (0: not checked) and over the whole model.
  double tensor_update_rel;
  double model_update_rel;
};

// The largest errors expect_parity saw, for tests that report what they measured.
struct ParityErrors {
  double loss = 0;                 // absolute, worst step
  double first_grad_norm_rel = 0;  // relative, step 0
  double grad_norm_rel = 0;        // relative, worst step
  double param = 0;                // absolute, worst element
  std::string param_name;          // the tensor that holds it
  double tensor_update_rel = 0;    // worst tensor
  std::string tensor_name;
  double model_update_rel = 0;
};

// Expects `got` to match the reference run `ref` within `tol`, both having started from the
// parameters `initial`; also expects training to have moved every parameter and lowered the loss.
ParityErrors expect_parity(const RunResult& ref, const RunResult& got,
                           const std::map<std::string, at::Tensor>& initial, Tolerance tol);

}  // namespace test
}  // namespace fsdp
