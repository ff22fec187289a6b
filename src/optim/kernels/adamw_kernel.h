// The fused AdamW kernel's instruction-set variants and the choice among them. The kernel source
// (adamw_kernel.cpp) is compiled once per x86-64 instruction set, each into its own namespace
// named after ATen's CPU_CAPABILITY (DEFAULT, AVX2, AVX512); select_*.cpp picks one at run time
// from what the CPU supports, as ATen picks its own kernels. This header is included by those
// per-ISA objects, so it holds nothing that could compile to code: any inline function here would
// be emitted with one variant's instructions and might be the copy the linker keeps for every
// caller.
#pragma once

#include <cstdint>

namespace fsdp::detail {

// One step's scalars, already rounded to float as torch's kernels round their Scalar arguments
// for an fp32 tensor (each computed in double first, as torch computes them).
struct AdamWStepScalars {
  float keep;  // 1 - lr * weight_decay, applied where decay is on
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float sqrt_bias_correction2;  // sqrt(1 - beta2^step)
  float eps;
  float neg_step_size;  // -lr / (1 - beta1^step)
};

// Updates n consecutive elements of p, m and v in place from g, with the weight decay when
// `decay`. One thread; the caller splits the shard.
using AdamWSegmentFn = void (*)(float* p, const float* g, float* m, float* v, int64_t n, bool decay,
                                const AdamWStepScalars& s);

namespace DEFAULT {
void adamw_segment(float* p, const float* g, float* m, float* v, int64_t n, bool decay,
                   const AdamWStepScalars& s);
}
namespace AVX2 {
void adamw_segment(float* p, const float* g, float* m, float* v, int64_t n, bool decay,
                   const AdamWStepScalars& s);
}
namespace AVX512 {
void adamw_segment(float* p, const float* g, float* m, float* v, int64_t n, bool decay,
                   const AdamWStepScalars& s);
}

// The variant for this CPU: the widest it supports, capped by ATEN_CPU_CAPABILITY (default, avx2,
// avx512) when set, as for ATen's own kernels. Chosen once.
struct AdamWKernel {
  AdamWSegmentFn segment;
  const char* isa;  // "DEFAULT", "AVX2" or "AVX512"
};
const AdamWKernel& adamw_kernel();

}  // namespace fsdp::detail
