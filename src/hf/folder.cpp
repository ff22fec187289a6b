// Reading a Hugging Face model folder (hf/folder.h): config.json to our settings, the weights'
// name map. Each family's fields are handled in one function; a field no family function and no
// entry of kHarmless accounts for is refused, so that a config.json we only half understand never
// builds a different model silently.
#include "hf/folder.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>

#include "checkpoint/file_io.h"
#include "factory/model_factory.h"
#include "fsdp/checkpoint/safetensors.h"
#include "fsdp/models/lora.h"
#include "hf/peft.h"
#include "util/json.h"

namespace fsdp {
namespace hf {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Fields that do not change the model's math: metadata, inference and generation defaults, ids.
const std::set<std::string> kHarmless = {
    "_name_or_path",
    "architectures",
    "model_type",
    "transformers_version",
    "dtype",
    "torch_dtype",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "sep_token_id",
    "decoder_start_token_id",
    "use_cache",
    "initializer_range",
    "return_dict",
    "output_hidden_states",
    "output_attentions",
    "torchscript",
    "id2label",
    "label2id",
    "problem_type",
    "task_specific_params",
    "max_length",
    "min_length",
    "do_sample",
    "early_stopping",
    "num_beams",
    "temperature",
    "top_k",
    "top_p",
    "repetition_penalty",
    "length_penalty",
    "no_repeat_ngram_size",
    "num_return_sequences",
    "bad_words_ids",
    "tokenizer_class",
    "prefix",
    "max_position_embeddings",
    "chunk_size_feed_forward",
    "is_decoder",
    "is_encoder_decoder",
    "tie_encoder_decoder",
    "cross_attention_hidden_size",
    "finetuning_task",
    "pruned_heads",
    "output_scores",
    "return_dict_in_generate",
    "tf_legacy_loss",
    "use_bfloat16",
    "summary_type",
    "summary_use_proj",
    "summary_activation",
    "summary_proj_to_labels",
    "summary_first_dropout",
    "n_ctx",
    "max_window_layers",
    // transformers 5 reads it nowhere; 4.x's Llama split its projections into this many slices
    // and summed them, the same products (SmolLM3-3B publishes 2).
    "pretraining_tp",
    "is_llama_config",          // nanotron's marker in SmolLM2's files
    "transformers.js_config",   // the browser runtime's settings (SmolLM2)
    "auto_map",                 // remote code for trust_remote_code, which we never run (Phi-3)
    "cache_implementation",     // the generation cache (Gemma 3's "hybrid")
    "_sliding_window_pattern",  // transformers 5 saves it beside Gemma 3's layer_types, unread
    "no_rope_layer_interval",   // SmolLM3: read where no_rope_layers is absent
    "partial_rotary_factor",
    "sliding_window",
    "use_sliding_window",
    "layer_types",
    "attention_dropout",
    "attn_pdrop",
    "embd_pdrop",
    "resid_pdrop",
    "rope_parameters",
    "rope_scaling",
    "rope_theta",
};

// One config.json being read: the fields, where they go, and what was looked at.
class Reader {
 public:
  Reader(std::string path, json j) : path_(std::move(path)), j_(std::move(j)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& detail) const {
    throw ConfigError(path_, 0, field, detail);
  }
  bool has(const std::string& field) const { return j_.contains(field) && !j_[field].is_null(); }
  const json& at(const std::string& field) const { return j_[field]; }

  int64_t integer(const std::string& field) const {
    if (!has(field)) fail(field, "missing: the model's shape needs it");
    const json& v = j_[field];
    if (!v.is_number_integer()) fail(field, "expected an integer, got " + json_bounds::excerpt(v));
    return v.get<int64_t>();
  }
  double number(const std::string& field, double fallback) const {
    if (!has(field)) return fallback;
    const json& v = j_[field];
    if (!v.is_number()) fail(field, "expected a number, got " + json_bounds::excerpt(v));
    return v.get<double>();
  }
  bool boolean(const std::string& field, bool fallback) const {
    if (!has(field)) return fallback;
    if (!j_[field].is_boolean())
      fail(field, "expected true or false, got " + json_bounds::excerpt(j_[field]));
    return j_[field].get<bool>();
  }
  std::string string(const std::string& field, const std::string& fallback) const {
    if (!has(field)) return fallback;
    if (!j_[field].is_string())
      fail(field, "expected a string, got " + json_bounds::excerpt(j_[field]));
    return j_[field].get<std::string>();
  }

