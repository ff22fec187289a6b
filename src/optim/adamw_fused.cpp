// The fused AdamW step's driver: threads take contiguous parts of the shard (at::parallel_for);
// inside a part the decay regions cut it into segments, each handed to the kernel variant this
// CPU runs (kernels/adamw_kernel.h). Elementwise work without reductions: the result does not
// depend on the thread count.
#include "optim/adamw_fused.h"

#include <ATen/Parallel.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

namespace fsdp::detail {
namespace {

// Elements per task of at::parallel_for: 32 KiB of each of the four arrays, small enough that a
// shard of a few hundred thousand elements is split over the threads, large enough that a task
// outweighs its dispatch.
constexpr int64_t kGrain = 8192;

// Calls fn(begin, end, decayed) for consecutive segments covering [lo, hi), split where the decay
// mask changes.
template <class Fn>
void for_each_segment(const DecayRegions& r, int64_t lo, int64_t hi, const Fn& fn) {
  if (r.dense.defined()) {
    const bool* on = r.dense.data_ptr<bool>();
    for (int64_t k = lo; k < hi;) {
      const int64_t end = std::find(on + k, on + hi, !on[k]) - on;
      fn(k, end, on[k]);
      k = end;
    }
    return;
  }
  // Runs are sorted and disjoint: start at the first that ends after lo.
  auto run = std::partition_point(r.runs.begin(), r.runs.end(),
                                  [lo](const auto& run) { return run.second <= lo; });
  int64_t k = lo;
  for (; run != r.runs.end() && run->first < hi; ++run) {
    if (run->first > k) fn(k, run->first, false);
    k = std::max(k, run->first);
    const int64_t end = std::min(run->second, hi);
    fn(k, end, true);
    k = end;
  }
  if (k < hi) fn(k, hi, false);
}

}  // namespace

AdamWStepScalars adamw_step_scalars(const AdamWOptions& o, double lr, double bias_correction1,
                                    double bias_correction2) {
  AdamWStepScalars s;
  s.keep = static_cast<float>(1 - lr * o.weight_decay);
  s.beta1 = static_cast<float>(o.beta1);
  s.one_minus_beta1 = static_cast<float>(1 - o.beta1);
  s.beta2 = static_cast<float>(o.beta2);
  s.one_minus_beta2 = static_cast<float>(1 - o.beta2);
  s.sqrt_bias_correction2 = static_cast<float>(std::sqrt(bias_correction2));
  s.eps = static_cast<float>(o.eps);
  s.neg_step_size = static_cast<float>(-(lr / bias_correction1));
  return s;
}

void adamw_fused_step(float* p, const float* g, float* m, float* v, int64_t n,
                      const DecayRegions& decay, bool decay_on, const AdamWStepScalars& s,
                      AdamWSegmentFn kernel) {
  // This object is built with OpenMP so that at::parallel_for's inline OpenMP region runs threads
  // (CMakeLists.txt). Its runtime may be another copy than LibTorch's (a PyTorch wheel bundles its
  // own libgomp), which at::set_num_threads does not reach: give it LibTorch's thread count.
  const int threads = at::get_num_threads();
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
  at::parallel_for(0, n, kGrain, [&](int64_t lo, int64_t hi) {
    auto segment = [&](int64_t b, int64_t e, bool decayed) {
      kernel(p + b, g + b, m + b, v + b, e - b, decayed, s);
    };
    if (decay_on) {
      for_each_segment(decay, lo, hi, segment);
    } else {
      segment(lo, hi, false);
    }
  });
}

}  // namespace fsdp::detail
