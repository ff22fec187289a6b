// Optimizer tests. The oracle is LibTorch itself: ordinary parameters of odd shapes stepped by
// torch::optim (decayed and non-decayed parameters in two param groups) versus the same values
// flattened into shards, cut anywhere as FSDP cuts them, with a decay mask, stepped by ours.
// AdamW's op-by-op path (AdamWImpl::kReference) must equal torch bit for bit; the fused kernel
// must equal that path within a tolerance derived before its tests, on odd sizes, uneven and
// fragmented masks, one and two threads. Also: clipping against torch::nn::utils::clip_grad_norm_
// (one rank, and two ranks simulated by a fake group), the LR schedule, and errors for bad shards.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "compat.h"
#include "fsdp/optim.h"
#include "optim/adamw_fused.h"
#include "optim/kernels/adamw_kernel.h"

namespace fsdp {
namespace {

constexpr int kSteps = 10;

// --- fixtures: ordinary parameters and their flattened shards ------------------------------------

using Shapes = std::vector<std::vector<int64_t>>;
// clang-format off
const Shapes kShapes = {{7, 15}, {15}, {3, 4, 5}, {1}, {33}, {8, 9}, {2}};
// Large enough for vectorised loops with tails and, with more threads, several chunks per tensor.
const Shapes kLargeShapes = {{301, 129}, {129}, {67, 1031}, {1031}, {5}};
// clang-format on

std::vector<at::Tensor> make_params(uint64_t seed, const Shapes& shapes = kShapes) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<at::Tensor> out;
  for (const auto& shape : shapes) out.push_back(at::randn(shape, gen).requires_grad_(true));
  return out;
}

// Gradients of step `step`, the same for every run.
std::vector<at::Tensor> make_grads(int step, const Shapes& shapes = kShapes) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 + step);
  std::vector<at::Tensor> out;
  for (const auto& shape : shapes) out.push_back(at::randn(shape, gen));
  return out;
}

at::Tensor flatten(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> flat;
  for (const auto& t : ts) flat.push_back(t.detach().reshape({-1}));
  return at::cat(flat);
}

at::Tensor dim_mask(const std::vector<at::Tensor>& ps) {
  std::vector<at::Tensor> parts;
  for (const auto& p : ps) parts.push_back(at::full({p.numel()}, p.dim() >= 2 ? 1.0 : 0.0));
  return at::cat(parts);
}

// Cuts flat tensors at `cuts` (element offsets) into shards that own their storage.
std::vector<ShardedParam> make_shards(const at::Tensor& param, const at::Tensor& mask,
                                      const std::vector<int64_t>& cuts) {
  std::vector<ShardedParam> out;
  int64_t begin = 0;
  std::vector<int64_t> ends = cuts;
  ends.push_back(param.numel());
  for (int64_t end : ends) {
    ShardedParam s;
    s.param = param.narrow(0, begin, end - begin).clone();
    s.grad = at::zeros_like(s.param);
    if (mask.defined()) s.decay_mask = mask.narrow(0, begin, end - begin).clone();
    out.push_back(s);
    begin = end;
  }
  return out;
}

void load_grads(const std::vector<ShardedParam>& shards, const at::Tensor& flat_grad) {
  int64_t begin = 0;
  for (const auto& s : shards) {
    s.grad.copy_(flat_grad.narrow(0, begin, s.grad.numel()));
    begin += s.grad.numel();
  }
}

at::Tensor gather(const std::vector<ShardedParam>& shards) {
  std::vector<at::Tensor> ps;
  for (const auto& s : shards) ps.push_back(s.param);
  return at::cat(ps);
}

double max_rel_diff(const at::Tensor& a, const at::Tensor& b) {
  return ((a - b).abs() / b.abs().clamp_min(1e-12)).max().item<double>();
}

// Steps torch's optimizer and ours kSteps times on the same gradients; returns {torch, ours}.
std::pair<at::Tensor, at::Tensor> run_both(std::vector<at::Tensor> ref_params,
                                           torch::optim::Optimizer& ref, ShardedOptimizer& ours,
                                           const std::vector<ShardedParam>& shards,
                                           const Shapes& shapes = kShapes) {
  for (int step = 0; step < kSteps; ++step) {
    auto grads = make_grads(step, shapes);
    for (size_t i = 0; i < ref_params.size(); ++i) ref_params[i].mutable_grad() = grads[i].clone();
    ref.step();
    ours.zero_grad();
    load_grads(shards, flatten(grads));
    ours.step();
  }
  return {flatten(ref_params), gather(shards)};
}

std::vector<torch::optim::OptimizerParamGroup> adamw_groups(const std::vector<at::Tensor>& ps,
                                                            double lr, double wd) {
  std::vector<at::Tensor> decay, no_decay;
  for (const auto& p : ps) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                 torch::optim::AdamWOptions(lr).weight_decay(wd)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                    torch::optim::AdamWOptions(lr).weight_decay(0.0)));
  return groups;
}