  void set(const std::string& key, const std::string& text, const std::string& field) {
    out_.settings[key] = {text, field};
    used_.insert(field);
  }
  void set_int(const std::string& key, const std::string& field) {
    set(key, std::to_string(integer(field)), field);
  }
  void set_number(const std::string& key, double v, const std::string& field) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    set(key, buf, field);
  }
  void set_bool(const std::string& key, bool v, const std::string& field) {
    set(key, v ? "true" : "false", field);
  }
  void use(const std::string& field) { used_.insert(field); }
  void note(const std::string& text) { out_.notes.push_back(text); }

  // A field that must be absent or have exactly `want` (our models implement only that).
  void require_value(const std::string& field, const json& want, const std::string& why) {
    use(field);
    if (has(field) && j_[field] != want) {
      fail(field, json_bounds::excerpt(j_[field]) + " is not implemented (" + why +
                      "); fsdp.cpp builds " + want.dump());
    }
  }

  // Every field must be one a family function used or a harmless one.
  FolderSettings finish() {
    for (const auto& [field, value] : j_.items()) {
      if (used_.count(field) || kHarmless.count(field)) continue;
      fail(field, "a field fsdp.cpp does not know for model_type '" + string("model_type", "") +
                      "': it may change the model, so the folder is refused (remove the field if "
                      "it does not)");
    }
    out_.dtype = string("dtype", string("torch_dtype", ""));
    out_.file = path_;
    return out_;
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  json j_;
  std::set<std::string> used_;
  FolderSettings out_;
};

void note_dropout(Reader& r, const std::vector<std::string>& fields) {
  for (const auto& f : fields) {
    if (r.number(f, 0) != 0) {
      r.note("config.json's " + f + " = " + json_bounds::excerpt(r.at(f)) +
             ": fsdp.cpp's models have no dropout, so it trains without");
    }
  }
}

void read_gpt2(Reader& r) {
  r.set("model.type", "gpt2", "model_type");
  r.set_int("model.vocab_size", "vocab_size");
  r.set_int("model.n_embd", "n_embd");
  r.set_int("model.n_layer", "n_layer");
  r.set_int("model.n_head", "n_head");
  r.set_int("model.n_positions", "n_positions");
  if (r.has("n_ctx") && r.integer("n_ctx") != r.integer("n_positions")) {
    r.fail("n_ctx", "differs from n_positions; fsdp.cpp's GPT-2 has one context length");
  }
  r.set_number("model.norm_eps", r.number("layer_norm_epsilon", 1e-5), "layer_norm_epsilon");
  r.require_value("activation_function", "gelu_new", "GPT-2's tanh-approximated GELU");
  if (r.has("n_inner") && r.integer("n_inner") != 4 * r.integer("n_embd")) {
    r.fail("n_inner", "a feed-forward width other than 4 * n_embd is not implemented");
  }
  r.use("n_inner");
  r.require_value("scale_attn_weights", true, "scores divided by sqrt(head size)");
  r.require_value("scale_attn_by_inverse_layer_idx", false, "no per-layer scaling");
  r.require_value("reorder_and_upcast_attn", false, "attention in the compute dtype");
  r.require_value("add_cross_attention", false, "a decoder-only model");
  r.require_value("tie_word_embeddings", true, "GPT-2's output projection is wte");
  note_dropout(r, {"attn_pdrop", "embd_pdrop", "resid_pdrop"});
}

// A key of the RoPE object that its type does not use may change the model (a per-layer-type
// form, attention_factor): refused, as unknown fields are.
void check_rope_keys(const Reader& r, const json& rope, const std::string& field,
                     const std::string& type) {
  if (!rope.is_object()) return;
  std::set<std::string> known = {"rope_type", "type", "rope_theta", "partial_rotary_factor"};
  if (type == "linear" || type == "llama3" || type == "longrope") known.insert("factor");
  if (type == "llama3") {
    known.insert({"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"});
  }
  if (type == "longrope") {
    known.insert(
        {"short_factor", "long_factor", "attention_factor", "original_max_position_embeddings"});
  }
  for (const auto& [key, value] : rope.items()) {
    if (!known.count(key)) {
      r.fail(field + "." + key, "not one fsdp.cpp implements for rope_type '" + type + "'");
    }
  }
}

// An integer of the RoPE object (a context length), checked before it is converted: a float such
// as 1e300 has no int64 value.
int64_t rope_integer(const Reader& r, const json& rope, const std::string& field, const char* key,
                     int64_t fallback) {
  if (!rope.is_object() || !rope.contains(key)) return fallback;
  const json& v = rope[key];
  if (!v.is_number_integer() || v.get<int64_t>() <= 0) {
    r.fail(field + "." + key, "expected a positive integer, got " + json_bounds::excerpt(v));
  }
  return v.get<int64_t>();
}

// A list of numbers of the RoPE object, as "a,b,c" for a list setting.
std::string number_list(const Reader& r, const json& rope, const std::string& field,
                        const char* key) {
  if (!rope.contains(key) || !rope[key].is_array()) {
    r.fail(field + "." + key, "expected a list of numbers");
  }
  std::string out;
  char buf[32];
  for (const json& x : rope[key]) {
    if (!x.is_number())
      r.fail(field + "." + key, "expected numbers, got " + json_bounds::excerpt(x));
    std::snprintf(buf, sizeof buf, "%.17g", x.get<double>());
    out += (out.empty() ? "" : ",") + std::string(buf);
  }
  return out;
}

// Phi-3's longrope: its factors, the pretraining context (config.json's
// original_max_position_embeddings, or the RoPE object's), and the scaling factor, which
// transformers takes as max_position_embeddings over that context when the object gives none.
void read_longrope(Reader& r, const json& rope, const std::string& field,
                   const std::function<double(const char*, double)>& get) {
  r.set("model.rope_short_factor", number_list(r, rope, field, "short_factor"),
        field + ".short_factor");
  r.set("model.rope_long_factor", number_list(r, rope, field, "long_factor"),
        field + ".long_factor");
  const int64_t original = rope.contains("original_max_position_embeddings")
                               ? rope_integer(r, rope, field, "original_max_position_embeddings", 0)
                               : r.integer("original_max_position_embeddings");
  r.use("original_max_position_embeddings");
  if (original <= 0) r.fail("original_max_position_embeddings", "must be positive");
  r.set("model.rope_original_max_positions", std::to_string(original),
        "original_max_position_embeddings");
  const double factor = rope.contains("factor")
                            ? get("factor", 1.0)
                            : static_cast<double>(r.integer("max_position_embeddings")) /
                                  static_cast<double>(original);
  r.set_number("model.rope_factor", factor, "max_position_embeddings");
  if (rope.contains("attention_factor")) {
    r.set_number("model.rope_attention_factor", get("attention_factor", 0),
                 field + ".attention_factor");
  }
}

// partial_rotary_factor, top-level (4.x) or in rope_parameters (5): read for Phi-3, which
// implements it; for the other families only the whole head is rotated.
void read_partial_rotary(Reader& r, const std::string& type, const json& rope,
                         const std::string& field) {
  const bool in_rope = rope.is_object() && rope.contains("partial_rotary_factor");
  const double factor = in_rope ? (rope["partial_rotary_factor"].is_number()
                                       ? rope["partial_rotary_factor"].get<double>()
                                       : -1)
                                : r.number("partial_rotary_factor", 1.0);
  const std::string where = in_rope ? field + ".partial_rotary_factor" : "partial_rotary_factor";
  r.use("partial_rotary_factor");
  if (type == "phi3") {
    if (!(factor > 0 && factor <= 1)) r.fail(where, "must be above 0 and at most 1");
    r.set_number("model.partial_rotary_factor", factor, where);
  } else if (factor != 1.0) {
    r.fail(where, json_bounds::excerpt(json(factor)) + " is not implemented for model_type '" +
                      type + "' (transformers rotates the whole head there)");
  }
}

// rope_parameters (transformers 5) or rope_theta and rope_scaling (4.x and most Hub files).
void read_rope(Reader& r, const std::string& model_type) {
  const bool v5 = r.has("rope_parameters");
  const std::string field = v5 ? "rope_parameters" : "rope_scaling";
  json rope =
      v5 ? r.at("rope_parameters") : (r.has("rope_scaling") ? r.at("rope_scaling") : json());
  if (!rope.is_null() && !rope.is_object()) r.fail(field, "expected an object");
  if (v5 && r.has("rope_scaling")) {
    r.fail("rope_scaling", "given beside rope_parameters: keep one spelling");
  }
  const std::function<double(const char*, double)> get = [&](const char* name, double fallback) {
    if (!rope.is_object() || !rope.contains(name)) return fallback;
    if (!rope[name].is_number()) r.fail(field + "." + name, "expected a number");
    return rope[name].get<double>();
  };
  const double theta = v5 ? get("rope_theta", 10000.0) : r.number("rope_theta", 10000.0);
  r.set_number("model.rope_theta", theta, v5 ? "rope_parameters.rope_theta" : "rope_theta");
  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    if (rope.is_object() && rope.contains(key)) {
      if (!rope[key].is_string()) r.fail(field + "." + key, "expected a string");
      type = rope[key].get<std::string>();
    }
  }
  if (model_type == "phi3" && (type == "su" || type == "yarn")) type = "longrope";  // Phi3Config's
  read_partial_rotary(r, model_type, rope, field);
  if (type == "default") {
    r.set("model.rope_scaling", "none", field);
  } else if (type == "longrope" && model_type == "phi3") {
    r.set("model.rope_scaling", "longrope", field + ".rope_type");
    read_longrope(r, rope, field, get);
  } else if (type == "linear" || type == "llama3") {
    r.set("model.rope_scaling", type, field + ".rope_type");
    r.set_number("model.rope_factor", get("factor", 1.0), field + ".factor");
  } else {
    r.fail(field + ".rope_type", "'" + type +
                                     "' is not implemented; fsdp.cpp has default, linear, "
                                     "llama3 and (Phi-3's) longrope rotary embeddings");
  }
  check_rope_keys(r, rope, field, type);
  if (type == "llama3") {
    r.set_number("model.rope_low_freq_factor", get("low_freq_factor", 1.0),
                 field + ".low_freq_factor");
    r.set_number("model.rope_high_freq_factor", get("high_freq_factor", 4.0),
                 field + ".high_freq_factor");
    r.set("model.rope_original_max_positions",
          std::to_string(rope_integer(r, rope, field, "original_max_position_embeddings", 8192)),
          field + ".original_max_position_embeddings");
  }
}

// A sliding window shorter than the run's sequences is attention we do not compute.
void check_sliding_window(Reader& r, const std::string& type, int64_t context_length) {
  // Mistral and Phi-3 apply any sliding_window; Qwen's and SmolLM3's need use_sliding_window.
  const bool on = type == "mistral" || type == "phi3" || r.boolean("use_sliding_window", false);
  if (on && r.has("sliding_window") && r.integer("sliding_window") < context_length) {
    r.fail("sliding_window", std::to_string(r.integer("sliding_window")) +
                                 " is shorter than the run's context (" +
                                 std::to_string(context_length) +
                                 " tokens): sliding-window attention is not implemented");
  }
  if (r.has("layer_types") && r.at("layer_types").is_array()) {
    for (const auto& t : r.at("layer_types")) {
      if (t != "full_attention" && on) {
        r.fail("layer_types",
               json_bounds::excerpt(t) + " layers are not implemented (full_attention only)");
      }
    }
  }
}

// SmolLM3's no_rope_layers: 1 where a layer rotates, 0 where it does not (NoPE); absent, every
// no_rope_layer_interval-th layer is NoPE, as SmolLM3Config derives it.
void read_nope_layers(Reader& r) {
  const int64_t layers = r.integer("num_hidden_layers");
  std::vector<std::string> nope;
  if (r.has("no_rope_layers")) {
    const json& flags = r.at("no_rope_layers");
    if (!flags.is_array() || static_cast<int64_t>(flags.size()) != layers) {
      r.fail("no_rope_layers", "expected a list of num_hidden_layers (" + std::to_string(layers) +
                                   ") 0s and 1s, got " + json_bounds::excerpt(flags));
    }
    for (size_t i = 0; i < flags.size(); ++i) {
      if (flags[i] != 0 && flags[i] != 1) {
        r.fail("no_rope_layers", "item " + std::to_string(i) + " is " +
                                     json_bounds::excerpt(flags[i]) + ", not 0 or 1");
      }
      if (flags[i] == 0) nope.push_back(std::to_string(i));
    }
  } else {
    const int64_t interval =
        r.has("no_rope_layer_interval") ? r.integer("no_rope_layer_interval") : 4;
    if (interval <= 0) r.fail("no_rope_layer_interval", "must be positive");
    for (int64_t i = 0; i < layers; ++i) {
      if ((i + 1) % interval == 0) nope.push_back(std::to_string(i));
    }
  }
  std::string list;
  for (const auto& i : nope) list += (list.empty() ? "" : ",") + i;
  r.set("model.nope_layers", list, "no_rope_layers");
}

// Phi-3: fused projections, no biases. Phi-4-mini's file also carries fields of its remote code
// that transformers' Phi3 does not read; they are accepted at the values it publishes.
void read_phi3(Reader& r) {
  r.set_bool("model.fused_projections", true, "model_type");
  for (const char* f : {"attention_bias", "mlp_bias", "lm_head_bias"}) {
    r.require_value(f, false, "Phi-3's projections have no biases");
  }
  r.require_value("full_attn_mod", 1, "Phi-4-mini's published value, which transformers ignores");
  r.require_value("interpolate_factor", 1,
                  "Phi-4-mini's published value, which transformers ignores");
}

// Gemma 3's RoPE: one for the full-attention layers (rope_theta, default 1e6, and rope_scaling,
// linear for the 4B and larger), one for the sliding ones (rope_local_base_freq, default 1e4, never
// scaled); transformers 5 spells both in rope_parameters by layer type.
void read_gemma3_rope(Reader& r) {
  json full = json::object(), local = json::object();
  std::string full_field = "rope_scaling", local_field = "rope_local_base_freq";
  double full_theta = 1e6, local_theta = 1e4;
  if (r.has("rope_parameters")) {
    const json& p = r.at("rope_parameters");
    if (!p.is_object()) r.fail("rope_parameters", "expected an object by layer type");
    for (const auto& [key, value] : p.items()) {
      if (key != "full_attention" && key != "sliding_attention") {
        r.fail("rope_parameters." + key,
               "not a layer type of Gemma 3 (full_attention, "
               "sliding_attention)");
      }
      if (!value.is_object()) r.fail("rope_parameters." + key, "expected an object");
    }
    if (r.has("rope_scaling")) r.fail("rope_scaling", "given beside rope_parameters");
    full = p.value("full_attention", json::object());
    local = p.value("sliding_attention", json::object());
    full_field = "rope_parameters.full_attention";
    local_field = "rope_parameters.sliding_attention";
  } else {
    if (r.has("rope_scaling")) full = r.at("rope_scaling");
    if (!full.is_object()) r.fail("rope_scaling", "expected an object");
    full_theta = r.number("rope_theta", full_theta);
    local_theta = r.number("rope_local_base_freq", local_theta);
    r.use("rope_theta");
  }
  auto number = [&](const json& o, const std::string& field, const char* key, double fallback) {
    if (!o.contains(key)) return fallback;
    if (!o[key].is_number()) r.fail(field + "." + key, "expected a number");
    return o[key].get<double>();
  };
  auto type_of = [&](const json& o, const std::string& field) {
    std::string type = "default";
    for (const char* key : {"rope_type", "type"}) {
      if (!o.contains(key)) continue;
      if (!o[key].is_string()) r.fail(field + "." + key, "expected a string");
      type = o[key].get<std::string>();
    }
    return type;
  };
  const std::string full_type = type_of(full, full_field), local_type = type_of(local, local_field);
  if (full_type != "default" && full_type != "linear") {
    r.fail(full_field + ".rope_type", "'" + full_type +
                                          "' is not implemented for Gemma 3's "
                                          "full-attention layers (default, linear)");
  }
  if (local_type != "default") {
    r.fail(local_field + ".rope_type", "'" + local_type +
                                           "' is not implemented for Gemma 3's "
                                           "sliding layers (default)");
  }
  check_rope_keys(r, full, full_field, full_type);
  check_rope_keys(r, local, local_field, local_type);
  r.set_number("model.rope_theta", number(full, full_field, "rope_theta", full_theta),
               full_field == "rope_scaling" ? "rope_theta" : full_field + ".rope_theta");
  r.set_number("model.local_rope_theta", number(local, local_field, "rope_theta", local_theta),
               local_field == "rope_local_base_freq" ? local_field : local_field + ".rope_theta");
  r.set("model.rope_scaling", full_type == "linear" ? "linear" : "none", full_field);
  if (full_type == "linear") {
    r.set_number("model.rope_factor", number(full, full_field, "factor", 1.0),
                 full_field + ".factor");
  }
}

// Gemma 3's sliding layers: layer_types (transformers 5), or every layer but each
// sliding_window_pattern-th (4.x files; default 6), with a window of sliding_window (default 4096).
void read_gemma3_layers(Reader& r) {
  const int64_t layers = r.integer("num_hidden_layers");
  std::string sliding;
  auto add = [&](int64_t i) { sliding += (sliding.empty() ? "" : ",") + std::to_string(i); };
  if (r.has("layer_types")) {
    const json& types = r.at("layer_types");
    if (!types.is_array() || static_cast<int64_t>(types.size()) != layers) {
      r.fail("layer_types", "expected num_hidden_layers (" + std::to_string(layers) + ") types");
    }
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i] == "sliding_attention") {
        add(static_cast<int64_t>(i));
      } else if (types[i] != "full_attention") {
        r.fail("layer_types", "item " + std::to_string(i) + " is " +
                                  json_bounds::excerpt(types[i]) +
                                  " (full_attention or sliding_attention)");
      }
    }
  } else {
    const int64_t pattern =
        r.has("sliding_window_pattern") ? r.integer("sliding_window_pattern") : 6;
    if (pattern <= 0) r.fail("sliding_window_pattern", "must be positive");
    for (int64_t i = 0; i < layers; ++i) {
      if ((i + 1) % pattern != 0) add(i);
    }
  }
  r.use("layer_types");
  r.use("sliding_window_pattern");
  const int64_t window = r.has("sliding_window") ? r.integer("sliding_window") : 4096;
  if (sliding.empty()) return;
  if (window <= 0) r.fail("sliding_window", "must be positive");
  r.set("model.sliding_layers", sliding, "layer_types");
  r.set("model.sliding_window", std::to_string(window), "sliding_window");
}

