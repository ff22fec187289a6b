// The checks before a run builds its model, and the naming of allocations that fail (preflight.h).
#include "train/preflight.h"

#include <c10/util/Exception.h>

#include <new>
#include <stdexcept>

#include "fsdp/plan/fits.h"
#include "hf/folder.h"

namespace fsdp {
namespace {

// LibTorch's allocator errors: the CPU's ("DefaultCPUAllocator: can't allocate memory"), ours
// (host_memory.cpp: "cannot map N bytes"), CUDA's ("CUDA out of memory").
bool is_allocation_failure(const std::string& what) {
  for (const char* sign : {"can't allocate memory", "cannot map", "out of memory"}) {
    if (what.find(sign) != std::string::npos) return true;
  }
  return false;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

}  // namespace

void preflight(const TrainConfig& config, const Comm& world, bool training, bool from_folder) {
  if (from_folder) hf::check_folder_weights(config);
  const int local = world.local_size() > 0 ? world.local_size() : world.size();
  check_host_memory(config, world.size(), local, host_memory_limit(), training);
}

void building(const std::string& what, const std::function<void()>& build) {
  try {
    build();
  } catch (const std::bad_alloc&) {
    throw std::runtime_error("out of memory while building " + what +
                             " (std::bad_alloc); fsdp-plan shows what the job needs per rank");
  } catch (const c10::Error& e) {
    if (!is_allocation_failure(e.what())) throw;
    throw std::runtime_error("out of memory while building " + what + ": " +
                             first_line(e.what_without_backtrace()) +
                             "; fsdp-plan shows what the job needs per rank");
  }
}

}  // namespace fsdp