// --- AdamW
// ----------------------------------------------------------------------------------------

TEST(AdamW, MatchesTorchWithDecayMaskBitForBit) {
  const double lr = 1e-2, wd = 0.1;
  auto ref_params = make_params(1);
  torch::optim::AdamW ref(adamw_groups(ref_params, lr, wd));
  auto start = make_params(1);
  // Cuts inside parameters, as FSDP's flat shards cut them.
  auto shards = make_shards(flatten(start), dim_mask(start), {50, 51, 200});
  AdamWOptions options;
  options.lr = lr;
  options.weight_decay = wd;
  options.impl = AdamWImpl::kReference;
  AdamW ours(shards, options);
  auto [expected, actual] = run_both(ref_params, ref, ours, shards);
  EXPECT_LT(max_rel_diff(actual, expected), 1e-6);
  EXPECT_TRUE(at::equal(actual, expected))
      << "max relative difference " << max_rel_diff(actual, expected);
  EXPECT_EQ(ours.step_count(), kSteps);
}

TEST(AdamW, LargeShardsMatchTorchBitForBit) {
  auto ref_params = make_params(6, kLargeShapes);
  torch::optim::AdamW ref(adamw_groups(ref_params, 1e-3, 0.1));
  auto start = make_params(6, kLargeShapes);
  auto shards = make_shards(flatten(start), dim_mask(start), {12345, 40000, 70001});
  AdamWOptions options;
  options.weight_decay = 0.1;
  options.impl = AdamWImpl::kReference;
  AdamW ours(shards, options);
  auto [expected, actual] = run_both(ref_params, ref, ours, shards, kLargeShapes);
  EXPECT_TRUE(at::equal(actual, expected)) << max_rel_diff(actual, expected);
}

TEST(AdamW, UndefinedMaskDecaysEverything) {
  auto ref_params = make_params(2);
  torch::optim::AdamW ref(ref_params, torch::optim::AdamWOptions(3e-3).weight_decay(0.05));
  auto start = make_params(2);
  auto shards = make_shards(flatten(start), at::Tensor(), {100});
  AdamWOptions options;
  options.lr = 3e-3;
  options.weight_decay = 0.05;
  options.impl = AdamWImpl::kReference;
  AdamW ours(shards, options);
  auto [expected, actual] = run_both(ref_params, ref, ours, shards);
  EXPECT_TRUE(at::equal(actual, expected)) << max_rel_diff(actual, expected);
}

// A mask too fragmented for runs goes through where(); the oracle steps the whole tensor twice
// with torch, with and without decay, and picks per element.
TEST(AdamW, FragmentedMaskMatchesElementwiseReference) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const int64_t n = 4000;
  at::Tensor init = at::randn({n}, gen);
  at::Tensor mask = at::randint(2, {n}, gen).to(at::kFloat);
  at::Tensor with = init.clone().requires_grad_(true), without = init.clone().requires_grad_(true);
  torch::optim::AdamW ref_with({with}, torch::optim::AdamWOptions(1e-2).weight_decay(0.2));
  torch::optim::AdamW ref_without({without}, torch::optim::AdamWOptions(1e-2).weight_decay(0));
  auto shards = make_shards(init, mask, {1234});
  AdamWOptions options;
  options.lr = 1e-2;
  options.weight_decay = 0.2;
  options.impl = AdamWImpl::kReference;
  AdamW ours(shards, options);
  for (int step = 0; step < kSteps; ++step) {
    at::Tensor g = at::randn({n}, gen);
    with.mutable_grad() = g.clone();
    without.mutable_grad() = g.clone();
    ref_with.step();
    ref_without.step();
    load_grads(shards, g);
    ours.step();
  }
  at::Tensor expected = at::where(mask.to(at::kBool), with.detach(), without.detach());
  EXPECT_TRUE(at::equal(gather(shards), expected)) << max_rel_diff(gather(shards), expected);
}

TEST(AdamW, StateLrAndZeroGrad) {
  auto shards = make_shards(at::ones({300}), at::Tensor(), {100});
  AdamW opt(shards);
  EXPECT_EQ(opt.state_bytes(), 2 * 300 * 4);
  EXPECT_EQ(opt.exp_avg(1).numel(), 200);
  EXPECT_DOUBLE_EQ(opt.lr(), 1e-3);
  opt.set_lr(5e-4);
  EXPECT_DOUBLE_EQ(opt.lr(), 5e-4);
  shards[0].grad.fill_(2);
  const void* storage = shards[0].grad.data_ptr();
  opt.step();
  EXPECT_GT(opt.exp_avg(0).abs().sum().item<double>(), 0);
  opt.zero_grad();
  EXPECT_EQ(shards[0].grad.data_ptr(), storage);
  EXPECT_EQ(opt.params()[0].grad.abs().sum().item<double>(), 0);
}

