// The fused AdamW kernel for one segment of a shard: per element, torch::optim::AdamW's (LibTorch
// 1.13) operations in torch's order, in one pass instead of nine. Compiled once per instruction
// set (CMakeLists.txt: DEFAULT for any x86-64 CPU, AVX2 with FMA, AVX-512) into the namespace
// fsdp::detail::<CPU_CAPABILITY>, and vectorised by the compiler (-O3) for that set: plain C++, no
// at::vec, so that it needs neither ATen's nor SLEEF's headers (PyTorch's wheels ship no sleef.h).
// Everything else here has internal linkage: no inline or template code of ours leaves this object
// compiled for a wider ISA than its caller may run (tests/optim.cmake checks the objects' weak
// symbols).
#include "optim/kernels/adamw_kernel.h"

#include <cmath>

namespace fsdp::detail::CPU_CAPABILITY {
namespace {

// at::vec::fmadd as ATen's kernels for this instruction set compute it: one fused multiply-add on
// AVX2 and AVX-512, a * b + c rounded twice in DEFAULT (the build turns off contraction, so the
// compiler fuses nothing else).
constexpr bool kFusedMultiplyAdd = FSDP_ADAMW_FMA;

inline float fmadd(float a, float b, float c) {
  if constexpr (kFusedMultiplyAdd) {
    return std::fma(a, b, c);
  } else {
    return a * b + c;
  }
}

// Each line is one of torch's tensor operations as ATen's CPU kernel computes it, so that each
// rounds where torch's does: add_(g, alpha) is fmadd(g, alpha, self) in ATen's source, and
// addcmul_'s self + value * t1 * t2 is compiled by GCC, in torch's AVX2 and AVX-512 kernels, to
// fma(value * t1, t2, self). sqrt and division are correctly rounded in every form, scalar or
// packed. With LibTorch 1.13 from Debian this kernel equals torch bit for bit under every
// ATEN_CPU_CAPABILITY; a LibTorch compiled otherwise may round a few operations apart, which
// tests/test_optim.cpp's tolerance bounds. The loop has no dependence between elements: the
// compiler turns it into packed instructions of this object's width.
template <bool kDecay>
void update_all(float* __restrict p, const float* __restrict g, float* __restrict m,
                float* __restrict v, int64_t n, const AdamWStepScalars s) {
  for (int64_t i = 0; i < n; ++i) {
    // torch: p.mul_(1 - lr * wd); m.mul_(b1).add_(g, 1 - b1); v.mul_(b2).addcmul_(g, g, 1 - b2);
    // denom = (v.sqrt() / sqrt(bc2)).add_(eps); p.addcdiv_(m, denom, -step_size).
    const float grad = g[i];
    const float param = kDecay ? p[i] * s.keep : p[i];
    const float avg = fmadd(grad, s.one_minus_beta1, m[i] * s.beta1);
    const float avg_sq = fmadd(s.one_minus_beta2 * grad, grad, v[i] * s.beta2);
    const float denom = std::sqrt(avg_sq) / s.sqrt_bias_correction2 + s.eps;
    p[i] = param + s.neg_step_size * avg / denom;
    m[i] = avg;
    v[i] = avg_sq;
  }
}

}  // namespace

// The scalars are passed by value into the loop so that the compiler keeps them in registers: the
// stores through p, m and v could otherwise alias them.
void adamw_segment(float* p, const float* g, float* m, float* v, int64_t n, bool decay,
                   const AdamWStepScalars& s) {
  if (decay) {
    update_all<true>(p, g, m, v, n, s);
  } else {
    update_all<false>(p, g, m, v, n, s);
  }
}

}  // namespace fsdp::detail::CPU_CAPABILITY