// Gemma 3 (gemma3_text, the 1B's model type): norms scaled by (1 + weight), four a block and on
// the q/k heads; embeddings times sqrt(hidden_size); GeGLU with tanh GELU; scores times
// query_pre_attn_scalar^-0.5; sliding-window layers with their own RoPE. Soft-capping (Gemma 2's)
// and bidirectional attention are refused.
void read_gemma3(Reader& r) {
  for (const char* key : {"model.norm_offset", "model.sandwich_norms", "model.qk_norm"}) {
    r.set_bool(key, true, "model_type");
  }
  r.set_number("model.embedding_scale", std::sqrt(static_cast<double>(r.integer("hidden_size"))),
               "hidden_size");
  r.require_value("hidden_activation", "gelu_pytorch_tanh", "GeGLU with the tanh GELU");
  r.set("model.activation", "gelu_tanh", "hidden_activation");
  r.set_number("model.attention_scale", 1.0 / std::sqrt(r.number("query_pre_attn_scalar", 256)),
               "query_pre_attn_scalar");
  if (r.number("query_pre_attn_scalar", 256) <= 0) {
    r.fail("query_pre_attn_scalar", "must be positive");
  }
  r.require_value("attn_logit_softcapping", nullptr, "no soft-capping of attention scores");
  r.require_value("final_logit_softcapping", nullptr, "no soft-capping of the logits");
  r.require_value("use_bidirectional_attention", false, "causal attention");
  read_gemma3_rope(r);
  read_gemma3_layers(r);
}

