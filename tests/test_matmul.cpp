// The families' products (fsdp/models/matmul.h) in bf16 on the CPU: through fp32 GEMMs
// (CpuBf16Matmul::kFp32) and ATen's own (kNative) against the same product in fp64 from the same
// bf16 inputs, forward and every gradient; which mode kAuto picks; other dtypes untouched.
//
// The bound: through fp32 a result is the fp32 product rounded to bf16 once, so it lies within
// one bf16 rounding of the exact value (2^-9 relative to each entry) plus fp32's sums over k = 64
// or 96 terms (about 1e-6 of the largest term): we allow 2^-8 of the largest entry, and 2^-8 of
// the fp32 product rounded (the same arithmetic in another order may round the other way). ATen's
// own kernel is printed beside ours and only kept from garbage (8 roundings): its accumulation
// varies by version and CPU, and its fallback rounds partial sums to bf16 (LibTorch 1.13, AMD EPYC
// without AVX-512: the input's gradient 0.0167 off, four roundings, where ours is 0.0017).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <iostream>

#include "fsdp/models/matmul.h"

namespace fsdp {
namespace {

// max |a - b| over max |b|.
double rel(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor a64 = a.detach().to(at::kDouble), b64 = b.detach().to(at::kDouble);
  return (a64 - b64).abs().max().item<double>() / b64.abs().max().item<double>();
}

constexpr double kOneRounding = 1.0 / 256;  // bf16's 8 significant bits

// Restores kAuto when a test ends.
struct ModeGuard {
  explicit ModeGuard(CpuBf16Matmul mode) { set_cpu_bf16_matmul(mode); }
  ~ModeGuard() { set_cpu_bf16_matmul(CpuBf16Matmul::kAuto); }
};

at::Tensor bf16_leaf(at::IntArrayRef shape, bool grad = true) {
  return at::randn(shape).to(at::kBFloat16).set_requires_grad(grad);
}

struct LinearResult {
  at::Tensor y, dx, dw, db;
};

LinearResult run_linear(const at::Tensor& x0, const at::Tensor& w0, const at::Tensor& b0,
                        const at::Tensor& dy, at::ScalarType dtype) {
  const at::Tensor x = x0.detach().to(dtype).set_requires_grad(true);
  const at::Tensor w = w0.detach().to(dtype).set_requires_grad(w0.requires_grad());
  const at::Tensor b = b0.detach().to(dtype).set_requires_grad(true);
  const at::Tensor y = fsdp::linear(x, w, b);
  y.backward(dy.to(dtype));
  return {y.detach(), x.grad(), w.requires_grad() ? w.grad() : at::Tensor(), b.grad()};
}

TEST(Bf16Matmul, LinearThroughFp32IsWithinOneRounding) {
  torch::manual_seed(0);
  const at::Tensor x = bf16_leaf({3, 5, 64}), w = bf16_leaf({96, 64}), b = bf16_leaf({96});
  const at::Tensor dy = at::randn({3, 5, 96}).to(at::kBFloat16);
  const LinearResult exact = run_linear(x, w, b, dy, at::kDouble);
  const LinearResult fp32 = run_linear(x, w, b, dy, at::kFloat);
  LinearResult ours, native;
  {
    ModeGuard mode(CpuBf16Matmul::kFp32);
    ASSERT_TRUE(bf16_matmul_through_fp32(x));
    ours = run_linear(x, w, b, dy, at::kBFloat16);
  }
  {
    ModeGuard mode(CpuBf16Matmul::kNative);
    ASSERT_FALSE(bf16_matmul_through_fp32(x));
    native = run_linear(x, w, b, dy, at::kBFloat16);
  }
  ASSERT_EQ(ours.y.scalar_type(), at::kBFloat16);
  ASSERT_EQ(ours.dw.scalar_type(), at::kBFloat16);
  const std::pair<const char*, at::Tensor LinearResult::*> parts[] = {{"y", &LinearResult::y},
                                                                      {"dx", &LinearResult::dx},
                                                                      {"dw", &LinearResult::dw},
                                                                      {"db", &LinearResult::db}};
  for (const auto& [name, part] : parts) {
    EXPECT_LE(rel(ours.*part, fp32.*part), kOneRounding) << name;
    EXPECT_LE(rel(ours.*part, exact.*part), kOneRounding) << name;
    EXPECT_LE(rel(native.*part, exact.*part), 8 * kOneRounding) << name;
    std::cout << "[ bf16 ] linear " << name << ": through fp32 " << rel(ours.*part, exact.*part)
              << ", ATen's " << rel(native.*part, exact.*part) << std::endl;
  }
}

// A weight converted a block of rows at a time (16 MiB of fp32 each: here 512 rows of 8192, so
// three blocks, the last of 76 rows): the same bound.
TEST(Bf16Matmul, LinearOverBlocksOfTheWeightIsWithinOneRounding) {
  torch::manual_seed(3);
  const at::Tensor x = bf16_leaf({2, 3, 8192}), w = bf16_leaf({1100, 8192}), b = bf16_leaf({1100});
  const at::Tensor dy = at::randn({2, 3, 1100}).to(at::kBFloat16);
  const LinearResult exact = run_linear(x, w, b, dy, at::kDouble);
  ModeGuard mode(CpuBf16Matmul::kFp32);
  const LinearResult ours = run_linear(x, w, b, dy, at::kBFloat16);
  EXPECT_LE(rel(ours.y, exact.y), kOneRounding);
  EXPECT_LE(rel(ours.dx, exact.dx), kOneRounding);
  EXPECT_LE(rel(ours.dw, exact.dw), kOneRounding);
  EXPECT_LE(rel(ours.db, exact.db), kOneRounding);
}

// A frozen weight (LoRA's base) gets no gradient, and the input's is still right.
TEST(Bf16Matmul, FrozenWeightGetsNoGradient) {
  ModeGuard mode(CpuBf16Matmul::kFp32);
  torch::manual_seed(1);
  const at::Tensor x = bf16_leaf({4, 32}), w = bf16_leaf({16, 32}, /*grad=*/false);
  const at::Tensor y = fsdp::linear(x, w);
  y.sum().backward();
  EXPECT_FALSE(w.grad().defined());
  const at::Tensor want = at::ones({4, 16}, at::kDouble).mm(w.to(at::kDouble));
  EXPECT_LE(rel(x.grad(), want), kOneRounding);
}

TEST(Bf16Matmul, BatchedMatmulThroughFp32IsWithinOneRounding) {
  ModeGuard mode(CpuBf16Matmul::kFp32);
  torch::manual_seed(2);
  // b a transposed view, as attention's k^T; six products, computed a slice of the batch at a time
  const at::Tensor a = bf16_leaf({2, 3, 8, 64}), bt = bf16_leaf({2, 3, 16, 64});
  const at::Tensor b = bt.transpose(-2, -1);
  const at::Tensor dy = at::randn({2, 3, 8, 16}).to(at::kBFloat16);
  const at::Tensor y = fsdp::matmul(a, b);
  y.backward(dy);
  const at::Tensor a32 = a.detach().to(at::kFloat).set_requires_grad(true);
  const at::Tensor bt32 = bt.detach().to(at::kFloat).set_requires_grad(true);
  const at::Tensor y32 = at::matmul(a32, bt32.transpose(-2, -1));
  y32.backward(dy.to(at::kFloat));
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  EXPECT_LE(rel(y, y32), kOneRounding);
  EXPECT_LE(rel(a.grad(), a32.grad()), kOneRounding);
  EXPECT_LE(rel(bt.grad(), bt32.grad()), kOneRounding);
  const at::Tensor exact = at::matmul(a.to(at::kDouble), b.to(at::kDouble));
  EXPECT_LE(rel(y, exact), kOneRounding);
}

// kAuto: through fp32 wherever ATen would not use oneDNN, so always with oneDNN off; never for
// fp32 tensors; a broadcasting product is left to ATen.
TEST(Bf16Matmul, AutoFollowsOneDnnAndTheDtype) {
  ASSERT_EQ(cpu_bf16_matmul(), CpuBf16Matmul::kAuto);
  const at::Tensor bf = at::ones({2, 2}, at::kBFloat16);
  EXPECT_FALSE(bf16_matmul_through_fp32(at::ones({2, 2})));
  const bool was = at::globalContext().userEnabledMkldnn();
  at::globalContext().setUserEnabledMkldnn(false);
  EXPECT_TRUE(bf16_matmul_through_fp32(bf));
  at::globalContext().setUserEnabledMkldnn(was);
  std::cout << "[ bf16 ] this CPU, oneDNN " << (was ? "on" : "off") << ": bf16 products "
            << (bf16_matmul_through_fp32(bf) ? "through fp32" : "by ATen's kernel") << std::endl;
  ModeGuard mode(CpuBf16Matmul::kFp32);
  const at::Tensor a = at::ones({3, 4, 5}, at::kBFloat16), b = at::ones({5, 6}, at::kBFloat16);
  EXPECT_EQ(fsdp::matmul(a, b).sizes(), (std::vector<int64_t>{3, 4, 6}));
}

}  // namespace
}  // namespace fsdp
