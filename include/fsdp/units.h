// The units a wrap policy makes of a model, without sharding it: what planners and tools need to
// know before (or instead of) calling fully_shard. The same rules as fully_shard: a parameter
// belongs to the innermost wrapped module containing it, a parameter tied across units to the
// root, and a wrapped module left with no parameters is no unit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/options.h"

namespace torch {
namespace nn {
class Module;
}
}  // namespace torch

namespace fsdp {

struct UnitSize {
  std::string name;   // the wrapped module's qualified name; "" for the root
  int64_t numel = 0;  // parameters in the unit that train (tied ones once)
  // Parameters in the unit that do not train (requires_grad false): a flat parameter of their
  // own, gathered but never reduced (FullyShardedModel, frozen parameters).
  int64_t frozen_numel = 0;
  int64_t total() const { return numel + frozen_numel; }
};

// Units in model order, the root last (as FullyShardedModel::units()). Throws as fully_shard does
// for a policy that matches nothing.
std::vector<UnitSize> unit_sizes(torch::nn::Module& root, const WrapPolicy& policy);

}  // namespace fsdp
