// The builds without a device's element-wise kernels (fused_kernels.h): every CPU-only LibTorch.
// The fused nodes compute with ATen's ops wherever this lookup finds nothing.
#include "models/fused_kernels.h"

namespace fsdp {
namespace detail {

const FusedKernels* fused_kernels(const c10::Device& /*device*/) { return nullptr; }

}  // namespace detail
}  // namespace fsdp
