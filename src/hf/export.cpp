// Exporting a checkpoint as a Hugging Face model folder (hf/export.h): config.json for each family,
// generation_config.json, the tokenizer files, and the weights through
// consolidate_checkpoint_files, all written into a temporary folder renamed into place at the end.
#include "hf/export.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "fsdp/checkpoint/checkpoint.h"
#include "fsdp/checkpoint/full_state.h"
#include "fsdp/checkpoint/ownership.h"
#include "fsdp/config/config.h"
#include "fsdp/data/tokenizer.h"
#include "hf/folder.h"
#include "hf/peft.h"
#include "util/files.h"
#include "util/json.h"

namespace fsdp {
namespace hf {
namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error("export '" + path + "': " + what);
}

// A source folder's config.json or generation_config.json: bounded as when it was read in.
ojson read_json(const fs::path& p) {
  try {
    return json_bounds::parse<ojson>(
        json_bounds::read_file(p.string(), json_bounds::kMaxSmallJsonBytes, "a JSON file"),
        p.string());
  } catch (const ojson::exception& e) {
    fail(p.string(), std::string("not JSON: ") + e.what());
  } catch (const std::runtime_error& e) {
    fail(p.string(), e.what());
  }
}

void write_json(const fs::path& p, const ojson& j) {
  std::ofstream out(p);
  out << j.dump(2) << "\n";
  if (!out.flush()) fail(p.string(), "cannot write it");
}

const char* hf_dtype(DType d) {
  switch (d) {
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat16:
      return "float16";
    default:
      return "float32";
  }
}

std::string string_field(const ojson& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

std::optional<DType> from_hf_dtype(const ojson& config) {
  std::string name = string_field(config, "dtype");
  if (name.empty()) name = string_field(config, "torch_dtype");
  if (name == "bfloat16") return DType::kBFloat16;
  if (name == "float16") return DType::kFloat16;
  if (name == "float32") return DType::kFloat32;
  return std::nullopt;
}

// The source folder's config.json when the run came from one that still exists; else empty.
ojson source_config(const ModelConfig& m) {
  if (m.pretrained.empty()) return ojson::object();
  const fs::path p = fs::path(m.pretrained) / "config.json";
  return fs::is_regular_file(p) ? read_json(p) : ojson::object();
}

void set_dtype(ojson& c, DType dtype) {
  c["dtype"] = hf_dtype(dtype);
  if (c.contains("torch_dtype")) c["torch_dtype"] = hf_dtype(dtype);
}

ojson gpt2_config(const TrainConfig& t, ojson c) {
  const ModelConfig& m = t.model;
  const bool fresh = c.empty();
  c["architectures"] = {"GPT2LMHeadModel"};
  c["model_type"] = "gpt2";
  c["vocab_size"] = m.vocab_size;
  c["n_positions"] = t.context_length();
  if (c.contains("n_ctx")) c["n_ctx"] = t.context_length();
  c["n_embd"] = m.n_embd;
  c["n_layer"] = m.n_layer;
  c["n_head"] = m.n_head;
  c["n_inner"] = nullptr;
  c["layer_norm_epsilon"] = m.norm_eps;
  c["activation_function"] = "gelu_new";
  c["tie_word_embeddings"] = true;
  if (fresh) {  // as trained: fsdp.cpp's GPT-2 has no dropout
    for (const char* f : {"attn_pdrop", "embd_pdrop", "resid_pdrop"}) c[f] = 0.0;
  }
  return c;
}

// qwen2 has q/k/v biases and no other; mistral none; llama's attention_bias is all four; qwen3
// has q/k norms (attention_bias all four, no mlp_bias), smollm3 NoPE layers (biases as llama).
std::string llama_family(const ModelConfig& m, const ojson& base) {
  const std::string was = base.value("model_type", std::string());
  const bool qwen_shape = m.qkv_bias && !m.o_bias && !m.mlp_bias;
  const bool plain = !m.qkv_bias && !m.o_bias;
  if (m.qk_norm && !m.nope_layers.empty()) {
    throw std::runtime_error(
        "export: model.qk_norm and model.nope_layers together are no transformers family (Qwen3 "
        "has q/k norms, SmolLM3 layers without RoPE)");
  }
  const bool gemma = m.norm_offset || m.sandwich_norms || m.activation != "silu" ||
                     m.embedding_scale > 0 || !m.sliding_layers.empty();
  if (gemma) {
    if (!(m.norm_offset && m.sandwich_norms && m.qk_norm && m.activation == "gelu_tanh" &&
          m.embedding_scale > 0) ||
        m.qkv_bias != m.o_bias || m.mlp_bias || m.fused_projections || !m.nope_layers.empty()) {
      throw std::runtime_error(
          "export: model.norm_offset, sandwich_norms, qk_norm, activation gelu_tanh and "
          "embedding_scale together are Gemma 3; this mix of them is no transformers family");
    }
    return "gemma3_text";
  }
  if (m.fused_projections) {
    if (m.qkv_bias || m.o_bias || m.mlp_bias || m.qk_norm || !m.nope_layers.empty()) {
      throw std::runtime_error(
          "export: model.fused_projections is Phi-3's layout, which has no biases, q/k norms or "
          "NoPE layers");
    }
    return "phi3";
  }
  if (m.partial_rotary_factor != 1.0 || m.rope_scaling == "longrope") {
    throw std::runtime_error(
        "export: model.partial_rotary_factor and longrope RoPE are Phi-3's "
        "(model.fused_projections)"
        "; no other transformers family this export writes has them");
  }
  if (m.qk_norm || !m.nope_layers.empty()) {
    const std::string family = m.qk_norm ? "qwen3" : "smollm3";
    if (m.qkv_bias != m.o_bias || (m.qk_norm && m.mlp_bias)) {
      throw std::runtime_error("export: " + family +
                               "'s attention_bias sets the q, k, v and o biases together" +
                               (m.qk_norm ? std::string(" and it has no mlp_bias") : "") +
                               "; model.qkv_bias, model.o_bias and model.mlp_bias disagree");
    }
    return family;
  }
  if (was == "qwen2" && qwen_shape) return was;
  if (was == "mistral" && plain && !m.mlp_bias) return was;
  if (qwen_shape) return "qwen2";
  if (m.qkv_bias != m.o_bias) {
    throw std::runtime_error(
        "export: model.qkv_bias and model.o_bias differ, which neither Llama (attention_bias "
        "sets both) nor Qwen2 (q/k/v only, no mlp_bias) expresses");
  }
  return "llama";
}

void set_rope(ojson& c, const ModelConfig& m) {
  ojson scaling = nullptr;
  if (m.rope_scaling == "longrope") {
    // The factor stays implied by max_position_embeddings / original, as Phi-3 publishes it.
    scaling = {{"rope_type", "longrope"},
               {"short_factor", m.rope_short_factor},
               {"long_factor", m.rope_long_factor}};
    if (m.rope_attention_factor > 0) scaling["attention_factor"] = m.rope_attention_factor;
    c["original_max_position_embeddings"] = m.rope_original_max_positions;
    c["max_position_embeddings"] = static_cast<int64_t>(
        std::llround(m.rope_factor * static_cast<double>(m.rope_original_max_positions)));
  } else if (m.rope_scaling != "none") {
    scaling = {{"rope_type", m.rope_scaling}, {"factor", m.rope_factor}};
    if (m.rope_scaling == "llama3") {
      scaling["low_freq_factor"] = m.rope_low_freq_factor;
      scaling["high_freq_factor"] = m.rope_high_freq_factor;
      scaling["original_max_position_embeddings"] = m.rope_original_max_positions;
    }
  }
  if (c.contains("rope_parameters")) {  // transformers 5's spelling: keep it
    ojson p = scaling.is_null() ? ojson{{"rope_type", "default"}} : scaling;
    p["rope_theta"] = m.rope_theta;
    if (m.partial_rotary_factor != 1.0) p["partial_rotary_factor"] = m.partial_rotary_factor;
    c["rope_parameters"] = p;
    return;
  }
  c["rope_theta"] = m.rope_theta;
  c["rope_scaling"] = scaling;
  if (m.partial_rotary_factor != 1.0) c["partial_rotary_factor"] = m.partial_rotary_factor;
}

// The fields every Llama-shaped family's config.json spells alike: names, sizes, norm, tying.
void set_shape(const TrainConfig& t, ojson& c, const std::string& model_type, const char* arch) {
  const ModelConfig& m = t.model;
  c["architectures"] = {arch};
  c["model_type"] = model_type;
  c["vocab_size"] = m.vocab_size;
  c["hidden_size"] = m.dim;
  c["intermediate_size"] = m.intermediate_size;
  c["num_hidden_layers"] = m.n_layer;
  c["num_attention_heads"] = m.n_head;
  c["num_key_value_heads"] = m.kv_heads();
  c["head_dim"] = m.head_dim > 0 ? m.head_dim : m.dim / m.n_head;
  c["rms_norm_eps"] = m.norm_eps;
  c["tie_word_embeddings"] = m.tie_embeddings;
  if (!c.contains("max_position_embeddings")) c["max_position_embeddings"] = t.context_length();
}

// Gemma3TextConfig's fields: hidden_activation, query_pre_attn_scalar, the layer types and their
// RoPE (by layer type in transformers 5's spelling, rope_theta / rope_local_base_freq /
// rope_scaling in 4.x's).
ojson gemma3_config(const TrainConfig& t, ojson c) {
  const ModelConfig& m = t.model;
  set_shape(t, c, "gemma3_text", "Gemma3ForCausalLM");
  c["hidden_activation"] = "gelu_pytorch_tanh";
  c["attention_bias"] = m.o_bias;
  const double scale = m.attention_scale > 0 ? m.attention_scale
                                             : 1.0 / std::sqrt(static_cast<double>(c["head_dim"]));
  c["query_pre_attn_scalar"] = static_cast<int64_t>(std::llround(1.0 / (scale * scale)));
  ojson types = ojson::array();
  for (int64_t i = 0; i < m.n_layer; ++i) {
    const bool slides =
        std::find(m.sliding_layers.begin(), m.sliding_layers.end(), i) != m.sliding_layers.end();
    types.push_back(slides ? "sliding_attention" : "full_attention");
  }
  c["layer_types"] = types;
  c.erase("sliding_window_pattern");  // layer_types says it
  c["sliding_window"] = m.sliding_window > 0 ? ojson(m.sliding_window) : ojson(nullptr);
  ojson full = {{"rope_type", m.rope_scaling == "linear" ? "linear" : "default"}};
  if (m.rope_scaling == "linear") full["factor"] = m.rope_factor;
  if (c.contains("rope_parameters") || !c.contains("rope_theta")) {
    full["rope_theta"] = m.rope_theta;
    c["rope_parameters"] = {
        {"full_attention", full},
        {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", m.local_rope_theta}}}};
    return c;
  }
  c["rope_theta"] = m.rope_theta;
  c["rope_local_base_freq"] = m.local_rope_theta;
  c["rope_scaling"] = m.rope_scaling == "linear" ? full : ojson(nullptr);
  return c;
}

ojson llama_config(const TrainConfig& t, ojson c) {
  const ModelConfig& m = t.model;
  const std::string family = llama_family(m, c);
  if (family == "gemma3_text") return gemma3_config(t, std::move(c));
  const char* arch = family == "phi3"      ? "Phi3ForCausalLM"
                     : family == "qwen2"   ? "Qwen2ForCausalLM"
                     : family == "qwen3"   ? "Qwen3ForCausalLM"
                     : family == "smollm3" ? "SmolLM3ForCausalLM"
                     : family == "mistral" ? "MistralForCausalLM"
                                           : "LlamaForCausalLM";
  set_shape(t, c, family, arch);
  c["hidden_act"] = "silu";
  if (family == "llama" || family == "smollm3" || family == "qwen3") {
    c["attention_bias"] = m.o_bias;
  }
  if (family == "llama" || family == "smollm3") c["mlp_bias"] = m.mlp_bias;
  if (family == "smollm3") {
    ojson flags = ojson::array();
    for (int64_t i = 0; i < m.n_layer; ++i) {
      const bool nope =
          std::find(m.nope_layers.begin(), m.nope_layers.end(), i) != m.nope_layers.end();
      flags.push_back(nope ? 0 : 1);
    }
    c["no_rope_layers"] = flags;
  }
  set_rope(c, m);
  return c;
}

// The ids of the tokenizer's BOS and EOS tokens (the tokenizer's own reading of its files), for
// a generated generation_config.json and a config.json that lacks them.
ojson special_ids(const fs::path& tok) {
  ojson ids = ojson::object();
  if (!data::has_tokenizer(tok.string())) return ids;  // copy_tokenizer says so, naming the folder
  const std::unique_ptr<data::Tokenizer> t = data::load_tokenizer(tok.string());
  if (t->bos_id()) ids["bos_token_id"] = *t->bos_id();
  if (t->eos_id()) ids["eos_token_id"] = *t->eos_id();
  return ids;
}

// tokenizer.json and its companions, or GPT-2's files under the names transformers' GPT2Tokenizer
// reads (encoder.json is vocab.json, vocab.bpe is merges.txt) with a tokenizer_config.json.
std::vector<std::string> copy_tokenizer(const fs::path& from, const fs::path& to,
                                        int64_t max_length) {
  std::vector<std::string> written;
  auto copy = [&](const char* name, const char* as) {
    if (!fs::is_regular_file(from / name)) return;
    fs::copy_file(from / name, to / as, fs::copy_options::overwrite_existing);
    written.push_back(as);
  };
  if (fs::is_regular_file(from / "tokenizer.json")) {
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                          "chat_template.jinja"}) {
      copy(f, f);
    }
    return written;
  }
  const bool hf_names =
      fs::is_regular_file(from / "vocab.json") && fs::is_regular_file(from / "merges.txt");
  if (hf_names ||
      (fs::is_regular_file(from / "encoder.json") && fs::is_regular_file(from / "vocab.bpe"))) {
    copy(hf_names ? "vocab.json" : "encoder.json", "vocab.json");
    copy(hf_names ? "merges.txt" : "vocab.bpe", "merges.txt");
    copy("special_tokens_map.json", "special_tokens_map.json");
    if (fs::is_regular_file(from / "tokenizer_config.json")) {
      copy("tokenizer_config.json", "tokenizer_config.json");
      return written;
    }
    write_json(to / "tokenizer_config.json", {{"tokenizer_class", "GPT2Tokenizer"},
                                              {"bos_token", "<|endoftext|>"},
                                              {"eos_token", "<|endoftext|>"},
                                              {"unk_token", "<|endoftext|>"},
                                              {"add_prefix_space", false},
                                              {"model_max_length", max_length}});
    written.push_back("tokenizer_config.json");
    return written;
  }
  fail(from.string(),
       "holds no tokenizer (tokenizer.json, or GPT-2's vocab.json and merges.txt, or encoder.json "
       "and vocab.bpe); export with fsdp-ckpt export --tokenizer DIR");
}

// The weights a run with frozen parameters started from (its model.init_from, else its
// model.pretrained), which hold what its checkpoint does not; null for a run that froze nothing.
std::unique_ptr<SafetensorsSet> frozen_weights(const std::string& step_dir, const TrainConfig& t) {
  if (read_checkpoint_metadata(step_dir).frozen.empty()) return nullptr;
  const std::string& weights = t.model.start_weights();
  if (weights.empty()) {
    fail(step_dir,
         "the run froze parameters (train.freeze) but names no model.pretrained or "
         "model.init_from to take them from");
  }
  return std::make_unique<SafetensorsSet>(weights, weight_name_map(t.model.type));
}

}  // namespace

std::vector<std::string> export_model_folder(const std::string& step_dir,
                                             const std::string& out_dir,
                                             const ExportOptions& options) {
  fs::path out = fs::path(out_dir).lexically_normal();
  if (!out.has_filename()) out = out.parent_path();  // "out/" is "out"
  check_checkpoint_output(out.string(), step_dir, "the checkpoint it is exported from",
                          OutputKind::kNewFolder);
  const TrainConfig t = checkpoint_config(step_dir);
  if (t.lora.enabled() && !options.merge) return export_adapter_folder(step_dir, out_dir);
  const ojson base = source_config(t.model);
  const DType dtype = options.dtype.value_or(from_hf_dtype(base).value_or(DType::kFloat32));
  const fs::path tok = options.tokenizer_dir.empty() ? t.data.tokenizer_dir : options.tokenizer_dir;

  // The folder is made beside `out` under a name of its own, removed on failure or SIGINT
  // (util/files.h), and renamed into place only if `out` is still as it was (absent or empty).
  const files::OutputState before = files::output_state(out.string());
  files::TempGuard guard;
  const fs::path tmp = files::create_temp_folder(out.string(), &guard);
  ojson config = t.model.type == ModelType::kGPT2 ? gpt2_config(t, base) : llama_config(t, base);
  set_dtype(config, dtype);
  const ojson ids = special_ids(tok);
  for (const auto& [k, v] : ids.items()) {
    if (!config.contains(k) || config[k].is_null()) config[k] = v;
  }
  write_json(tmp / "config.json", config);
  const fs::path source_gen = fs::path(t.model.pretrained) / "generation_config.json";
  if (!t.model.pretrained.empty() && fs::is_regular_file(source_gen)) {
    fs::copy_file(source_gen, tmp / "generation_config.json");
  } else {
    write_json(tmp / "generation_config.json", ids);
  }
  copy_tokenizer(tok, tmp, t.context_length());
  const std::unique_ptr<SafetensorsSet> frozen = frozen_weights(step_dir, t);
  ConsolidateExtras extras;
  extras.frozen_from = frozen.get();
  if (t.lora.enabled() && frozen) extras = merge_extras(step_dir, t, *frozen);
  consolidate_checkpoint_files(step_dir, tmp.string(), dtype, options.max_shard_bytes, 1 << 22,
                               extras);
  files::rename_into_place(tmp.string(), out.string(), before);
  guard.keep();
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(out)) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace hf
}  // namespace fsdp
