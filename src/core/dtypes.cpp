// DType <-> ScalarType, for the core's calls into the comm layer.
#include "core/dtypes.h"

#include "core/check.h"

namespace fsdp {

at::ScalarType to_scalar_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return at::kFloat;
    case DType::kBFloat16:
      return at::kBFloat16;
    case DType::kFloat16:
      return at::kHalf;
    case DType::kInt64:
      return at::kLong;
  }
  FSDP_CHECK(false, "unknown DType ", static_cast<int>(dtype));
  return at::kFloat;
}

DType to_dtype(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return DType::kFloat32;
    case at::kBFloat16:
      return DType::kBFloat16;
    case at::kHalf:
      return DType::kFloat16;
    case at::kLong:
      return DType::kInt64;
    default:
      break;
  }
  FSDP_CHECK(false, "dtype ", c10::toString(type),
             " cannot be communicated (fp32, bf16, fp16, int64)");
  return DType::kFloat32;
}

}  // namespace fsdp
