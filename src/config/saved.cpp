// The run's config in a checkpoint's train state (config/saved.h), and the paths it names made
// absolute against the folder the run started in.
#include "config/saved.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "fsdp/checkpoint/checkpoint.h"

namespace fsdp {
namespace config {

void put_saved_config(const TrainConfig& config, nlohmann::json& train_state) {
  train_state["config"] = to_yaml(config);
  // The config's relative paths mean this folder: readers elsewhere resolve them against it.
  train_state["started_in"] = std::filesystem::current_path().string();
}

TrainConfig saved_config(const std::string& train_state, const std::string& where) {
  const auto j = nlohmann::json::parse(train_state, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("config") || !j["config"].is_string()) {
    throw CheckpointError(where +
                          ": the train state holds no trainer config (was it written by "
                          "fsdp-train?)");
  }
  return parse_config(j["config"].get<std::string>(), where + " (saved config)");
}

}  // namespace config

TrainConfig checkpoint_config(const std::string& dir) {
  const std::string state = read_checkpoint_metadata(dir).train_state;
  TrainConfig c = config::saved_config(state, dir);
  const auto j = nlohmann::json::parse(state, nullptr, false);
  if (j.is_object() && j.contains("started_in") && j["started_in"].is_string()) {
    resolve_paths(c, j["started_in"].get<std::string>());
  }
  return c;
}

void resolve_paths(TrainConfig& c, const std::string& base) {
  auto resolve = [&](std::string& path) {
    if (!path.empty() && std::filesystem::path(path).is_relative()) {
      path = (std::filesystem::path(base) / path).lexically_normal().string();
    }
  };
  if (c.data.dataset != "sotu") resolve(c.data.dataset);  // the bundled corpus is a name
  for (std::string* path :
       {&c.data.val_dataset, &c.data.tokenizer_dir, &c.data.cache_dir, &c.data.sotu_dir,
        &c.model.init_from, &c.model.pretrained, &c.model.adapter, &c.train.checkpoint_dir,
        &c.train.metrics_file, &c.train.export_dir}) {
    resolve(*path);
  }
}

}  // namespace fsdp
