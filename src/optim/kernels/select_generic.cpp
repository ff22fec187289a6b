// Chooses the fused AdamW kernel's variant where only DEFAULT is built (CPUs other than x86-64):
// the kernel compiled for the target's baseline instruction set, whatever the CPU.
#include "optim/kernels/adamw_kernel.h"

namespace fsdp::detail {

const AdamWKernel& adamw_kernel() {
  static const AdamWKernel kernel{DEFAULT::adamw_segment, "DEFAULT"};
  return kernel;
}

}  // namespace fsdp::detail
