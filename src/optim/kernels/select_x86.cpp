// Chooses the fused AdamW kernel's variant on x86-64: AVX512 where the CPU has the subset ATen's
// AVX512 build assumes (F, BW, VL, DQ), else AVX2 with FMA, else DEFAULT (any x86-64 CPU).
// ATEN_CPU_CAPABILITY (default, avx2, avx512) caps the choice, as it does for ATen's kernels, so
// tests and users can run the narrower paths on a wide CPU.
#include <cstdlib>
#include <cstring>

#include "optim/kernels/adamw_kernel.h"

namespace fsdp::detail {
namespace {

int cpu_level() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    return 2;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
  return 0;
}

int requested_level() {
  const char* v = std::getenv("ATEN_CPU_CAPABILITY");
  if (v == nullptr) return 2;
  if (std::strcmp(v, "default") == 0) return 0;
  if (std::strcmp(v, "avx2") == 0) return 1;
  return 2;  // avx512, or a value ATen also ignores
}

AdamWKernel choose() {
  const int level = cpu_level() < requested_level() ? cpu_level() : requested_level();
  if (level == 2) return {AVX512::adamw_segment, "AVX512"};
  if (level == 1) return {AVX2::adamw_segment, "AVX2"};
  return {DEFAULT::adamw_segment, "DEFAULT"};
}

}  // namespace

const AdamWKernel& adamw_kernel() {
  static const AdamWKernel kernel = choose();
  return kernel;
}

}  // namespace fsdp::detail