// Which projections carry biases. Llama, Qwen3 and SmolLM3: attention_bias is q, k, v and o, and
// (Llama, SmolLM3) mlp_bias the feed-forward's; Qwen2: q, k and v always; Mistral: none.
void read_biases(Reader& r, const std::string& type) {
  if (type == "phi3") return;  // read_phi3
  const bool attention_bias = r.boolean("attention_bias", false);
  r.use("attention_bias");
  r.set_bool("model.qkv_bias", type == "qwen2" || attention_bias, "attention_bias");
  r.set_bool("model.o_bias", attention_bias, "attention_bias");
  if (type == "llama" || type == "smollm3") {
    r.set_bool("model.mlp_bias", r.boolean("mlp_bias", false), "mlp_bias");
  }
}

void read_llama_family(Reader& r, const std::string& type, int64_t context_length) {
  r.set("model.type", "llama", "model_type");
  r.set_int("model.vocab_size", "vocab_size");
  r.set_int("model.dim", "hidden_size");
  r.set_int("model.n_layer", "num_hidden_layers");
  r.set_int("model.n_head", "num_attention_heads");
  if (r.has("num_key_value_heads")) {
    r.set_int("model.n_kv_head", "num_key_value_heads");
  } else {  // transformers' default: as many as the query heads
    r.set("model.n_kv_head", std::to_string(r.integer("num_attention_heads")),
          "num_attention_heads");
  }
  r.set_int("model.intermediate_size", "intermediate_size");
  r.set_number("model.norm_eps", r.number("rms_norm_eps", 1e-6), "rms_norm_eps");
  // Gemma3TextConfig ties by default, the others do not.
  r.set_bool("model.tie_embeddings", r.boolean("tie_word_embeddings", type == "gemma3_text"),
             "tie_word_embeddings");
  if (r.has("head_dim")) r.set_int("model.head_dim", "head_dim");
  r.use("head_dim");
  read_biases(r, type);
  if (type == "gemma3_text") {
    read_gemma3(r);
    note_dropout(r, {"attention_dropout"});
    return;
  }
  if (type == "qwen3") r.set_bool("model.qk_norm", true, "model_type");
  if (type == "smollm3") read_nope_layers(r);
  if (type == "phi3") read_phi3(r);
  r.require_value("hidden_act", "silu", "the SwiGLU feed-forward");
  // nanotron's field, which transformers ignores (it always rotates the two halves of a head):
  // interleaved pairs would need the q/k weights permuted to mean what their trainer meant.
  r.require_value("rope_interleaved", false, "rotate_half pairs channel i with i + head_dim / 2");
  r.require_value("use_mrope", false, "Qwen2-VL's multimodal RoPE");
  read_rope(r, type);
  check_sliding_window(r, type, context_length);
  note_dropout(r, {"attention_dropout", "resid_pdrop", "embd_pdrop"});
}

