// Helpers shared by the multi-rank tests: the process-wide group under test, and the parts of a
// parity test that know no model (training data, the reference optimizer, the comparison).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/optim/adamw.h>

#include <cstdint>
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
void shutdown();

// --- parity: FSDP against one process ----------------------------------------------------------

// Token rows [rows, T + 1] drawn from `seed`: each row starts at a random token and follows
// x[i+1] = (5 x[i] + 3) mod V, a bigram rule a small model learns within 10 steps, so that a parity
// comparison is made on a model that actually trained.
at::Tensor bigram_tokens(uint64_t seed, int64_t rows, int64_t T, int64_t V);

// torch::optim::AdamW over `params` with weight decay on matrices and embeddings only (dim >= 2,
// as fsdp::default_decay_rule), the reference optimizer of the parity tests.
std::unique_ptr<torch::optim::AdamW> reference_adamw(const std::vector<at::Tensor>& params,
                                                     double lr, double eps, double weight_decay);

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
  double loss = 0;           // absolute, worst step
  double grad_norm_rel = 0;  // relative, worst step
  double param = 0;          // absolute, worst element
  double model_update_rel = 0;
};

// Expects `got` to match the reference run `ref` within `tol`, both having started from the
// parameters `initial`; also expects training to have moved every parameter and lowered the loss.
ParityErrors expect_parity(const RunResult& ref, const RunResult& got,
                           const std::map<std::string, at::Tensor>& initial, Tolerance tol);

}  // namespace test
}  // namespace fsdp