// --- fused AdamW against the op-by-op path -------------------------------------------------------
//
// Tolerance of the fused kernel against the reference (which is torch, bit for bit), per element
// after K steps, with u = 2^-24 (fp32 unit roundoff). Both paths do the same operations in the
// same order, with correctly rounded sqrt and division; what may differ is where a build contracts
// a multiply-add into an FMA (a LibTorch compiled by another compiler, or ATen's scalar tails, may
// fuse where the kernel does not, or the reverse), a difference of one rounding per multiply-add,
// plus whatever the differences in m and v carry into the update.
//  - v, a sum of non-negative terms: at most 3u relative per step, so |dv| <= 3uK |v|.
//  - m: |dm_t| <= b1 |dm_t-1| + 2u G, where G bounds |g| at that element over the steps (|m| <= G
//    too), so |dm| <= 2uK G.
//  - p: per step the decay and the final add round at most u|p| apart each, and the update
//    lr/bc1 * m/denom moves by (i) dm over denom: denom >= sqrt(v/bc2) >= sqrt((1-b2) b2^K / bc2)
//    G, so at most lr sqrt(bc2) / (bc1 sqrt(1-b2)) * 2uK (<= 10 * 2uK lr for the default betas,
//    step 1 the worst) and (ii) the update's own relative error, (1/2 * 3uK from v) + 5u (sqrt, two
//    divisions, eps, the multiply), times |m^/(sqrt(v^)+eps)| <= (1-b1) / sqrt((1-b2)(1-b1^2/b2))
//    = 7.3 (Cauchy-Schwarz over the gradient history). Summed over K steps:
//      |dp| <= 2uK |p| + K lr u (20K + 7.3 (1.5K + 5)) <= 2uK |p| + K lr u (31K + 37).
// At K = 10, lr = 1e-2 that is 1.2e-6 |p| + 2.1e-6. With Debian's LibTorch 1.13 the kernel writes
// the FMAs torch's kernels compile to, and the measured error (this test prints it) is 0 under
// every ATEN_CPU_CAPABILITY; with every multiply-add unfused it was at most 0.3 of the bound. The
// bound is for a LibTorch built by another compiler, which may fuse elsewhere.
constexpr double kU = 1.0 / (1 << 24);

// A decay mask of `kind` over n elements: "runs", uneven regions (lengths 3, 1, 17, 2, 1029, 5,
// 40000, 7, repeating; off first), "fragmented", random 0/1 (too many runs: the bool-mask path),
// or "none" (undefined: decay everywhere).
at::Tensor make_mask(const std::string& kind, int64_t n, uint64_t seed) {
  if (kind == "none") return at::Tensor();
  if (kind == "fragmented") {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    return at::randint(2, {n}, gen).to(at::kFloat);
  }
  const int64_t lengths[] = {3, 1, 17, 2, 1029, 5, 40000, 7};
  at::Tensor mask = at::zeros({n});
  float value = 0;
  for (int64_t begin = 0, k = 0; begin < n; begin += lengths[k++ % 8], value = 1 - value) {
    mask.narrow(0, begin, std::min(lengths[k % 8], n - begin)).fill_(value);
  }
  return mask;
}

// Shards of the odd sizes the fused kernel must handle: a single element, less than one vector,
// and a million and three (tails in every chunk split, two threads' worth of chunks).
std::vector<ShardedParam> odd_shards(const std::string& mask_kind) {
  std::vector<ShardedParam> out;
  uint64_t seed = 10;
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000003}}) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed++);
    out.push_back({at::randn({n}, gen), at::zeros({n}), make_mask(mask_kind, n, seed++)});
  }
  return out;
}

std::vector<ShardedParam> clone_shards(const std::vector<ShardedParam>& shards,
                                       const c10::Device& device = at::kCPU) {
  std::vector<ShardedParam> out;
  for (const auto& s : shards) {
    out.push_back({s.param.to(device, false, true), s.grad.to(device, false, true),
                   s.decay_mask.defined() ? s.decay_mask.to(device, false, true) : at::Tensor()});
  }
  return out;
}

// Sets the intra-op thread count for one scope.
class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(at::get_num_threads()) { at::set_num_threads(n); }
  ~ThreadCount() { at::set_num_threads(saved_); }

 private:
  int saved_;
};