// config.json, bounded: at most json_bounds::kMaxSmallJsonBytes (1 MiB, as a YAML config) and
// 64 levels deep; a folder, a FIFO or a device in its place is named as what it is.
json parse_json_file(const std::string& path) {
  std::string text;
  try {
    text = json_bounds::read_file(path, json_bounds::kMaxSmallJsonBytes, "a config.json");
    return json_bounds::parse(text, path);
  } catch (const json::exception& e) {
    throw ConfigError(path, 0, "", std::string("not JSON: ") + e.what());
  } catch (const std::runtime_error& e) {
    throw ConfigError("", 0, "", e.what());
  }
}

const std::map<std::string, std::string> kArchitectures = {
    {"gpt2", "GPT2LMHeadModel"},       {"llama", "LlamaForCausalLM"},
    {"mistral", "MistralForCausalLM"}, {"qwen2", "Qwen2ForCausalLM"},
    {"qwen3", "Qwen3ForCausalLM"},     {"smollm3", "SmolLM3ForCausalLM"},
    {"phi3", "Phi3ForCausalLM"},       {"gemma3_text", "Gemma3ForCausalLM"}};

std::string known_types() {
  std::string out;
  for (const auto& [type, arch] : kArchitectures) out += (out.empty() ? "" : ", ") + type;
  return out;
}

}  // namespace

