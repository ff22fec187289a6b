// Loading a TrainConfig: defaults, then a YAML file walked key by key against the option table,
// then command-line overrides, then validation. Every setting records where it came from (file and
// line, or flag), which is what lets a validation error point at the line to fix. Also the way
// back out (to_yaml), the key list for --help and docs, and the conversion to ShardingOptions.
#include "fsdp/config/config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <tuple>

#include "config/schema.h"
#include "data/utf8.h"

namespace fsdp {
namespace {

using config::Option;
using config::Origin;
using config::RawValue;
using config::ValueError;

std::string parent_of(const std::string& key) {
  const size_t dot = key.rfind('.');
  return dot == std::string::npos ? "" : key.substr(0, dot);
}

std::string format_error(const std::string& source, int line, const std::string& key,
                         const std::string& detail) {
  std::string out;
  if (!source.empty()) out += source + (line > 0 ? ":" + std::to_string(line) : "") + ": ";
  if (!key.empty()) out += key + ": ";
  return out + detail;
}

// `key` is unknown: the closest known key, else the keys of its section.
std::string unknown_key_detail(const std::string& key, const std::string& dashes,
                               bool is_map = false) {
  const std::string close = config::closest_key(key, is_map);
  if (!close.empty()) return "unknown key; did you mean " + dashes + close + "?";
  const std::string parent = parent_of(key);
  if (!parent.empty() && config::is_section(parent)) {
    return "unknown key; " + parent + " has " + config::join(config::keys_under(parent), ", ");
  }
  return "unknown key (fsdp-train --help and docs/config.md list them all)";
}

RawValue to_raw(const YAML::Node& node) {
  RawValue v;
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return RawValue::scalar(node.Scalar());
    case YAML::NodeType::Sequence:
      v.kind = RawValue::Kind::kList;
      for (const auto& item : node) {
        if (!item.IsScalar()) throw ValueError("expected a list of plain values");
        v.items.push_back(item.Scalar());
      }
      return v;
    case YAML::NodeType::Map:
      v.kind = RawValue::Kind::kMap;
      v.map_size = node.size();
      return v;
    default:
      return v;  // null
  }
}

// parallelism_config's sizes as a strategy: replicas of a sharded model are a hybrid strategy
// (FULL_SHARD's or SHARD_GRAD_OP's), replicas of an unsharded one NO_SHARD. Idempotent, so that a
// saved config reads back the same.
void apply_parallelism(FsdpConfig& f) {
  if (f.dp_replicate_size <= 1) return;
  if (f.dp_shard_size == 1) {
    f.sharding_strategy = ShardingStrategy::kNoShard;
    return;
  }
  const bool zero2 = f.sharding_strategy == ShardingStrategy::kShardGradOp ||
                     f.sharding_strategy == ShardingStrategy::kHybridShardZero2;
  f.sharding_strategy =
      zero2 ? ShardingStrategy::kHybridShardZero2 : ShardingStrategy::kHybridShard;
  f.shard_group_size = f.dp_shard_size;
}

// Applies sources in order of precedence and remembers where each setting came from.
class Builder {
 public:
  void apply_yaml(const std::string& text, const std::string& source);
  void apply_override(const ConfigOverride& o);
  // model.pretrained: the folder's config.json fills the model keys the user left unset.
  void take_pretrained(const FolderReader& read_folder) {
    try {
      config::apply_pretrained(config_, origins_, read_folder);
    } catch (const ConfigError&) {
      throw;
    } catch (const std::exception& e) {  // a filesystem error, a JSON value of another type
      throw config::error_at(origins_, {"model.pretrained"}, e.what());
    }
  }
  TrainConfig finish(MachineChecks machine = {}) {
    apply_parallelism(config_.fsdp);
    config::validate(config_, origins_, machine);
    return config_;
  }

