// The run's config as a checkpoint holds it: two fields of the train state's JSON object, the
// config as YAML ("config") and the folder its relative paths mean ("started_in"). The trainer
// writes them beside its own (the loader's position, the loss scaler); eval, sample, export and a
// resumed run read them back here (checkpoint_config in fsdp/config/config.h).
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "fsdp/config/config.h"

namespace fsdp {
namespace config {

// Adds the two fields to `train_state` (the current folder as "started_in").
void put_saved_config(const TrainConfig& config, nlohmann::json& train_state);

// The config of a train state, as saved (relative paths as they were). Throws CheckpointError
// naming `where` when the train state holds none.
TrainConfig saved_config(const std::string& train_state, const std::string& where);

}  // namespace config
}  // namespace fsdp