FolderSettings read_folder_settings(const std::string& dir, int64_t context_length) {
  if (context_length < 0) return read_adapter_settings(dir);  // model.adapter's (FolderReader)
  const std::string path = (fs::path(dir) / "config.json").string();
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) {
    throw ConfigError(path, 0, "", "missing: a Hugging Face model folder holds config.json");
  }
  json j = parse_json_file(path);
  if (!j.is_object()) throw ConfigError(path, 0, "", "expected a JSON object");
  Reader r(path, std::move(j));
  const std::string type = r.string("model_type", "");
  const auto arch = kArchitectures.find(type);
  if (arch == kArchitectures.end()) {
    r.fail("model_type", "'" + type + "' is not a model fsdp.cpp builds (" + known_types() + ")");
  }
  if (r.has("architectures")) {
    for (const auto& a : r.at("architectures")) {
      if (a != arch->second) {
        r.fail("architectures", json_bounds::excerpt(a) + " is not implemented; for model_type '" +
                                    type + "' fsdp.cpp builds " + arch->second);
      }
    }
  }
  if (type == "gpt2") {
    read_gpt2(r);
  } else {
    read_llama_family(r, type, context_length);
  }
  return r.finish();
}

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// What config.json calls our keys, for errors: "vocab_size and hidden_size (model.vocab_size,
// model.dim)"; a key config.json did not set (data.seq_len) is named as ours.
class FieldNames {
 public:
  explicit FieldNames(const FolderSettings& folder) : folder_(folder) {}
  std::string first(const std::vector<std::string>& keys) const {
    return keys.empty() ? "" : field(keys.front());
  }
  std::string describe(const std::vector<std::string>& keys) const {
    std::string fields, ours;
    for (size_t i = 0; i < keys.size(); ++i) {
      fields += (i == 0 ? "" : i + 1 == keys.size() ? " and " : ", ") + field(keys[i]);
      ours += (i ? ", " : "") + keys[i];
    }
    return fields + " (" + ours + ")";
  }

