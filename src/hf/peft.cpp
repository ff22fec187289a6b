// PEFT adapter folders (hf/peft.h): adapter_config.json read into our lora.* settings and written
// from them, adapter_model.safetensors loaded and written under PEFT's key prefix, and the merge
// of a LoRA checkpoint into its base. PEFT's rules followed here, from its source (peft 0.20):
// a LoRA config must say peft_type "LORA" (its MIN_EXPECTED_CONFIG_KEYS); target_modules is a
// list of names or name suffixes, or a regex string (refused here); keys drop the adapter name
// ("lora_A.default.weight" is saved as "lora_A.weight"); a module to save is saved under its own
// name; a merge adds transpose(B A, fan_in_fan_out) * scaling.
#include "hf/peft.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "fsdp/checkpoint/checkpoint.h"
#include "fsdp/checkpoint/ownership.h"
#include "fsdp/checkpoint/safetensors.h"
#include "fsdp/models/lora.h"
#include "util/files.h"
#include "util/json.h"

namespace fsdp {
namespace hf {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kAdapterConfig = "adapter_config.json";
constexpr const char* kAdapterWeights = "adapter_model.safetensors";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// --- adapter_config.json in ---------------------------------------------------------------------

class AdapterConfig {
 public:
  explicit AdapterConfig(std::string path) : path_(std::move(path)) {
    std::string text;
    try {
      text =
          json_bounds::read_file(path_, json_bounds::kMaxSmallJsonBytes, "an adapter_config.json");
      j_ = json_bounds::parse(text, path_);
    } catch (const json::exception& e) {
      throw ConfigError(path_, 0, "model.adapter", std::string("not JSON: ") + e.what());
    } catch (const std::runtime_error& e) {
      throw ConfigError(path_, 0, "model.adapter", e.what());
    }
    if (!j_.is_object()) fail_adapter("", "expected a JSON object");
  }

  [[noreturn]] void fail_adapter(const std::string& field, const std::string& what) const {
    throw ConfigError(path_, 0, "model.adapter", (field.empty() ? "" : field + ": ") + what);
  }
  bool set(const char* field) const { return j_.contains(field) && !j_.at(field).is_null(); }
  const json& at(const char* field) const { return j_.at(field); }
  // A field PEFT writes that asks for something we do not do, unless it has its inert value.
  void refuse_unless(const char* field, const std::function<bool(const json&)>& inert,
                     const std::string& what) const {
    if (set(field) && !inert(at(field))) {
      fail_adapter(field, json_bounds::excerpt(at(field)) + ": " + what + " is not supported");
    }
  }
  std::vector<std::string> names(const char* field) const {
    const json& v = at(field);
    if (!v.is_array())
      fail_adapter(field, "expected a list of module names, got " + json_bounds::excerpt(v));
    std::vector<std::string> out;
    for (const auto& item : v) {
      if (!item.is_string())
        fail_adapter(field, "expected names, got " + json_bounds::excerpt(item));
      out.push_back(item.get<std::string>());
    }
    return out;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  json j_;
};

std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ",") + n;
  return s;
}

void refuse_unsupported(const AdapterConfig& c) {
  const auto is_false = [](const json& v) { return v.is_boolean() && !v.get<bool>(); };
  const auto empty = [](const json& v) { return v.empty(); };
  if (!c.set("peft_type") || !c.at("peft_type").is_string()) {
    c.fail_adapter("peft_type", "missing: a PEFT adapter_config.json names its peft_type");
  }
  const std::string type = c.at("peft_type").get<std::string>();
  if (type != "LORA")
    c.fail_adapter("peft_type", "'" + type + "': fsdp.cpp reads LoRA adapters (LORA)");
  c.refuse_unless("use_dora", is_false, "DoRA");
  c.refuse_unless("lora_bias", is_false, "a LoRA bias");
  c.refuse_unless("use_qalora", is_false, "QALoRA");
  c.refuse_unless(
      "bias", [](const json& v) { return v == "none"; }, "training biases");
  c.refuse_unless("rank_pattern", empty, "a rank per module");
  c.refuse_unless("alpha_pattern", empty, "an alpha per module");
  for (const char* f :
       {"layers_to_transform", "layers_pattern", "layer_replication", "exclude_modules",
        "target_parameters", "trainable_token_indices", "alora_invocation_tokens"}) {
    c.refuse_unless(f, empty, std::string("'") + f + "'");
  }
  c.refuse_unless(
      "task_type", [](const json& v) { return v == "CAUSAL_LM"; }, "a task other than CAUSAL_LM");
}

}  // namespace

bool is_adapter_folder(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / kAdapterConfig, ec);
}

std::string adapter_weights(const std::string& dir) {
  return (fs::path(dir) / kAdapterWeights).string();
}