// Steps `a` and `b` kSteps times on the same random gradients; returns, per shard, the largest
// |g| each element saw.
std::vector<at::Tensor> step_together(AdamW& a, AdamW& b) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(77);
  std::vector<at::Tensor> g_max;
  for (const auto& s : a.params()) g_max.push_back(at::zeros_like(s.param));
  for (int step = 0; step < kSteps; ++step) {
    for (size_t i = 0; i < a.params().size(); ++i) {
      const at::Tensor g =
          at::randn(a.params()[i].grad.sizes(), gen).to(a.params()[i].grad.device());
      a.params()[i].grad.copy_(g);
      b.params()[i].grad.copy_(g);
      g_max[i] = at::maximum(g_max[i], g.abs());
    }
    a.step();
    b.step();
  }
  return g_max;
}

// Largest |got - want| / tol over the elements; <= 1 passes.
double worst_ratio(const at::Tensor& got, const at::Tensor& want, const at::Tensor& tol) {
  return ((got - want).abs() / tol.clamp_min(1e-30)).max().item<double>();
}

// ATen's CUDA kernel (the GPU's kFused) takes beta1 and beta2 in fp32 and computes 1 - beta
// there: at beta2 = 0.999, 1 - fl(beta2) is 0.00099998713, 1.3e-5 relative below 1 - beta2, on
// every new term of v; the reference takes them in double. Relative to the CPU's bound this adds,
// with d = |(1 - fl(b)) - (1 - b)| / (1 - b) and e = K |fl(b) - b| / b (the powers of fl(b)):
//  - v (each term scaled by 1 - fl(b2), decayed by fl(b2)): d2 + e2; m likewise: d1 + e1.
//  - the update per step: m's and bc1's relative errors (each d1 + e1), and half of v's and of
//    bc2's (under the square root), times |update| <= 7.3 lr as in (ii):
//    7.3 lr (2 (d1 + e1) + d2 + e2).
// Measured on an H200 (LibTorch 2.11, 2026-11-28) against the CPU's bound: v 7.2 to 7.5 times it
// (the 1.3e-5 alone), p 0.18, m 0.15.
struct BetaErrors {
  double m = 0, v = 0, update = 0;
};

BetaErrors fp32_beta_errors(const AdamWOptions& o) {
  auto d = [](double b) {
    const float one_minus = 1.0f - static_cast<float>(b);
    return std::abs(static_cast<double>(one_minus) - (1 - b)) / (1 - b);
  };
  auto e = [](double b) { return kSteps * std::abs(static_cast<float>(b) - b) / b; };
  BetaErrors r;
  r.m = d(o.beta1) + e(o.beta1);
  r.v = d(o.beta2) + e(o.beta2);
  r.update = 2 * r.m + r.v;
  return r;
}

void expect_fused_matches_reference(const std::string& mask_kind, int threads, AdamWOptions options,
                                    const c10::Device& device = at::kCPU) {
  ThreadCount scope(threads);
  ASSERT_EQ(at::get_num_threads(), threads);
  const auto shards = odd_shards(mask_kind);
  options.impl = AdamWImpl::kFused;
  AdamW fused(clone_shards(shards, device), options);
  options.impl = AdamWImpl::kReference;
  AdamW reference(clone_shards(shards, device), options);
  const auto g_max = step_together(fused, reference);
  const double K = kSteps, lr = options.lr;
  const BetaErrors beta = device.is_cpu() ? BetaErrors{} : fp32_beta_errors(options);
  for (size_t i = 0; i < shards.size(); ++i) {
    ASSERT_TRUE(fused.fused(i));
    ASSERT_FALSE(reference.fused(i));
    const at::Tensor& p = reference.params()[i].param;
    const at::Tensor& v = reference.exp_avg_sq(i);
    const double p_worst = worst_ratio(
        fused.params()[i].param, p,
        2 * kU * K * p.abs() + K * lr * kU * (31 * K + 37) + K * lr * 7.3 * beta.update);
    const double m_worst =
        worst_ratio(fused.exp_avg(i), reference.exp_avg(i), (2 * kU * K + beta.m) * g_max[i]);
    const double v_worst = worst_ratio(fused.exp_avg_sq(i), v, (3 * kU * K + beta.v) * v.abs());
    // Debian's LibTorch 1.13 (the one 1.x we build against) is bit for bit what the kernel
    // reproduces, as include/fsdp/optim.h claims.
    if (!compat::kTorch2 && device.is_cpu()) {
      EXPECT_TRUE(at::equal(fused.params()[i].param, p)) << "param, shard " << i;
      EXPECT_TRUE(at::equal(fused.exp_avg_sq(i), v)) << "exp_avg_sq, shard " << i;
    }
    EXPECT_LE(p_worst, 1.0) << "param, shard " << i;
    EXPECT_LE(m_worst, 1.0) << "exp_avg, shard " << i;
    EXPECT_LE(v_worst, 1.0) << "exp_avg_sq, shard " << i;
    std::cout << "[ fused ] " << device << ", " << mask_kind << ", " << threads
              << " thread(s), shard of " << p.numel() << ": worst error / tolerance: param "
              << p_worst << ", exp_avg " << m_worst << ", exp_avg_sq " << v_worst << std::endl;
  }
}