 private:
  void walk(const YAML::Node& map, const std::string& prefix, const std::string& source);
  void apply(const Option& option, const RawValue& value, const Origin& where, bool in_file);
  void check_same_source(const std::string& target, const std::string& before, const Origin& where);

  TrainConfig config_;
  config::Origins origins_;
  config::Origins this_file_;  // settings made by the file being read
  int order_ = 0;
};

// YAML is Unicode text: yaml-cpp would keep bytes that are not UTF-8 in a value but write U+FFFD
// for them, so that --print-config could not be read back to the same config (found by
// fuzz/fuzz_config.cpp). Such bytes are refused, in the file and in overrides.
void Builder::apply_yaml(const std::string& text, const std::string& source) {
  const size_t bad = data::first_invalid_utf8(text);
  if (bad != std::string::npos) {
    const int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + bad, '\n'));
    throw ConfigError(source, line, "", "not valid UTF-8 text (byte " + std::to_string(bad) + ")");
  }
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(source, e.mark.line + 1, "", "invalid YAML: " + e.msg);
  }
  this_file_.clear();
  if (root.IsNull()) return;  // an empty file sets nothing
  if (!root.IsMap()) throw ConfigError(source, 1, "", "expected a mapping of keys to values");
  walk(root, "", source);
}

void Builder::walk(const YAML::Node& map, const std::string& prefix, const std::string& source) {
  for (const auto& entry : map) {
    const int line = entry.first.Mark().line + 1;
    if (!entry.first.IsScalar()) throw ConfigError(source, line, prefix, "keys must be names");
    const std::string key = (prefix.empty() ? "" : prefix + ".") + entry.first.Scalar();
    if (const Option* option = config::find_option(key)) {
      RawValue value;
      try {
        value = to_raw(entry.second);
      } catch (const ValueError& e) {
        throw ConfigError(source, line, key, e.what());
      }
      apply(*option, value, Origin{source, line, key, 0}, /*in_file=*/true);
    } else if (config::is_section(key)) {
      if (entry.second.IsNull()) continue;  // "fsdp_config:" with nothing under it
      if (!entry.second.IsMap()) {
        throw ConfigError(source, line, key, "expected a section (keys under it), got a value");
      }
      walk(entry.second, key, source);
    } else {
      throw ConfigError(source, line, key, unknown_key_detail(key, "", entry.second.IsMap()));
    }
  }
}

void Builder::apply_override(const ConfigOverride& o) {
  const std::string flag = "--" + o.key;
  if (data::first_invalid_utf8(o.key) != std::string::npos ||
      data::first_invalid_utf8(o.value) != std::string::npos) {
    throw ConfigError("", 0, flag, "not valid UTF-8 text");
  }
  const Option* option = config::find_option(o.key);
  if (!option) {
    if (config::is_section(o.key)) {
      throw ConfigError("", 0, flag,
                        "is a section; set one of its keys, e.g. --" + o.key + "." +
                            config::keys_under(o.key).front());
    }
    throw ConfigError("", 0, flag, unknown_key_detail(o.key, "--"));
  }
  apply(*option, RawValue::scalar(o.value), Origin{"", 0, flag, 0}, /*in_file=*/false);
}

void Builder::apply(const Option& option, const RawValue& value, const Origin& where,
                    bool in_file) {
  std::vector<std::string> before;
  for (const auto& t : option.targets) before.push_back(config::find_option(t)->get(config_));
  try {
    option.set(config_, value);
  } catch (const ValueError& e) {
    throw ConfigError(where.source, where.line, where.written, e.what());
  }
  for (size_t i = 0; i < option.targets.size(); ++i) {
    const std::string& target = option.targets[i];
    if (in_file) check_same_source(target, before[i], where);
    Origin recorded = where;
    recorded.order = ++order_;
    origins_[target] = recorded;
    if (in_file) this_file_[target] = recorded;
  }
}

