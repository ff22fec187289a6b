// The fused AdamW step over one flat fp32 shard on the CPU: one pass doing torch's decoupled
// weight decay (on the decay regions only), the m and v updates, bias correction and the
// parameter update, split over threads with at::parallel_for, each thread's part cut by the decay
// regions into segments for the vectorised kernel (kernels/adamw_kernel.h). AdamW
// (src/optim/adamw.cpp) decides which shards come here; tests compare it with the op-by-op path.
#pragma once

#include <cstdint>

#include "fsdp/optim.h"
#include "optim/kernels/adamw_kernel.h"

namespace fsdp::detail {

// The step's scalars from the options, the learning rate and both bias corrections.
AdamWStepScalars adamw_step_scalars(const AdamWOptions& o, double lr, double bias_correction1,
                                    double bias_correction2);

// Updates p, m and v (each n contiguous floats; g read only) in place. Decay applies where
// `decay` says and only when `decay_on` (weight_decay != 0). Uses at::get_num_threads() threads,
// each calling `kernel` on its segments: adamw_kernel().segment, or a test's probe.
void adamw_fused_step(float* p, const float* g, float* m, float* v, int64_t n,
                      const DecayRegions& decay, bool decay_on, const AdamWStepScalars& s,
                      AdamWSegmentFn kernel);

}  // namespace fsdp::detail
