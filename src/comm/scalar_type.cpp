// DType <-> ScalarType (scalar_type.h).
#include "comm/scalar_type.h"

#include <string>

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
  throw CommError("fsdp: unknown DType " + std::to_string(static_cast<int>(dtype)));
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
  throw CommError(std::string("fsdp: dtype ") + c10::toString(type) +
                  " cannot be communicated (fp32, bf16, fp16, int64)");
}

}  // namespace fsdp
