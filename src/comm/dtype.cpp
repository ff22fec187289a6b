// The comm layer's element types: their sizes and the names that error messages print.
#include "fsdp/comm.h"

namespace fsdp {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kBFloat16:
    case DType::kFloat16:
      return 2;
    case DType::kInt64:
      return 8;
  }
  throw CommError("fsdp: unknown DType " + std::to_string(static_cast<int>(dtype)));
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "fp32";
    case DType::kBFloat16:
      return "bf16";
    case DType::kFloat16:
      return "fp16";
    case DType::kInt64:
      return "int64";
  }
  return "unknown-dtype";
}

}  // namespace fsdp