// Within one file a setting is written once: a repeated key, or two spellings of one setting that
// disagree (mixed_precision and train.dtype), is an error rather than a silent winner. Across
// sources the later one wins, which is what overrides are for.
void Builder::check_same_source(const std::string& target, const std::string& before,
                                const Origin& where) {
  const auto previous = this_file_.find(target);
  if (previous == this_file_.end()) return;
  const Origin& first = previous->second;
  const std::string at = "line " + std::to_string(first.line);
  if (first.written == where.written) {
    throw ConfigError(where.source, where.line, where.written, "set twice (first at " + at + ")");
  }
  const std::string now = config::find_option(target)->get(config_);
  if (now != before) {
    throw ConfigError(
        where.source, where.line, where.written,
        "conflicts with " + first.written + " (" + at + "), which set " + target + " to " + before);
  }
}

// Reads fd to its end into `text`; returns what went wrong ("" if nothing): a read error, or more
// than kMaxConfigFileBytes (a file that grows while it is read stops there too).
std::string read_bounded(int fd, std::string& text) {
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::string("cannot read: ") + std::strerror(errno);
    if (n == 0) return "";
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxConfigFileBytes) {
      return "is larger than " + std::to_string(kMaxConfigFileBytes / 1024) +
             " KiB, the most a config file may hold";
    }
  }
}

// A config is a regular file of at most kMaxConfigFileBytes: a folder is not silently "no
// settings", and /dev/zero or a FIFO cannot be read without end. Checked on the open descriptor, so
// what is read is what was checked.
std::string read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw ConfigError(path, 0, "", std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  std::string problem;
  if (::fstat(fd, &st) != 0) {
    problem = std::string("cannot stat: ") + std::strerror(errno);
  } else if (S_ISDIR(st.st_mode)) {
    problem = "is a folder, not a config file";
  } else if (!S_ISREG(st.st_mode)) {
    problem = "is not a regular file (a device, FIFO or socket), so it cannot be a config file";
  }
  std::string text;
  if (problem.empty()) problem = read_bounded(fd, text);
  ::close(fd);
  if (!problem.empty()) throw ConfigError(path, 0, "", problem);
  return text;
}

// Scalars a YAML reader could take for something else (booleans, numbers, nulls) or that hold
// YAML's special characters are double-quoted; plain names stay plain.
bool needs_quotes(const std::string& s) {
  if (s.empty()) return true;
  for (const char* word : {"y", "n", "yes", "no", "true", "false", "on", "off", "null", "~"}) {
    if (config::same_name(s, word)) return true;
  }
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  if (*end == '\0') return true;
  if (s.find_first_of(":#[]{}&*!|>'\"%@`\n\t") != std::string::npos) return true;
  return s.front() == ' ' || s.back() == ' ' || s.front() == '-' || s.front() == '?';
}

bool written_plain(const Option& option, const std::string& text) {
  const bool typed = option.type == "int" || option.type == "number" || option.type == "bool";
  return typed || !needs_quotes(text);
}

void emit_value(YAML::Emitter& out, const Option& option, const std::string& text) {
  if (written_plain(option, text)) {
    out << text;
  } else {
    out << YAML::DoubleQuoted << text;
  }
}

std::vector<std::string> split_key(const std::string& key) {
  std::vector<std::string> parts;
  std::istringstream in(key);
  for (std::string part; std::getline(in, part, '.');) parts.push_back(part);
  return parts;
}

}  // namespace

ConfigError::ConfigError(std::string source, int line, std::string key, std::string detail)
    : std::runtime_error(format_error(source, line, key, detail)),
      source_(std::move(source)),
      line_(line),
      key_(std::move(key)),
      detail_(std::move(detail)) {}

const char* to_string(ModelType type) { return type == ModelType::kGPT2 ? "gpt2" : "llama"; }

const char* block_class_name(ModelType type) {
  return type == ModelType::kGPT2 ? "GPT2Block" : "LlamaDecoderLayer";
}

