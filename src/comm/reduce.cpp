// Element-wise sum and average kernels that both multi-rank backends reduce with. MPI has no
// bf16/fp16 types and Gloo has no sum for them, so both get these: the 2-byte formats are widened
// to float, added, and rounded back (nearest-even, via c10's conversions), which matches what
// LibTorch computes for `a + b` on those dtypes.
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>

#include "comm/internal.h"

namespace fsdp {
namespace comm_internal {
namespace {

template <typename T>
void sum_as(void* out, const void* a, const void* b, size_t n) {
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  T* z = static_cast<T*>(out);
  for (size_t i = 0; i < n; ++i) z[i] = x[i] + y[i];
}

// 2-byte floats: c10's operator+ already widens to float and rounds the result back.
template <typename T>
void sum_via_float(void* out, const void* a, const void* b, size_t n) {
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  T* z = static_cast<T*>(out);
  for (size_t i = 0; i < n; ++i) {
    z[i] = T(static_cast<float>(x[i]) + static_cast<float>(y[i]));
  }
}

template <typename T>
void divide_via_float(void* data, size_t n, float divisor) {
  T* p = static_cast<T*>(data);
  for (size_t i = 0; i < n; ++i) p[i] = T(static_cast<float>(p[i]) / divisor);
}

}  // namespace

void sum(void* out, const void* a, const void* b, size_t n, DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return sum_as<float>(out, a, b, n);
    case DType::kInt64:
      return sum_as<int64_t>(out, a, b, n);
    case DType::kBFloat16:
      return sum_via_float<c10::BFloat16>(out, a, b, n);
    case DType::kFloat16:
      return sum_via_float<c10::Half>(out, a, b, n);
  }
}

void divide(void* data, size_t n, DType dtype, int divisor) {
  switch (dtype) {
    case DType::kFloat32: {
      float* p = static_cast<float*>(data);
      const float d = static_cast<float>(divisor);
      for (size_t i = 0; i < n; ++i) p[i] /= d;
      return;
    }
    case DType::kInt64: {
      int64_t* p = static_cast<int64_t*>(data);
      for (size_t i = 0; i < n; ++i) p[i] /= divisor;
      return;
    }
    case DType::kBFloat16:
      return divide_via_float<c10::BFloat16>(data, n, static_cast<float>(divisor));
    case DType::kFloat16:
      return divide_via_float<c10::Half>(data, n, static_cast<float>(divisor));
  }
}

}  // namespace comm_internal
}  // namespace fsdp
