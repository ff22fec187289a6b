// Parsing of the sharding options' user-facing names, in one place.
#include "fsdp/options.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <string>

namespace fsdp {
namespace {
struct StrategyName {
  ShardingStrategy strategy;
  const char* name;
};
constexpr StrategyName kStrategies[] = {
    {ShardingStrategy::kFullShard, "FULL_SHARD"},
    {ShardingStrategy::kShardGradOp, "SHARD_GRAD_OP"},
    {ShardingStrategy::kNoShard, "NO_SHARD"},
    {ShardingStrategy::kHybridShard, "HYBRID_SHARD"},
    {ShardingStrategy::kHybridShardZero2, "HYBRID_SHARD_ZERO2"},
};
}  // namespace

ShardingStrategy parse_sharding_strategy(const std::string& name) {
  std::string upper = name;
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  for (const auto& s : kStrategies) {
    if (upper == s.name || upper == std::to_string(static_cast<int>(s.strategy))) {
      return s.strategy;
    }
  }
  throw std::invalid_argument("unknown sharding strategy '" + name +
                              "': expected one of FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, "
                              "HYBRID_SHARD, HYBRID_SHARD_ZERO2 (or 1-5)");
}

const char* to_string(BufferSync sync) {
  switch (sync) {
    case BufferSync::kPerRank:
      return "PER_RANK";
    case BufferSync::kBroadcast:
      return "BROADCAST";
    case BufferSync::kAverage:
      return "AVERAGE";
  }
  return "?";
}

const char* to_string(ShardingStrategy strategy) {
  for (const auto& s : kStrategies) {
    if (s.strategy == strategy) return s.name;
  }
  return "UNKNOWN";
}

WrapPolicy WrapPolicy::by_type(std::vector<std::string> types) {
  WrapPolicy p;
  p.kind = Kind::kModuleType;
  p.module_types = std::move(types);
  return p;
}

WrapPolicy WrapPolicy::by_size(int64_t min_num_params) {
  WrapPolicy p;
  p.kind = Kind::kSize;
  p.min_num_params = min_num_params;
  return p;
}

WrapPolicy WrapPolicy::by_name(std::vector<std::string> names) {
  WrapPolicy p;
  p.kind = Kind::kExplicit;
  p.module_names = std::move(names);
  return p;
}

bool is_hybrid(ShardingStrategy s) {
  return s == ShardingStrategy::kHybridShard || s == ShardingStrategy::kHybridShardZero2;
}

bool reshards_after_forward(ShardingStrategy s) {
  return s == ShardingStrategy::kFullShard || s == ShardingStrategy::kHybridShard;
}

int root_reduction_chunks(int option, int64_t root_numel, int64_t largest_unit_numel,
                          int64_t wrapped_units, int64_t root_shard_numel) {
  if (option < 0) {
    throw std::invalid_argument("root_reduction_chunks must be >= 0 (0: automatic), got " +
                                std::to_string(option));
  }
  if (option > root_shard_numel) {
    throw std::invalid_argument(
        "root_reduction_chunks " + std::to_string(option) + " is more than the root's shard of " +
        std::to_string(root_shard_numel) + " elements: a piece would be empty");
  }
  if (option > 0) return option;
  if (largest_unit_numel <= 0) return 1;
  const int64_t pieces = (root_numel + largest_unit_numel - 1) / largest_unit_numel;
  return static_cast<int>(
      std::max<int64_t>(1, std::min({pieces, wrapped_units, root_shard_numel})));
}

const char* to_string(BackwardPrefetch prefetch) {
  switch (prefetch) {
    case BackwardPrefetch::kBackwardPre:
      return "BACKWARD_PRE";
    case BackwardPrefetch::kBackwardPost:
      return "BACKWARD_POST";
    case BackwardPrefetch::kNoPrefetch:
      return "NO_PREFETCH";
  }
  return "?";
}

}  // namespace fsdp
