// Conversions between the comm layer's torch-free DType and LibTorch's ScalarType, for the
// layers that hand tensors to a Comm and for the backends built on c10d (NCCL).
#pragma once

#include <c10/core/ScalarType.h>

#include "fsdp/comm.h"

namespace fsdp {

at::ScalarType to_scalar_type(DType dtype);
DType to_dtype(at::ScalarType type);  // throws for types the comm layer does not carry

}  // namespace fsdp