 private:
  std::string field(const std::string& key) const {
    const auto it = folder_.settings.find(key);
    return it == folder_.settings.end() ? key : it->second.field;
  }
  const FolderSettings& folder_;
};

// The block indices the files hold under `prefix` ("model.layers."), sorted.
std::set<int64_t> block_indices(const std::vector<std::string>& names, const std::string& prefix) {
  std::set<int64_t> found;
  for (const std::string& n : names) {
    if (n.compare(0, prefix.size(), prefix) != 0) continue;
    size_t i = prefix.size();
    int64_t index = 0;
    for (; i < n.size() && n[i] >= '0' && n[i] <= '9' && index < (int64_t{1} << 40); ++i) {
      index = index * 10 + (n[i] - '0');
    }
    if (i > prefix.size() && i < n.size() && n[i] == '.') found.insert(index);
  }
  return found;
}

}  // namespace

void check_folder_weights(const TrainConfig& config) {
  const std::string dir = config.model.pretrained;
  const std::string path = (fs::path(dir) / "config.json").string();
  const FolderSettings folder = read_folder_settings(dir, config.context_length());
  const FieldNames fields(folder);
  SafetensorsSet set(dir, weight_name_map(config.model.type));
  const std::vector<std::string> names = set.names();
  const ModelShapes shapes = model_shapes(config);
  // The block count first: a config.json with 100,000 layers over 2 layers' weights would
  // otherwise list 100,000 missing tensors.
  const std::string& pattern = shapes.block.front().name;
  const std::string prefix = pattern.substr(0, pattern.find("{}"));
  const std::set<int64_t> found = block_indices(names, prefix);
  const int64_t held = static_cast<int64_t>(found.size());
  if (held != shapes.blocks || (held > 0 && *found.rbegin() != held - 1)) {
    throw ConfigError(path, 0, fields.first({shapes.blocks_key}),
                      fields.describe({shapes.blocks_key}) + " is " +
                          std::to_string(shapes.blocks) + ", but the weights in " + dir + " hold " +
                          std::to_string(held) + " block" + (held == 1 ? "" : "s") +
                          (held > 0 ? " (" + prefix + std::to_string(*found.begin()) + " to " +
                                          prefix + std::to_string(*found.rbegin()) + ")"
                                    : std::string()));
  }
  std::set<std::string> expected;
  const auto check = [&](const ParameterShape& p, const std::string& name) {
    expected.insert(name);
    const SafetensorsTensorInfo* info = set.find(name);
    if (info == nullptr) {
      throw ConfigError(path, 0, fields.first(p.keys),
                        fields.describe(p.keys) + " imply the tensor " + name + " " +
                            shape_text(p.shape) + ", which no weight file in " + dir + " holds");
    }
    if (info->shape != p.shape) {
      throw ConfigError(path, 0, fields.first(p.keys),
                        fields.describe(p.keys) + " give " + name + " the shape " +
                            shape_text(p.shape) + ", but " + set.file_of(name) + " holds " +
                            shape_text(info->shape));
    }
  };
  for (const ParameterShape& p : shapes.outer) check(p, p.name);
  for (int64_t b = 0; b < shapes.blocks; ++b) {
    for (const ParameterShape& p : shapes.block) check(p, block_parameter_name(p, b));
  }
  for (const std::string& n : names) {
    if (expected.count(n) == 0) {
      throw ConfigError(path, 0, "",
                        set.file_of(n) + " holds the tensor " + n +
                            ", which the model config.json describes does not have (weights of "
                            "another model, or a field of config.json fsdp.cpp does not read)");
    }
  }
}

