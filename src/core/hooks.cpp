// The registry behind fsdp::forward: which modules have hooks. Keyed by module address, because a
// C++ module has no identity beyond it and the registry must not keep modules alive.
#include "fsdp/hooks.h"

#include <unordered_map>

namespace fsdp {
namespace {
std::unordered_map<const torch::nn::Module*, std::shared_ptr<ModuleHooks>>& registry() {
  static std::unordered_map<const torch::nn::Module*, std::shared_ptr<ModuleHooks>> map;
  return map;
}
}  // namespace

void set_module_hooks(const torch::nn::Module* module, std::shared_ptr<ModuleHooks> hooks) {
  if (hooks) {
    registry()[module] = std::move(hooks);
  } else {
    registry().erase(module);
  }
}

ModuleHooks* find_module_hooks(const torch::nn::Module* module) {
  auto& map = registry();
  if (map.empty()) return nullptr;
  auto it = map.find(module);
  return it == map.end() ? nullptr : it->second.get();
}

}  // namespace fsdp
