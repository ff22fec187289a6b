// The fused AdamW kernel for one segment of a shard: per element, torch::optim::AdamW's (LibTorch
// 1.13) operations in torch's order, in one pass instead of nine. Compiled once per instruction
// set (CMakeLists.txt defines CPU_CAPABILITY and CPU_CAPABILITY_<ISA> and the matching -m flags,
// as ATen's build does), so at::vec::Vectorized<float> is DEFAULT's generic 8-element loops (SSE
// code), AVX2's 8 lanes or AVX512's 16; the functions land in fsdp::detail::<CPU_CAPABILITY>.
// Everything else here has internal linkage: no inline or template code of ours leaves this object
// compiled for a wider ISA than its caller may run (tests/optim.cmake checks the objects' weak
// symbols).
#include "optim/kernels/adamw_kernel.h"

#include <ATen/cpu/vec/vec.h>

namespace fsdp::detail::CPU_CAPABILITY {
namespace {

using Vec = at::vec::Vectorized<float>;

struct VecScalars {
  Vec keep, beta1, one_minus_beta1, beta2, one_minus_beta2, sqrt_bc2, eps, neg_step_size;
};

// One vector of elements. Each line is one of torch's tensor operations as ATen's CPU kernel
// computes it, so that each rounds where torch's does: add_(g, alpha) is fmadd(g, alpha, self) in
// ATen's source, and addcmul_'s self + value * t1 * t2 is compiled by GCC, in torch's AVX2 and
// AVX-512 kernels, to fma(value * t1, t2, self) (in DEFAULT, as here, fmadd is a * b + c
// unfused). With LibTorch 1.13 from Debian this kernel equals torch bit for bit under every
// ATEN_CPU_CAPABILITY; a LibTorch compiled otherwise may round a few operations apart, which
// tests/test_optim.cpp's tolerance bounds.
template <bool kDecay>
inline void update(Vec& p, const Vec& g, Vec& m, Vec& v, const VecScalars& s) {
  if (kDecay) p = p * s.keep;                                 // p.mul_(1 - lr * wd)
  m = at::vec::fmadd(g, s.one_minus_beta1, m * s.beta1);      // m.mul_(b1).add_(g, 1 - b1)
  v = at::vec::fmadd(s.one_minus_beta2 * g, g, v * s.beta2);  // v.mul_(b2).addcmul_(g, g, 1 - b2)
  const Vec denom = v.sqrt() / s.sqrt_bc2 + s.eps;            // (v.sqrt() / sqrt(bc2)).add_(eps)
  p = p + s.neg_step_size * m / denom;                        // p.addcdiv_(m, denom, -step_size)
}

template <bool kDecay>
void update_all(float* p, const float* g, float* m, float* v, int64_t n, const VecScalars s) {
  constexpr int64_t kWidth = Vec::size();
  int64_t i = 0;
  for (; i + kWidth <= n; i += kWidth) {
    Vec pv = Vec::loadu(p + i), mv = Vec::loadu(m + i), vv = Vec::loadu(v + i);
    update<kDecay>(pv, Vec::loadu(g + i), mv, vv, s);
    pv.store(p + i);
    mv.store(m + i);
    vv.store(v + i);
  }
  if (i == n) return;
  // The tail: partial loads fill the rest of the vector with zeros, which compute harmlessly
  // (0 / eps) and are never stored.
  const int tail = static_cast<int>(n - i);
  Vec pv = Vec::loadu(p + i, tail), mv = Vec::loadu(m + i, tail), vv = Vec::loadu(v + i, tail);
  update<kDecay>(pv, Vec::loadu(g + i, tail), mv, vv, s);
  pv.store(p + i, tail);
  mv.store(m + i, tail);
  vv.store(v + i, tail);
}

}  // namespace

// The scalars are passed by value into the loop so that the compiler keeps them in registers: the
// stores through p, m and v could otherwise alias them.
void adamw_segment(float* p, const float* g, float* m, float* v, int64_t n, bool decay,
                   const AdamWStepScalars& s) {
  const VecScalars vs{Vec(s.keep),  Vec(s.beta1),           Vec(s.one_minus_beta1),
                      Vec(s.beta2), Vec(s.one_minus_beta2), Vec(s.sqrt_bias_correction2),
                      Vec(s.eps),   Vec(s.neg_step_size)};
  if (decay) {
    update_all<true>(p, g, m, v, n, vs);
  } else {
    update_all<false>(p, g, m, v, n, vs);
  }
}

}  // namespace fsdp::detail::CPU_CAPABILITY