std::vector<std::string> block_class_aliases(ModelType type) {
  if (type == ModelType::kGPT2) return {"GPT2Block"};
  return {"LlamaDecoderLayer",   "MistralDecoderLayer", "Qwen2DecoderLayer", "Qwen3DecoderLayer",
          "SmolLM3DecoderLayer", "Phi3DecoderLayer",    "Gemma3DecoderLayer"};
}

const char* to_string(AutoWrapPolicy policy) {
  switch (policy) {
    case AutoWrapPolicy::kTransformerBased:
      return "TRANSFORMER_BASED_WRAP";
    case AutoWrapPolicy::kSizeBased:
      return "SIZE_BASED_WRAP";
    case AutoWrapPolicy::kNoWrap:
      return "NO_WRAP";
  }
  return "?";
}

const char* to_string(StateDictType type) {
  return type == StateDictType::kShardedStateDict ? "SHARDED_STATE_DICT" : "FULL_STATE_DICT";
}

bool operator==(const ModelConfig& a, const ModelConfig& b) {
  auto fields = [](const ModelConfig& m) {
    return std::tie(m.type, m.vocab_size, m.n_layer, m.n_head, m.n_positions, m.norm_eps,
                    m.attention, m.init_from, m.pretrained, m.adapter, m.n_embd, m.dim, m.n_kv_head,
                    m.intermediate_size, m.rope_theta, m.tie_embeddings, m.head_dim, m.qkv_bias,
                    m.o_bias, m.mlp_bias, m.rope_scaling, m.rope_factor, m.rope_low_freq_factor,
                    m.rope_high_freq_factor, m.rope_original_max_positions, m.qk_norm,
                    m.nope_layers, m.rope_short_factor, m.rope_long_factor, m.rope_attention_factor,
                    m.partial_rotary_factor, m.fused_projections, m.norm_offset, m.sandwich_norms,
                    m.embedding_scale, m.activation, m.attention_scale, m.sliding_layers,
                    m.sliding_window, m.local_rope_theta, m.fused_ops);
  };
  return fields(a) == fields(b);
}

bool operator==(const DataConfig& a, const DataConfig& b) {
  auto fields = [](const DataConfig& d) {
    return std::tie(d.dataset, d.val_dataset, d.val_split, d.seq_len, d.tokenizer_dir, d.cache_dir,
                    d.sotu_dir, d.format, d.train_on, d.packing, d.cross_example_attention,
                    d.truncate);
  };
  return fields(a) == fields(b);
}

bool operator==(const OptimConfig& a, const OptimConfig& b) {
  return std::tie(a.lr, a.min_lr, a.warmup_steps, a.max_steps, a.weight_decay, a.beta1, a.beta2,
                  a.eps, a.grad_clip, a.fused) == std::tie(b.lr, b.min_lr, b.warmup_steps,
                                                           b.max_steps, b.weight_decay, b.beta1,
                                                           b.beta2, b.eps, b.grad_clip, b.fused);
}

bool operator==(const TrainLoopConfig& a, const TrainLoopConfig& b) {
  return std::tie(a.micro_batch_size, a.gradient_accumulation_steps, a.seed, a.eval_every,
                  a.eval_batches, a.log_every, a.checkpoint_dir, a.checkpoint_every,
                  a.checkpoint_keep_last, a.resume, a.metrics_file, a.num_threads,
                  a.process_group_timeout, a.device, a.export_dir, a.fused_loss, a.freeze) ==
         std::tie(b.micro_batch_size, b.gradient_accumulation_steps, b.seed, b.eval_every,
                  b.eval_batches, b.log_every, b.checkpoint_dir, b.checkpoint_every,
                  b.checkpoint_keep_last, b.resume, b.metrics_file, b.num_threads,
                  b.process_group_timeout, b.device, b.export_dir, b.fused_loss, b.freeze);
}

const char* to_string(TrainDevice device) { return device == TrainDevice::kCuda ? "cuda" : "cpu"; }