AdamWOptions fused_test_options() {
  AdamWOptions o;
  o.lr = 1e-2;
  o.weight_decay = 0.1;
  return o;
}

class FusedAdamW : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(FusedAdamW, MatchesReferenceWithinRounding) {
  expect_fused_matches_reference(std::get<0>(GetParam()), std::get<1>(GetParam()),
                                 fused_test_options());
}

INSTANTIATE_TEST_SUITE_P(MasksAndThreads, FusedAdamW,
                         ::testing::Combine(::testing::Values("runs", "fragmented", "none"),
                                            ::testing::Values(1, 2)));

// On a CUDA GPU kFused is ATen's kernel (torch.optim.AdamW(fused=True)'s), over the shard's
// decayed runs and the rest: the CPU's bound plus the kernel's fp32 betas (fp32_beta_errors; its
// decay p - lr wd p is one rounding, as p (1 - lr wd)). kAuto stays op by op there.
class FusedAdamWOnGpu : public ::testing::TestWithParam<std::string> {};

TEST_P(FusedAdamWOnGpu, MatchesReferenceWithinRounding) {
  if (!at::globalContext().hasCUDA()) {
    GTEST_SKIP() << "CUDA is not available here (a LibTorch without CUDA, or no GPU visible): "
                    "this runs on a GPU machine (scripts/gpu.sh)";
  }
  if (!compat::kHasFusedAdamW) GTEST_SKIP() << "this LibTorch has no at::_fused_adamw_ (2.0+)";
  const c10::Device gpu(at::kCUDA, 0);
  EXPECT_FALSE(AdamW(clone_shards(odd_shards(GetParam()), gpu)).fused(0)) << "kAuto on a GPU";
  expect_fused_matches_reference(GetParam(), 1, fused_test_options(), gpu);
  AdamWOptions no_decay = fused_test_options();
  no_decay.weight_decay = 0;
  expect_fused_matches_reference(GetParam(), 1, no_decay, gpu);
}

INSTANTIATE_TEST_SUITE_P(Masks, FusedAdamWOnGpu, ::testing::Values("runs", "fragmented", "none"));

TEST(FusedAdamWOptions, OtherHyperparametersAndNoDecay) {
  AdamWOptions o = fused_test_options();
  o.weight_decay = 0;  // the kernel's no-decay branch
  expect_fused_matches_reference("runs", 2, o);
  o = fused_test_options();
  o.lr = 3e-3, o.beta1 = 0.8, o.beta2 = 0.99, o.eps = 1e-6;
  // Betas away from the defaults loosen (ii)'s constant: (1-b1)/sqrt((1-b2)(1-b1^2/b2)) = 3.3 and
  // the first step's factor sqrt(bc2)/(bc1 sqrt(1-b2)) = 5, both below the defaults' 7.3 and 10.
  expect_fused_matches_reference("runs", 1, o);
}

// Elementwise work with no reductions: the thread split cannot change a single bit.
// The variant that runs: the widest this build compiled that the CPU supports, capped by
// ATEN_CPU_CAPABILITY (test_optim_fused_default and test_optim_fused_avx2 set it), so that those
// entries really run the narrower code.
TEST(FusedAdamWKernel, VariantFollowsTheCpuAndTheCap) {
  const std::vector<std::string> order = {"DEFAULT", "AVX2", "AVX512"};
  int level =
      static_cast<int>(std::find(order.begin(), order.end(), FSDP_ADAMW_WIDEST) - order.begin());
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  level = std::min(level, avx512 ? 2 : avx2 ? 1 : 0);
  const char* cap = std::getenv("ATEN_CPU_CAPABILITY");
  if (cap != nullptr && std::string(cap) == "default") level = 0;
  if (cap != nullptr && std::string(cap) == "avx2") level = std::min(level, 1);
  EXPECT_EQ(std::string(detail::adamw_kernel().isa), order.at(level))
      << "ATEN_CPU_CAPABILITY=" << (cap ? cap : "(unset)");
}

// The threads that ran a probe kernel's segments.
std::mutex segment_threads_mutex;
std::set<std::thread::id> segment_threads;

void record_segment_thread(float*, const float*, float*, float*, int64_t, bool,
                           const detail::AdamWStepScalars&) {
  const std::lock_guard<std::mutex> lock(segment_threads_mutex);
  segment_threads.insert(std::this_thread::get_id());
}

