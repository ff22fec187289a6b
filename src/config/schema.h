// The option table: every key the trainer's configuration accepts, with its type, help line, and
// how it reads into (and, for settings, writes out of) a TrainConfig. The YAML loader, the
// command-line parser, to_yaml, --help and config_keys() all walk this one table, so none of them
// can know a key the others do not. Also the table of settings that parse but are not supported
// yet, and validation, which reports through an Origins lookup so that an error about a value
// points at the file line or flag that set it.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "config/value.h"
#include "fsdp/config/config.h"

namespace fsdp {
namespace config {

struct Option {
  std::string key;   // dotted path
  std::string type;  // as --help shows it
  std::string help;
  ConfigKey::Kind kind = ConfigKey::Kind::kSetting;
  // The settings this key writes (a setting writes itself). Two keys of one file that write the
  // same setting must agree.
  std::vector<std::string> targets;
  // Reads `v` into the config; throws ValueError. Accepted keys only check `v`; rejected ones throw
  // unless it is empty.
  std::function<void(TrainConfig&, const RawValue&)> set;
  // Settings only: the value as to_yaml writes it.
  std::function<std::string(const TrainConfig&)> get;
  // Model keys of one type only: set for the other type, they are an error.
  bool type_specific = false;
  ModelType model_type = ModelType::kGPT2;
};

// Every option, in --help order.
const std::vector<Option>& options();
// The option named `key`, or nullptr.
const Option* find_option(const std::string& key);
// Whether `key` is a proper prefix of option keys ("fsdp_config", "dist.fsdp").
bool is_section(const std::string& key);
// The closest known key to an unknown `key`, or "" when none is close. A YAML key whose value is a
// mapping was meant as a section, so `want_section` compares it with sections only.
std::string closest_key(const std::string& key, bool want_section = false);
// The keys directly under section `section` ("" for the top level), for an error that lists them.
std::vector<std::string> keys_under(const std::string& section);

// Where each setting got its value. A setting missing from the map has its default.
struct Origin {
  std::string source;   // file name; empty for the command line
  int line = 0;         // 1-based line in `source`
  std::string written;  // the key as the user wrote it: "train.dtype", "--optim.lr"
  int order = 0;        // later settings have larger numbers
};
using Origins = std::map<std::string, Origin>;

// Builds the ConfigError for `detail` about `key`, located where `origins` says it was set (the
// most recent of several keys when given more than one).
ConfigError error_at(const Origins& origins, const std::vector<std::string>& keys,
                     const std::string& detail);

// Ranges, relations between keys, model-type-specific keys set for the other type, the
// unsupported table, and what `machine` asks of this machine. Throws ConfigError located through
// `origins`.
void validate(const TrainConfig& config, const Origins& origins, MachineChecks machine = {});

// When config.model.pretrained is set: sets the model.* keys the folder determines (read by
// `read_folder`), data.seq_len to a GPT-2's n_positions when the default is longer, and, when the
// folder has a tokenizer and data.tokenizer_dir was not set, data.tokenizer_dir (each only when
// not set); the folder is made absolute (a checkpoint's saved config then finds it from
// anywhere). `origins` says which keys were set by the user: a value that contradicts the folder
// is a ConfigError naming both. The values set are recorded in `origins` as coming from the
// folder's file. Returns the folder's notes. (config/pretrained.cpp)
std::vector<std::string> apply_pretrained(TrainConfig& config, Origins& origins,
                                          const FolderReader& read_folder);

}  // namespace config
}  // namespace fsdp