TensorNameMap weight_name_map(ModelType type) {
  if (type != ModelType::kGPT2) return {};
  // Per name, so that no file is opened to decide: ours pass as they are, Hub-style ones gain the
  // prefix, and the causal-mask buffers (either spelling) are dropped, as transformers drops them.
  return [](const std::string& name) -> std::string {
    const auto dot = name.rfind('.');
    const std::string tail = dot == std::string::npos ? name : name.substr(dot + 1);
    const bool mask =
        name.find(".attn.") != std::string::npos && (tail == "bias" || tail == "masked_bias") &&
        name.find(".c_attn.") == std::string::npos && name.find(".c_proj.") == std::string::npos;
    if (mask) return std::string();
    const bool ours = name.rfind("transformer.", 0) == 0 || name == "lm_head.weight";
    return ours ? name : "transformer." + name;
  };
}

FullStateLoadOptions start_weights_options(const TrainConfig& config) {
  FullStateLoadOptions load;
  if (!config.model.pretrained.empty()) load.name_map(weight_name_map(config.model.type));
  if (config.lora.enabled()) {
    load.may_lack(is_lora_parameter);
  }
  return load;
}

std::string weights_fingerprint(const std::string& path) {
  const SafetensorsSet set(path);
  uint32_t crc = 0;
  uintmax_t total = 0;
  std::vector<char> buf;
  for (const std::string& file : set.files()) {
    const uintmax_t size = fs::file_size(file);
    total += size;
    std::ifstream in(file, std::ios::binary);
    const auto take = [&](std::streamoff at, std::streamoff n) {
      buf.resize(static_cast<size_t>(n));
      in.seekg(at);
      if (!in.read(buf.data(), n))
        throw std::runtime_error("weights '" + file + "': cannot read it");
      crc = ckpt::crc32(crc, buf.data(), buf.size());
    };
    const auto n = static_cast<std::streamoff>(size);
    take(0, std::min<std::streamoff>(n, std::streamoff{2} << 20));
    const std::streamoff last = std::min<std::streamoff>(n, std::streamoff{1} << 20);
    take(n - last, last);
  }
  char text[96];
  std::snprintf(text, sizeof text, "crc32 %08x over %zu files, %ju bytes", crc, set.files().size(),
                total);
  return text;
}

}  // namespace hf
}  // namespace fsdp
