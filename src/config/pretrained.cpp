// model.pretrained: a model folder's settings applied to a config (load_config's last source),
// under the rules every source follows: a key the user set keeps its value when it agrees with the
// folder's and is an error naming both when it does not; a key left unset takes the folder's, with
// the folder's file and field as its origin. The folder is read by a FolderReader (the Hugging
// Face room's), so that the configuration knows no format but YAML and flags.
#include <algorithm>
#include <filesystem>

#include "config/schema.h"
#include "fsdp/data/tokenizer.h"

namespace fsdp {
namespace config {
namespace fs = std::filesystem;

namespace {

// The user's value of `key` against the folder's: equal as the option parser reads both.
void agree_or_fail(const TrainConfig& config, const Origins& origins, const Option& option,
                   const FolderSettings::Value& v, const std::string& path) {
  TrainConfig theirs = config;
  option.set(theirs, RawValue::scalar(v.text));
  const std::string mine = option.get(config), folder = option.get(theirs);
  if (mine == folder) return;
  throw error_at(origins, {option.key},
                 option.key + " = " + mine + " contradicts " + path + ", whose " + v.field +
                     " gives " + folder + " (leave " + option.key + " unset to take the folder's)");
}

// A folder's setting `key`: checked against the user's value of it, or taken with the folder's
// file and field as its origin.
void take_setting(TrainConfig& config, Origins& origins, const std::string& key,
                  const FolderSettings::Value& value, const std::string& path) {
  const Option* option = find_option(key);
  if (origins.count(key)) {
    agree_or_fail(config, origins, *option, value, path);
    return;
  }
  option->set(config, RawValue::scalar(value.text));
  origins[key] = Origin{path, 0, fs::path(path).filename().string() + "'s " + value.field, 0};
}

}  // namespace

// model.adapter: the adapter folder's lora.* settings under the same rules, and its base as
// model.pretrained when that is unset (or a check that it is the same folder).
void apply_adapter(TrainConfig& config, Origins& origins, const FolderReader& read_folder) {
  if (!read_folder) {
    throw error_at(origins, {"model.adapter"},
                   "this program reads no adapter folders (load_config was given no FolderReader)");
  }
  fs::path normal = fs::absolute(config.model.adapter).lexically_normal();
  if (!normal.has_filename()) normal = normal.parent_path();
  const std::string dir = normal.string();
  if (!fs::is_directory(dir)) {
    throw error_at(origins, {"model.adapter"}, "'" + config.model.adapter + "' is not a folder");
  }
  config.model.adapter = dir;
  const FolderSettings folder = read_folder(dir, -1);
  const std::string& path = folder.file;
  const std::string file = fs::path(path).filename().string();
  for (const auto& [key, value] : folder.settings) {
    if (key == "model.pretrained") {
      const fs::path base = fs::absolute(value.text);  // as PEFT meant it: from where it ran
      std::error_code ec;
      if (config.model.pretrained.empty() && fs::is_directory(base, ec)) {
        config.model.pretrained = base.lexically_normal().string();
        origins[key] = Origin{path, 0, file + "'s base_model_name_or_path", 0};
      } else if (!config.model.pretrained.empty() && fs::is_directory(base, ec) &&
                 !fs::equivalent(base, config.model.pretrained, ec)) {
        throw error_at(origins, {"model.pretrained", "model.adapter"},
                       "the adapter " + dir + " was made for " + value.text +
                           " (its base_model_name_or_path), not for model.pretrained " +
                           config.model.pretrained);
      }
      continue;
    }
    take_setting(config, origins, key, value, path);
  }
  if (config.model.pretrained.empty()) {
    throw error_at(
        origins, {"model.adapter", "model.pretrained"},
        "the adapter " + dir + " adapts a base model: set model.pretrained to its folder");
  }
}

std::vector<std::string> apply_pretrained(TrainConfig& config, Origins& origins,
                                          const FolderReader& read_folder) {
  if (!config.model.adapter.empty()) apply_adapter(config, origins, read_folder);
  if (config.model.pretrained.empty()) return {};
  if (!read_folder) {
    throw error_at(origins, {"model.pretrained"},
                   "this program reads no model folders (load_config was given no FolderReader)");
  }
  fs::path normal = fs::absolute(config.model.pretrained).lexically_normal();
  if (!normal.has_filename()) normal = normal.parent_path();  // "model/" is "model"
  const std::string dir = normal.string();
  if (!fs::is_directory(dir)) {
    throw error_at(origins, {"model.pretrained"},
                   "'" + config.model.pretrained + "' is not a folder");
  }
  if (!config.model.init_from.empty()) {
    throw error_at(origins, {"model.init_from", "model.pretrained"},
                   "model.init_from and model.pretrained both name weights; set one");
  }
  config.model.pretrained = dir;
  // model.type first: the other keys are checked against the type it sets.
  FolderSettings folder = read_folder(dir, config.context_length());
  const std::string& path = folder.file;
  const std::string file = fs::path(path).filename().string();
  std::vector<std::pair<std::string, FolderSettings::Value>> ordered(folder.settings.begin(),
                                                                     folder.settings.end());
  std::stable_partition(ordered.begin(), ordered.end(),
                        [](const auto& kv) { return kv.first == "model.type"; });
  for (const auto& [key, value] : ordered) take_setting(config, origins, key, value, path);
  // A GPT-2 shorter than the default sequence length: its context, unless the user chose one.
  if (!origins.count("data.seq_len") && config.model.n_positions > 0 &&
      config.data.seq_len > config.model.n_positions) {
    config.data.seq_len = config.model.n_positions;
    origins["data.seq_len"] = Origin{path, 0, file + "'s n_positions", 0};
  }
  if (!origins.count("data.tokenizer_dir")) {
    if (data::has_tokenizer(dir)) {
      config.data.tokenizer_dir = dir;
      origins["data.tokenizer_dir"] = Origin{path, 0, "model.pretrained's tokenizer", 0};
    } else if (config.model.type != ModelType::kGPT2) {  // GPT-2's own files are the default
      throw error_at(origins, {"model.pretrained"},
                     dir +
                         " holds no tokenizer (tokenizer.json): set data.tokenizer_dir "
                         "to the folder of the model's tokenizer");
    }
  }
  return folder.notes;
}

}  // namespace config
}  // namespace fsdp