FolderSettings read_adapter_settings(const std::string& dir) {
  const AdapterConfig c((fs::path(dir) / kAdapterConfig).string());
  refuse_unsupported(c);
  FolderSettings out;
  out.file = c.path();
  const auto setting = [&](const std::string& key, const std::string& text, const char* field) {
    out.settings[key] = {text, field};
  };
  if (!c.set("target_modules"))
    c.fail_adapter("target_modules", "missing: name the adapted modules");
  const json& targets = c.at("target_modules");
  if (targets.is_string()) {
    if (targets != "all-linear") {
      c.fail_adapter("target_modules",
                     json_bounds::excerpt(targets) +
                         ": a regular expression is not supported; list the modules");
    }
    setting("lora.target_modules", "all-linear", "target_modules");
  } else {
    setting("lora.target_modules", "[" + join_names(c.names("target_modules")) + "]",
            "target_modules");
  }
  const auto number = [&](const char* field, const char* key, bool integer) {
    if (!c.set(field)) return;  // PEFT's default, which is ours
    const json& v = c.at(field);
    if (!v.is_number() || (integer && !v.is_number_integer())) {
      c.fail_adapter(field, "expected a number, got " + json_bounds::excerpt(v));
    }
    setting(key, v.dump(), field);
  };
  number("r", "lora.r", true);
  number("lora_alpha", "lora.alpha", false);
  number("lora_dropout", "lora.dropout", false);
  if (c.set("use_rslora")) {
    if (!c.at("use_rslora").is_boolean()) c.fail_adapter("use_rslora", "expected true or false");
    setting("lora.use_rslora", c.at("use_rslora").get<bool>() ? "true" : "false", "use_rslora");
  }
  if (c.set("modules_to_save")) {
    setting("lora.modules_to_save", "[" + join_names(c.names("modules_to_save")) + "]",
            "modules_to_save");
  }
  if (c.set("base_model_name_or_path") && c.at("base_model_name_or_path").is_string()) {
    const std::string base = c.at("base_model_name_or_path").get<std::string>();
    if (!base.empty()) setting("model.pretrained", base, "base_model_name_or_path");
  }
  return out;
}

FullStateLoadOptions adapter_load_options(const TrainConfig& config) {
  FullStateLoadOptions load;
  const std::string prefix = kPeftPrefix;
  load.name_map([prefix](const std::string& name) {
    return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
  });
  const std::vector<std::string> saved = config.lora.modules_to_save;
  // The base's parameters: the adapter file holds none of them.
  load.may_lack([saved](const std::string& name) {
    return !is_lora_parameter(name) && !in_saved_module(name, saved);
  });
  return load;
}

// --- out ----------------------------------------------------------------------------------------