bool operator==(const FsdpConfig& a, const FsdpConfig& b) {
  return std::tie(a.sharding_strategy, a.auto_wrap_policy, a.transformer_layer_cls_to_wrap,
                  a.min_num_params, a.backward_prefetch, a.forward_prefetch, a.prefetch_depth,
                  a.limit_all_gathers, a.split_root_reduction, a.root_reduction_chunks,
                  a.offload_params, a.activation_checkpointing, a.activation_checkpointing_every,
                  a.state_dict_type, a.sync_module_states, a.cpu_ram_efficient_loading,
                  a.shard_group_size, a.version, a.dp_shard_size, a.dp_replicate_size) ==
         std::tie(b.sharding_strategy, b.auto_wrap_policy, b.transformer_layer_cls_to_wrap,
                  b.min_num_params, b.backward_prefetch, b.forward_prefetch, b.prefetch_depth,
                  b.limit_all_gathers, b.split_root_reduction, b.root_reduction_chunks,
                  b.offload_params, b.activation_checkpointing, b.activation_checkpointing_every,
                  b.state_dict_type, b.sync_module_states, b.cpu_ram_efficient_loading,
                  b.shard_group_size, b.version, b.dp_shard_size, b.dp_replicate_size);
}

bool operator==(const GradScalerOptions& a, const GradScalerOptions& b) {
  return a.init_scale == b.init_scale && a.growth_factor == b.growth_factor &&
         a.backoff_factor == b.backoff_factor && a.growth_interval == b.growth_interval &&
         a.min_scale == b.min_scale;
}

bool operator==(const LoraConfig& a, const LoraConfig& b) {
  return std::tie(a.target_modules, a.r, a.alpha, a.dropout, a.use_rslora, a.modules_to_save) ==
         std::tie(b.target_modules, b.r, b.alpha, b.dropout, b.use_rslora, b.modules_to_save);
}

bool operator==(const TrainConfig& a, const TrainConfig& b) {
  return a.model == b.model && a.data == b.data && a.optim == b.optim && a.train == b.train &&
         a.fsdp == b.fsdp && a.lora == b.lora && a.mixed_precision == b.mixed_precision &&
         a.grad_scaler == b.grad_scaler && a.num_processes == b.num_processes &&
         a.num_machines == b.num_machines;
}

ShardingOptions TrainConfig::sharding_options() const {
  ShardingOptions options;
  options.strategy(fsdp.sharding_strategy)
      .device(to_string(train.device))
      .param_dtype(mixed_precision)
      .reduce_dtype(mixed_precision)
      .shard_group_size(fsdp.shard_group_size)
      .forward_prefetch(fsdp.forward_prefetch)
      .backward_prefetch(fsdp.backward_prefetch)
      .prefetch_depth(fsdp.prefetch_depth)
      .limit_all_gathers(fsdp.limit_all_gathers)
      .split_root_reduction(fsdp.split_root_reduction)
      .root_reduction_chunks(fsdp.root_reduction_chunks)
      .offload_params(fsdp.offload_params);
  if (fsdp.activation_checkpointing) {
    options.checkpoint_units({"*"}).checkpoint_every(fsdp.activation_checkpointing_every);
  }
  switch (fsdp.auto_wrap_policy) {
    case AutoWrapPolicy::kTransformerBased: {
      std::vector<std::string> classes;
      const std::vector<std::string> aliases = block_class_aliases(model.type);
      for (const std::string& c : fsdp.transformer_layer_cls_to_wrap) {
        const bool alias = std::find(aliases.begin(), aliases.end(), c) != aliases.end();
        const std::string name = alias ? block_class_name(model.type) : c;
        if (std::find(classes.begin(), classes.end(), name) == classes.end()) {
          classes.push_back(name);
        }
      }
      if (classes.empty()) classes.push_back(block_class_name(model.type));
      options.wrap(WrapPolicy::by_type(classes));
      break;
    }
    case AutoWrapPolicy::kSizeBased:
      options.wrap(WrapPolicy::by_size(fsdp.min_num_params));
      break;
    case AutoWrapPolicy::kNoWrap:
      options.wrap(WrapPolicy::none());
      break;
  }
  return options;
}

