// One training step under LibTorch's profiler (Kineto), for fsdp-bench --profile: where a step's
// time goes, by GPU kernel (or, on the CPU, by operator), as a Markdown table of totals by class
// (matmul, attention, collectives, element-wise, ...) and by name, beside a Chrome trace of the
// step (chrome://tracing, Perfetto). Owns the profiler's session and the kernels' classes; the
// step itself is the caller's. Only fsdp-bench includes it (the profiler's header is large).
#pragma once

#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "compat.h"
#include "util/files.h"

namespace fsdp_tools {

// Which class of work a GPU kernel is, from its name (cuBLAS's and CUTLASS's GEMMs, the flash and
// memory-efficient attention kernels, NCCL's, ATen's element-wise and reduction templates, the
// fused AdamW and the copies); "other" for the rest, listed by name in the table below it.
inline std::string kernel_class(const std::string& name) {
  std::string n(name);
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
  if (has("nccl")) return "collectives";
  if (has("flash") || has("fmha") || has("attention") || has("cudnn_generated_fort_native_sdpa"))
    return "attention";
  if (has("gemm") || has("cutlass") || has("nvjet") || has("xmma") || has("cublas"))
    return "matmul";
  if (has("adam")) return "optimizer";
  if (has("memcpy") || has("memset") || has("copy")) return "copies";
  if (has("reduce") || has("softmax") || has("norm")) return "reductions";
  if (has("elementwise") || has("vectorized") || has("unrolled") || has("foreach"))
    return "element-wise";
  return "other";
}

struct KernelTotal {
  std::string name;
  std::string kind;  // kernel_class's
  int64_t ns = 0;    // summed over its calls
  int64_t calls = 0;
};

// Starts recording on construction (CPU operators; a CUDA GPU's kernels and copies too when
// `cuda`), stops in stop(). One at a time per process.
class StepProfile {
 public:
  explicit StepProfile(bool cuda) : cuda_(cuda) {
    namespace p = torch::profiler::impl;
    std::set<p::ActivityType> activities{p::ActivityType::CPU};
    if (cuda_) activities.insert(p::ActivityType::CUDA);
    const p::ProfilerConfig config(p::ProfilerState::KINETO);
    torch::autograd::profiler::prepareProfiler(config, activities);
    torch::autograd::profiler::enableProfiler(config, activities);
  }
  StepProfile(const StepProfile&) = delete;
  StepProfile& operator=(const StepProfile&) = delete;
  ~StepProfile() {
    if (!stopped_) torch::autograd::profiler::disableProfiler();
  }

  // Why no trace was written ("" when one was, or none was asked for).
  const std::string& no_trace() const { return no_trace_; }

  // Stops recording, writes the Chrome trace to `trace` (empty: none; through a temporary of its
  // own; a LibTorch built without Kineto, as Debian's 1.13, has the events but writes no trace,
  // and no_trace() says so) and returns the totals by name, largest first: the GPU's kernels and
  // copies with `cuda`, else the CPU's operators (inclusive: an operator's time holds those it
  // calls, so CPU rows overlap).
  std::vector<KernelTotal> stop(const std::string& trace) {
    stopped_ = true;
    const auto result = torch::autograd::profiler::disableProfiler();
    if (!trace.empty()) save_trace(*result, trace);
    std::map<std::string, KernelTotal> by_name;
    const c10::DeviceType want = cuda_ ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
    for (const auto& e : result->events()) {
      if (e.deviceType() != want) continue;
      KernelTotal& t = by_name[e.name()];
      t.name = e.name();
      t.kind = cuda_ ? kernel_class(t.name) : "operator";
      t.ns += fsdp::compat::duration_ns(e);
      ++t.calls;
    }
    std::vector<KernelTotal> totals;
    for (auto& [name, t] : by_name) totals.push_back(std::move(t));
    std::sort(totals.begin(), totals.end(),
              [](const KernelTotal& a, const KernelTotal& b) { return a.ns > b.ns; });
    return totals;
  }

 private:
  void save_trace(torch::autograd::profiler::ProfilerResult& result, const std::string& trace) {
    namespace files = fsdp::files;
    const files::OutputState before = files::output_state(trace);
    files::TempGuard guard;
    ::close(files::create_temp_file(trace, &guard));  // the name, made exclusively
    try {
      result.save(guard.path());
    } catch (const c10::Error& e) {
      no_trace_ = e.what_without_backtrace();
      return;
    }
    files::rename_into_place(guard.path(), trace, before);
    guard.keep();
  }

  bool cuda_;
  bool stopped_ = false;
  std::string no_trace_;
};

// The table: the step's wall time, then (GPU) each class's time and share of the kernels' summed
// time, then the `top` largest entries by name.
inline std::string format_profile(const std::vector<KernelTotal>& totals, int64_t step_ns,
                                  bool cuda, size_t top = 40) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(2);
  auto ms = [](int64_t ns) { return static_cast<double>(ns) / 1e6; };
  int64_t busy = 0;
  std::map<std::string, std::pair<int64_t, int64_t>> classes;  // class -> (ns, calls)
  for (const KernelTotal& t : totals) {
    busy += t.ns;
    classes[t.kind].first += t.ns;
    classes[t.kind].second += t.calls;
  }
  o << "step: " << ms(step_ns) << " ms wall";
  if (cuda) {
    o << "; GPU kernels and copies: " << ms(busy)
      << " ms summed over streams (the rest of the wall: the GPU idle, waiting on the host)\n\n"
      << "| class | ms | share of kernels | calls |\n| --- | ---: | ---: | ---: |\n";
    std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> sorted(classes.begin(),
                                                                            classes.end());
    std::sort(sorted.begin(), sorted.end(),
              [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
    for (const auto& [kind, v] : sorted) {
      o << "| " << kind << " | " << ms(v.first) << " | "
        << (busy ? 100.0 * static_cast<double>(v.first) / static_cast<double>(busy) : 0.0)
        << " % | " << v.second << " |\n";
    }
  } else {
    o << "; CPU operators, inclusive (an operator's time holds the ones it calls)\n";
  }
  o << "\n| " << (cuda ? "kernel" : "operator") << " | class | calls | ms | share of step |\n"
    << "| --- | --- | ---: | ---: | ---: |\n";
  for (size_t i = 0; i < totals.size() && i < top; ++i) {
    const KernelTotal& t = totals[i];
    std::string name = t.name.size() > 100 ? t.name.substr(0, 97) + "..." : t.name;
    std::replace(name.begin(), name.end(), '|', '/');
    o << "| " << name << " | " << t.kind << " | " << t.calls << " | " << ms(t.ns) << " | "
      << (step_ns ? 100.0 * static_cast<double>(t.ns) / static_cast<double>(step_ns) : 0.0)
      << " % |\n";
  }
  return o.str();
}

}  // namespace fsdp_tools