// The fused step runs on the intra-op threads: at::parallel_for is inline OpenMP code, which runs
// on the calling thread alone unless its file is compiled with OpenMP (CMakeLists.txt), and then
// the results, which do not depend on the thread count, would not show it. A shard of 128 grains
// over two threads: segments come from both.
TEST(FusedAdamWKernel, SplitsTheShardOverTheIntraOpThreads) {
  ThreadCount scope(2);
  const int64_t n = int64_t{1} << 20;
  std::vector<float> p(n), g(n), m(n), v(n);
  segment_threads.clear();
  detail::adamw_fused_step(p.data(), g.data(), m.data(), v.data(), n, detail::DecayRegions{},
                           /*decay_on=*/false, detail::AdamWStepScalars{}, record_segment_thread);
  EXPECT_EQ(segment_threads.size(), 2u);
}

TEST(FusedAdamWOptions, SameBitsOnAnyThreadCount) {
  const auto shards = odd_shards("runs");
  AdamWOptions o = fused_test_options();
  o.impl = AdamWImpl::kFused;
  AdamW one(clone_shards(shards), o), two(clone_shards(shards), o);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < shards.size(); ++i) {
      at::Tensor g = at::randn(shards[i].param.sizes(), gen);
      one.params()[i].grad.copy_(g);
      two.params()[i].grad.copy_(g);
    }
    {
      ThreadCount scope(1);
      one.step();
    }
    ThreadCount scope(2);
    two.step();
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    EXPECT_TRUE(at::equal(one.params()[i].param, two.params()[i].param)) << "shard " << i;
    EXPECT_TRUE(at::equal(one.exp_avg_sq(i), two.exp_avg_sq(i))) << "shard " << i;
  }
}

// kAuto takes the fused kernel for CPU shards only and steps any other shard op by op (a meta
// tensor stands in for another device here; FusedAdamWOnGpu checks a CUDA one); kFused on a shard
// no fused kernel takes is an error (BadInput below).
TEST(FusedAdamWOptions, AutoChoosesPerShard) {
  std::vector<ShardedParam> shards = make_shards(at::ones({30}), at::Tensor(), {10});
  const auto meta = at::TensorOptions().device(at::kMeta);
  shards.push_back({at::empty({5}, meta), at::empty({5}, meta), at::Tensor()});
  AdamW opt(shards);
  EXPECT_TRUE(opt.fused(0));
  EXPECT_TRUE(opt.fused(1));
  EXPECT_FALSE(opt.fused(2));
  AdamWOptions reference;
  reference.impl = AdamWImpl::kReference;
  EXPECT_FALSE(AdamW(make_shards(at::ones({30}), at::Tensor(), {}), reference).fused(0));
}

// --- SGD
// ------------------------------------------------------------------------------------------

void expect_sgd_matches(const SGDOptions& o) {
  auto ref_params = make_params(4);
  std::vector<at::Tensor> decay, no_decay;
  for (const auto& p : ref_params) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto torch_options = [&](double wd) {
    return std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(o.lr)
                                                          .momentum(o.momentum)
                                                          .dampening(o.dampening)
                                                          .weight_decay(wd)
                                                          .nesterov(o.nesterov));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, torch_options(o.weight_decay));
  groups.emplace_back(no_decay, torch_options(0));
  torch::optim::SGD ref(std::move(groups), torch::optim::SGDOptions(o.lr));
  auto start = make_params(4);
  auto shards = make_shards(flatten(start), dim_mask(start), {17, 250});
  SGD ours(shards, o);
  auto [expected, actual] = run_both(ref_params, ref, ours, shards);
  EXPECT_LT(max_rel_diff(actual, expected), 1e-6);
  EXPECT_TRUE(at::equal(actual, expected)) << max_rel_diff(actual, expected);
}

TEST(SGD, PlainMatchesTorch) {
  SGDOptions o;
  o.lr = 0.1;
  expect_sgd_matches(o);
}

TEST(SGD, MomentumDampeningAndMaskedDecayMatchTorch) {
  SGDOptions o;
  o.lr = 0.05;
  o.momentum = 0.9;
  o.dampening = 0.1;
  o.weight_decay = 0.01;
  expect_sgd_matches(o);
}

TEST(SGD, NesterovMatchesTorch) {
  SGDOptions o;
  o.lr = 0.05;
  o.momentum = 0.8;
  o.weight_decay = 0.02;
  o.nesterov = true;
  expect_sgd_matches(o);
}

TEST(SGD, StateBytes) {
  auto shards = make_shards(at::ones({10}), at::Tensor(), {});
  EXPECT_EQ(SGD(shards).state_bytes(), 0);
  SGDOptions o;
  o.momentum = 0.9;
  EXPECT_EQ(SGD(shards, o).state_bytes(), 40);
}

// --- clipping
// -------------------------------------------------------------------------------------

class NoWork : public Work {
 public:
  void wait() override {}
};