namespace {

[[noreturn]] void fail_adapter(const std::string& path, const std::string& what) {
  throw std::runtime_error("export '" + path + "': " + what);
}

// A number as PEFT's config writes it: an integer when it is one (lora_alpha 16, not 16.0).
json number(double x) {
  if (std::floor(x) == x && std::fabs(x) < 1e15) return static_cast<int64_t>(x);
  return x;
}

// target_modules as written: the run's list; for all-linear, the adapted modules' last names
// (PEFT writes the modules it resolved; their last names match exactly those, since all-linear
// adapts every projection with such a name).
json target_modules(const TrainConfig& t, const std::vector<std::string>& adapted) {
  if (!(t.lora.target_modules.size() == 1 && t.lora.target_modules.front() == "all-linear")) {
    return t.lora.target_modules;
  }
  std::set<std::string> last;
  for (const auto& m : adapted) last.insert(m.substr(m.rfind('.') + 1));
  return std::vector<std::string>(last.begin(), last.end());
}

// adapter_config.json as PEFT 0.20 writes a LoRA config (its keys sorted), with the fields that
// say what the adapter is and the inert values of the others it lists.
json adapter_config(const TrainConfig& t, const std::vector<std::string>& adapted) {
  const LoraConfig& l = t.lora;
  const std::string base = !t.model.pretrained.empty() ? t.model.pretrained : t.model.init_from;
  json j = {
      {"alpha_pattern", json::object()},
      {"auto_mapping", nullptr},
      {"base_model_name_or_path", base},
      {"bias", "none"},
      {"exclude_modules", nullptr},
      {"fan_in_fan_out", t.model.type == ModelType::kGPT2},
      {"inference_mode", true},
      {"init_lora_weights", true},
      {"layer_replication", nullptr},
      {"layers_pattern", nullptr},
      {"layers_to_transform", nullptr},
      {"loftq_config", json::object()},
      {"lora_alpha", number(l.alpha)},
      {"lora_bias", false},
      {"lora_dropout", l.dropout},
      {"megatron_config", nullptr},
      {"megatron_core", "megatron.core"},
      {"modules_to_save", l.modules_to_save.empty() ? json(nullptr) : json(l.modules_to_save)},
      {"peft_type", "LORA"},
      {"r", l.r},
      {"rank_pattern", json::object()},
      {"revision", nullptr},
      {"target_modules", target_modules(t, adapted)},
      {"task_type", "CAUSAL_LM"},
      {"use_dora", false},
      {"use_rslora", l.use_rslora}};
  return j;
}

// The checkpoint's parameters (adapters and modules to save) into `path` under PEFT's keys, fp32.
void write_adapter_weights(const std::string& step_dir, const std::string& path) {
  CheckpointReader reader(step_dir);
  std::vector<const CheckpointParam*> params;
  std::vector<SafetensorsTensorSpec> specs;
  for (const auto& unit : reader.metadata().units) {
    for (const auto& p : unit.params) {
      params.push_back(&p);
      specs.push_back({kPeftPrefix + p.name, SafetensorsDType::kF32, p.shape});
    }
  }
  SafetensorsWriter writer(path, specs);
  constexpr int64_t kChunk = int64_t{1} << 22;
  std::vector<float> buf;
  for (const CheckpointParam* p : params) {
    for (int64_t i = 0; i < p->numel; i += kChunk) {
      const int64_t n = std::min(kChunk, p->numel - i);
      buf.resize(static_cast<size_t>(n));
      reader.read(p->name, "param", i, n, buf.data());
      writer.write_bytes(kPeftPrefix + p->name, i * 4, buf.data(), n * 4);
    }
  }
  writer.commit();
}

// The modules that carry adapters in a checkpoint: those of its lora_A parameters.
std::vector<std::string> adapted_modules(const CheckpointMetadata& meta) {
  std::vector<std::string> out;
  const std::string suffix = ".lora_A.weight";
  for (const auto& unit : meta.units) {
    for (const auto& p : unit.params) {
      if (ends_with(p.name, suffix)) out.push_back(p.name.substr(0, p.name.size() - suffix.size()));
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> export_adapter_folder(const std::string& step_dir,
                                               const std::string& out_dir) {
  fs::path out = fs::path(out_dir).lexically_normal();
  if (!out.has_filename()) out = out.parent_path();
  check_checkpoint_output(out.string(), step_dir, "the checkpoint it is exported from",
                          OutputKind::kNewFolder);
  const TrainConfig t = checkpoint_config(step_dir);
  if (!t.lora.enabled())
    fail_adapter(step_dir, "the run trained no LoRA adapters (lora.target_modules)");
  const CheckpointMetadata meta = read_checkpoint_metadata(step_dir);
  const files::OutputState before = files::output_state(out.string());
  files::TempGuard guard;
  const fs::path tmp = files::create_temp_folder(out.string(), &guard);
  {
    std::ofstream config(tmp / kAdapterConfig);
    config << adapter_config(t, adapted_modules(meta)).dump(2) << "\n";
    if (!config.flush()) fail_adapter((tmp / kAdapterConfig).string(), "cannot write it");
  }
  write_adapter_weights(step_dir, (tmp / kAdapterWeights).string());
  files::rename_into_place(tmp.string(), out.string(), before);
  guard.keep();
  return {(out / kAdapterConfig).string(), (out / kAdapterWeights).string()};
}

ConsolidateExtras merge_extras(const std::string& step_dir, const TrainConfig& run,
                               const SafetensorsSet& base) {
  auto reader = std::make_shared<CheckpointReader>(step_dir);
  std::map<std::string, std::string> adapted;  // weight -> the module carrying its adapter
  for (const std::string& m : adapted_modules(reader->metadata())) adapted[m + ".weight"] = m;
  LoraOptions options;
  options.r = run.lora.r;
  options.alpha = run.lora.alpha;
  options.rslora = run.lora.use_rslora;
  const double scaling = options.scaling();
  const bool fan_in_fan_out = run.model.type == ModelType::kGPT2;  // Conv1D's [in, out] weights
  const auto read_whole = [reader](const std::string& name) {
    const CheckpointParam* p = nullptr;
    for (const auto& unit : reader->metadata().units) {
      for (const auto& q : unit.params) p = q.name == name ? &q : p;
    }
    if (p == nullptr) throw CheckpointError("checkpoint: no parameter '" + name + "'");
    at::Tensor t = at::empty(p->shape, at::kFloat);
    reader->read(name, "param", 0, p->numel, t.data_ptr<float>());
    return t;
  };
  ConsolidateExtras extras;
  extras.frozen_from = &base;
  extras.omit = is_lora_parameter;
  extras.addend = [adapted, read_whole, scaling, fan_in_fan_out](const std::string& name) {
    const auto it = adapted.find(name);
    if (it == adapted.end()) return at::Tensor();
    const at::Tensor a = read_whole(it->second + ".lora_A.weight");
    const at::Tensor b = read_whole(it->second + ".lora_B.weight");
    at::Tensor delta = at::matmul(b, a) * scaling;  // [out, in]
    if (fan_in_fan_out) delta = delta.t();
    return delta.contiguous().view({-1});
  };
  return extras;
}

}  // namespace hf
}  // namespace fsdp
