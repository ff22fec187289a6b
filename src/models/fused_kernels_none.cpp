// The builds without CUDA kernels for the fused element-wise nodes (fused_kernels.h): every
// CPU-only LibTorch.
#include "models/fused_kernels.h"

namespace fsdp {
namespace detail {

const FusedKernels* cuda_fused_kernels() { return nullptr; }

}  // namespace detail
}  // namespace fsdp
