// Wrap policies: which submodules of a model become FSDP units.
#include <torch/nn/module.h>

#include <functional>

#include "core/check.h"
#include "core/runtime.h"

namespace fsdp {
namespace {

// "fsdp::GPT2BlockImpl" and "GPT2Block" both become "GPT2Block".
std::string short_type_name(std::string name) {
  const auto colon = name.rfind("::");
  if (colon != std::string::npos) name = name.substr(colon + 2);
  const std::string impl = "Impl";
  if (name.size() > impl.size() &&
      name.compare(name.size() - impl.size(), impl.size(), impl) == 0) {
    name.resize(name.size() - impl.size());
  }
  return name;
}

using Selected = std::vector<std::pair<std::string, const torch::nn::Module*>>;

Selected by_type(torch::nn::Module& root, const WrapPolicy& policy) {
  std::vector<std::string> wanted;
  for (const auto& t : policy.module_types) wanted.push_back(short_type_name(t));
  Selected out;
  std::string seen;
  for (const auto& item : root.named_modules("", /*include_self=*/false)) {
    const std::string type = short_type_name(item.value()->name());
    if (std::find(wanted.begin(), wanted.end(), type) != wanted.end()) {
      out.emplace_back(item.key(), item.value().get());
    } else if (seen.find(" " + type + ",") == std::string::npos) {
      seen += " " + type + ",";
    }
  }
  if (!seen.empty()) seen.pop_back();  // the last comma
  FSDP_CHECK(!out.empty(),
             "wrap policy by module type matched no module; types in the model:", seen);
  return out;
}

Selected by_name(torch::nn::Module& root, const WrapPolicy& policy) {
  auto modules = root.named_modules("", /*include_self=*/false);
  Selected out;
  for (const auto& name : policy.module_names) {
    const auto* found = modules.find(name);
    FSDP_CHECK(found != nullptr, "wrap policy names module '", name, "', which the model lacks");
    out.emplace_back(name, found->get());
  }
  FSDP_CHECK(!out.empty(), "explicit wrap policy lists no module");
  return out;
}

// PyTorch's size_based_auto_wrap_policy: bottom-up, a module is wrapped when the parameters not
// already in a wrapped descendant number at least min_num_params; containers that have no
// forward (ModuleList, ModuleDict) are never wrapped, as in PyTorch. Returns the unwrapped count.
int64_t wrap_by_size(const std::string& name, torch::nn::Module& module, int64_t min_params,
                     bool is_root, Selected& out) {
  int64_t count = 0;
  for (const auto& p : module.named_parameters(/*recurse=*/false)) count += p.value().numel();
  for (const auto& child : module.named_children()) {
    const std::string child_name = name.empty() ? child.key() : name + "." + child.key();
    count += wrap_by_size(child_name, *child.value(), min_params, false, out);
  }
  const std::string type = short_type_name(module.name());
  const bool container = type == "ModuleList" || type == "ModuleDict";
  if (!is_root && !container && count >= min_params) {
    out.emplace_back(name, &module);
    return 0;
  }
  return count;
}

// LibTorch's containers that have no forward: a unit must be something fsdp::forward can call.
const Selected& callable(const Selected& units) {
  for (const auto& [name, module] : units) {
    const std::string type = short_type_name(module->name());
    const bool container = type == "ModuleList" || type == "ModuleDict" ||
                           type == "ParameterList" || type == "ParameterDict";
    FSDP_CHECK(!container, "the wrap policy selects '", name, "', a torch::nn::", type,
               ": a container without a forward, which no fsdp::forward can call, so its "
               "parameters would never be gathered; wrap the modules it holds instead (by their "
               "type, or by name: '",
               name, ".0', ...)");
  }
  return units;
}

}  // namespace

Selected select_units(torch::nn::Module& root, const WrapPolicy& policy) {
  switch (policy.kind) {
    case WrapPolicy::Kind::kNone:
      return {};
    case WrapPolicy::Kind::kModuleType:
      return callable(by_type(root, policy));
    case WrapPolicy::Kind::kExplicit:
      return callable(by_name(root, policy));
    case WrapPolicy::Kind::kSize: {
      FSDP_CHECK(policy.min_num_params > 0, "min_num_params must be positive, got ",
                 policy.min_num_params);
      Selected out;
      wrap_by_size("", root, policy.min_num_params, true, out);
      FSDP_CHECK(!out.empty(), "wrap policy by size (min_num_params=", policy.min_num_params,
                 ") matched no module below the root");
      // Bottom-up order; report outermost first like the other policies.
      std::reverse(out.begin(), out.end());
      return out;
    }
  }
  return {};
}

}  // namespace fsdp