TrainConfig parse_config(const std::string& yaml, const std::string& source_name,
                         const std::vector<ConfigOverride>& overrides) {
  Builder builder;
  builder.apply_yaml(yaml, source_name);
  for (const auto& o : overrides) builder.apply_override(o);
  return builder.finish();
}

TrainConfig load_config(const std::string& path, const std::vector<ConfigOverride>& overrides,
                        MachineChecks machine, const FolderReader& read_folder) {
  Builder builder;
  if (!path.empty()) builder.apply_yaml(read_file(path), path);
  for (const auto& o : overrides) builder.apply_override(o);
  builder.take_pretrained(
      read_folder);  // not for a checkpoint's saved config (parse_config): it is complete
  return builder.finish(machine);
}

void validate_config(const TrainConfig& config) { config::validate(config, {}); }

std::string to_yaml(const TrainConfig& config) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  std::vector<std::string> open;  // the sections the emitter is inside
  for (const Option& option : config::options()) {
    if (option.kind != ConfigKey::Kind::kSetting) continue;
    if (option.type_specific && option.model_type != config.model.type) continue;
    const std::vector<std::string> parts = split_key(option.key);
    size_t shared = 0;
    while (shared < open.size() && shared + 1 < parts.size() && open[shared] == parts[shared]) {
      ++shared;
    }
    for (; open.size() > shared; open.pop_back()) out << YAML::EndMap;
    for (; open.size() + 1 < parts.size(); open.push_back(parts[open.size()])) {
      out << YAML::Key << parts[open.size()] << YAML::Value << YAML::BeginMap;
    }
    out << YAML::Key << parts.back() << YAML::Value;
    emit_value(out, option, option.get(config));
  }
  for (; !open.empty(); open.pop_back()) out << YAML::EndMap;
  out << YAML::EndMap;
  return "# fsdp-train configuration (fsdp-train --config FILE reads it back)\n" +
         std::string(out.c_str()) + "\n";
}

std::vector<std::string> architecture_differences(const TrainConfig& a, const TrainConfig& b) {
  std::vector<std::string> out;
  for (const Option& option : config::options()) {
    if (option.kind != ConfigKey::Kind::kSetting || option.key.rfind("model.", 0) != 0) continue;
    if (option.key == "model.init_from" || option.key == "model.pretrained" ||
        option.key == "model.attention") {
      continue;  // where the weights come from, and a kernel that computes the same function
    }
    if (option.type_specific &&
        (option.model_type != a.model.type || option.model_type != b.model.type)) {
      continue;  // model.type differs, and says so
    }
    const std::string x = option.get(a), y = option.get(b);
    if (x != y) out.push_back(option.key + ": " + x + " and " + y);
  }
  if (a.context_length() != b.context_length()) {
    out.push_back("context length (model.n_positions, or data.seq_len where that is 0): " +
                  std::to_string(a.context_length()) + " and " +
                  std::to_string(b.context_length()));
  }
  return out;
}

std::vector<ConfigKey> config_keys() {
  const TrainConfig defaults;
  std::vector<ConfigKey> keys;
  for (const Option& option : config::options()) {
    ConfigKey k;
    k.key = option.key;
    k.type = option.type;
    k.help = option.help;
    k.kind = option.kind;
    if (option.kind == ConfigKey::Kind::kSetting) {
      const std::string text = option.get(defaults);  // defaults hold no quotes to escape
      k.default_value = written_plain(option, text) ? text : "\"" + text + "\"";
    }
    if (option.type_specific) k.model_type = to_string(option.model_type);
    keys.push_back(k);
  }
  return keys;
}

}  // namespace fsdp