// A group of `size` ranks seen from rank 0: all_gather hands back rank 0's value, then `others`
// as rank 1's float64 sum of squares (as its bits, the way clip_grad_norm sends them) and zeros
// for the rest; nothing else is used by clip_grad_norm.
class FakeComm : public Comm {
 public:
  FakeComm(int size, double others) : size_(size), others_(others) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  std::string backend() const override { return "fake"; }
  WorkPtr all_gather_async(const void* in, void* out, size_t count, DType dtype) override {
    EXPECT_EQ(count, 1u);
    EXPECT_EQ(dtype, DType::kInt64);
    auto* all = static_cast<double*>(out);
    std::memcpy(all, in, sizeof(double));
    for (int r = 1; r < size_; ++r) all[r] = r == 1 ? others_ : 0.0;
    ++all_gathers;
    return std::make_shared<NoWork>();
  }
  WorkPtr reduce_scatter_async(const void*, void*, size_t, DType, ReduceOp) override {
    return unsupported();
  }
  WorkPtr all_reduce_async(void*, size_t, DType, ReduceOp) override { return unsupported(); }
  WorkPtr broadcast_async(void*, size_t, DType, int) override { return unsupported(); }
  void barrier() override {}
  std::shared_ptr<Comm> split(int, int) override { return nullptr; }
  int all_gathers = 0;

 private:
  WorkPtr unsupported() {
    ADD_FAILURE() << "unexpected collective";
    return std::make_shared<NoWork>();
  }
  int size_;
  double others_;
};

// Returns {torch's norm, our norm} and checks the clipped gradients agree.
std::pair<double, double> clip_both(double scale, double max_norm) {
  auto ref_params = make_params(5);
  auto grads = make_grads(0);
  for (size_t i = 0; i < grads.size(); ++i) ref_params[i].mutable_grad() = grads[i] * scale;
  const double expected = torch::nn::utils::clip_grad_norm_(ref_params, max_norm);
  auto shards = make_shards(flatten(make_params(5)), at::Tensor(), {40, 41});
  load_grads(shards, flatten(grads) * scale);
  FakeComm one(1, 0);
  const double actual = clip_grad_norm(shards, max_norm, one);
  EXPECT_EQ(one.all_gathers, 1);
  std::vector<at::Tensor> ref_grads, our_grads;
  for (const auto& p : ref_params) ref_grads.push_back(p.grad());
  for (const auto& s : shards) our_grads.push_back(s.grad);
  EXPECT_LT(max_rel_diff(flatten(our_grads), flatten(ref_grads)), 1e-6);
  return {expected, actual};
}

TEST(ClipGradNorm, ClipsLikeTorch) {
  auto [expected, actual] = clip_both(3.0, 1.0);
  EXPECT_GT(expected, 1.0);
  EXPECT_NEAR(actual, expected, 1e-6 * expected);
}

TEST(ClipGradNorm, BelowMaxNormLeavesGradsAlone) {
  auto [expected, actual] = clip_both(0.01, 1.0);
  EXPECT_LT(expected, 1.0);
  EXPECT_NEAR(actual, expected, 1e-6 * expected);
}

// Two ranks holding disjoint halves: rank 0's result must be the global norm and the global scale.
TEST(ClipGradNorm, SumsSquaresAcrossTheShardGroup) {
  at::Tensor g = flatten(make_grads(1)) * 2;
  at::Tensor mine = g.narrow(0, 0, 100), theirs = g.narrow(0, 100, g.numel() - 100);
  const double theirs_sq = theirs.to(at::kDouble).square().sum().item<double>();
  auto shards = make_shards(at::zeros({100}), at::Tensor(), {30});
  load_grads(shards, mine);
  FakeComm two(2, theirs_sq);
  const double norm = clip_grad_norm(shards, 0.5, two);
  const double expected = g.norm().item<double>();
  EXPECT_NEAR(norm, expected, 1e-6 * expected);
  at::Tensor clipped = at::cat({shards[0].grad, shards[1].grad});
  EXPECT_LT(max_rel_diff(clipped, mine * (0.5 / (expected + 1e-6))), 1e-6);
}

// The norm is float64-exact whatever the shard's size, so that it (and the clipping factor) does
// not depend on the world size. At 2^24 + 3 elements (a shard of GPT-2 124M at world size 8 is
// ~15.5M) LibTorch 1.13's fp32 norm was off by ~1e-4 relative. Tolerance: every square of a float
// is exact in a double, so both this norm and the reference differ from the exact one only by the
// rounding of a sum of n positive terms, at most (n - 1) u relative in any order (u = 2^-53), and
// the square root halves that: |ours / reference - 1| <= (n - 1) u, about 1.9e-9 here.
TEST(ClipGradNorm, NormIsFloat64ExactAtALargeShard) {
  const int64_t n = (int64_t{1} << 24) + 3;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  // Magnitudes spread over several decades, as real gradients are.
  at::Tensor g = at::randn({n}, gen) * at::exp(2 * at::randn({n}, gen));
  auto shards = make_shards(at::zeros({n}), at::Tensor(), {});
  load_grads(shards, g);
  const double reference = std::sqrt(g.to(at::kDouble).square().sum().item<double>());
  FakeComm one(1, 0);
  const double norm = clip_grad_norm(shards, 1e30, one);  // no clipping: the norm only
  const double tolerance = static_cast<double>(n - 1) * std::ldexp(1.0, -53);
  EXPECT_LE(std::fabs(norm / reference - 1), tolerance)
      << "norm " << norm << ", float64 reference " << reference << ", relative error "
      << norm / reference - 1;
  std::cout << "relative error of the norm at " << n << " elements: " << norm / reference - 1
            << " (tolerance " << tolerance << ")\n";
}

TEST(ClipGradNorm, NonFiniteNormLeavesGradsAlone) {
  auto shards = make_shards(at::zeros({10}), at::Tensor(), {});
  shards[0].grad.fill_(1);
  shards[0].grad[3] = std::numeric_limits<float>::infinity();
  FakeComm one(1, 0);
  EXPECT_TRUE(std::isinf(clip_grad_norm(shards, 1.0, one)));
  EXPECT_EQ(shards[0].grad[0].item<float>(), 1.0f);
}

// --- LR schedule
// ----------------------------------------------------------------------------------

TEST(WarmupCosineLr, ShapeOfTheSchedule) {
  const double max_lr = 6e-4, min_lr = 6e-5;
  EXPECT_DOUBLE_EQ(warmup_cosine_lr(0, 10, 110, max_lr, min_lr), max_lr / 10);
  EXPECT_DOUBLE_EQ(warmup_cosine_lr(4, 10, 110, max_lr, min_lr), max_lr / 2);
  EXPECT_DOUBLE_EQ(warmup_cosine_lr(9, 10, 110, max_lr, min_lr), max_lr);
  EXPECT_DOUBLE_EQ(warmup_cosine_lr(10, 10, 110, max_lr, min_lr), max_lr);
  EXPECT_NEAR(warmup_cosine_lr(60, 10, 110, max_lr, min_lr), (max_lr + min_lr) / 2, 1e-15);
  EXPECT_DOUBLE_EQ(warmup_cosine_lr(110, 10, 110, max_lr, min_lr), min_lr);
  EXPECT_DOUBLE_EQ(warmup_cosine_lr(1000, 10, 110, max_lr, min_lr), min_lr);
  for (int64_t s = 10; s < 110; ++s) {
    EXPECT_GT(warmup_cosine_lr(s, 10, 110, max_lr, min_lr),
              warmup_cosine_lr(s + 1, 10, 110, max_lr, min_lr));
  }
  EXPECT_DOUBLE_EQ(warmup_cosine_lr(0, 0, 100, max_lr, min_lr), max_lr);  // no warmup
}

// --- bad input
// ------------------------------------------------------------------------------------

void expect_invalid(const std::function<void()>& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    for (const auto& n : needles) {
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
    }
  }
}

TEST(BadInput, ShardsAreChecked) {
  auto good = make_shards(at::zeros({20}), at::ones({20}), {10});
  auto bad = good;
  bad[1].grad = at::zeros({9});
  expect_invalid([&] { AdamW o(bad); }, {"AdamW", "shard 1", "grad", "10 elements", "9 elements"});
  bad = good;
  bad[0].param = at::zeros({10}, at::kDouble);
  expect_invalid([&] { SGD o(bad); }, {"SGD", "shard 0", "fp32", "Double"});
  bad = good;
  bad[1].decay_mask = at::ones({11});
  expect_invalid([&] { AdamW o(bad); }, {"shard 1", "decay mask", "11 elements"});
  bad = good;
  bad[0].decay_mask = at::full({10}, 0.5);
  expect_invalid([&] { AdamW o(bad); }, {"shard 0", "0 and 1"});
  AdamWOptions a;
  a.beta2 = 1.0;
  expect_invalid([&] { AdamW o(good, a); }, {"beta2"});
  a = AdamWOptions();
  a.impl = AdamWImpl::kFused;
  bad = good;
  bad[1].param = at::empty({10}, at::TensorOptions().device(at::kMeta));
  expect_invalid([&] { AdamW o(bad, a); }, {"kFused", "shard 1", "meta", "CPU"});
  SGDOptions s;
  s.nesterov = true;
  expect_invalid([&] { SGD o(good, s); }, {"nesterov"});
  FakeComm one(1, 0);
  expect_invalid([&] { clip_grad_norm(good, 0.0, one); }, {"max_norm"});
  expect_invalid([&] { warmup_cosine_lr(0, 10, 5, 1, 0); }, {"warmup 10", "total 5"});
  expect_invalid([&] { warmup_cosine_lr(-1, 0, 5, 1, 0); }, {"step -1"});
}

}  // namespace
}  // namespace fsdp
