// generation_config.json as transformers' GenerationConfig (hf/generation.h): the sampling fields
// the sampler implements, the stop ids, and the fields it does not implement named for the log.
#include "hf/generation.h"

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <utility>

#include "util/json.h"

namespace fsdp {
namespace hf {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Fields that leave generate()'s tokens as they are: ids, bookkeeping, and processors at their
// no-op values are checked below instead.
const std::set<std::string> kInert = {"_from_model_config",
                                      "transformers_version",
                                      "bos_token_id",
                                      "pad_token_id",
                                      "decoder_start_token_id",
                                      "use_cache",
                                      "return_dict_in_generate",
                                      "output_scores",
                                      "output_logits",
                                      "output_attentions",
                                      "output_hidden_states",
                                      "cache_implementation"};

// Processors generate() would apply, and the value at which each does nothing.
const std::map<std::string, json> kNoOpValues = {{"repetition_penalty", 1.0},
                                                 {"num_beams", 1},
                                                 {"min_p", nullptr},
                                                 {"typical_p", 1.0},
                                                 {"epsilon_cutoff", 0.0},
                                                 {"eta_cutoff", 0.0},
                                                 {"no_repeat_ngram_size", 0},
                                                 {"min_length", 0},
                                                 {"min_new_tokens", nullptr},
                                                 {"length_penalty", 1.0},
                                                 {"num_beam_groups", 1},
                                                 {"diversity_penalty", 0.0},
                                                 {"bad_words_ids", nullptr},
                                                 {"suppress_tokens", nullptr},
                                                 {"begin_suppress_tokens", nullptr},
                                                 {"forced_bos_token_id", nullptr},
                                                 {"forced_eos_token_id", nullptr},
                                                 {"encoder_repetition_penalty", 1.0},
                                                 {"renormalize_logits", false}};

json read_json(const std::string& path) {
  const std::string text =
      json_bounds::read_file(path, json_bounds::kMaxSmallJsonBytes, "a JSON file");
  try {
    json j = json_bounds::parse(text, path);
    if (!j.is_object()) throw std::runtime_error(path + ": expected a JSON object");
    return j;
  } catch (const json::exception& e) {
    throw std::runtime_error(path + ": not JSON: " + e.what());
  }
}

// eos_token_id: a number or a list of numbers; null or absent: none.
std::vector<int64_t> eos_ids(const json& j, const std::string& path) {
  std::vector<int64_t> out;
  if (!j.contains("eos_token_id") || j["eos_token_id"].is_null()) return out;
  const json& v = j["eos_token_id"];
  const json list = v.is_array() ? v : json::array({v});
  for (const json& id : list) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) {
      throw std::runtime_error(path + ": eos_token_id: expected an id or a list of ids, got " +
                               json_bounds::excerpt(v));
    }
    out.push_back(id.get<int64_t>());
  }
  return out;
}

template <typename T>
std::optional<T> field(const json& j, const char* key, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  const json& v = j[key];
  const bool ok = std::is_same<T, bool>::value     ? v.is_boolean()
                  : std::is_same<T, double>::value ? v.is_number()
                                                   : v.is_number_integer();
  if (!ok) {
    throw std::runtime_error(path + ": " + key + ": expected a " +
                             (std::is_same<T, bool>::value     ? "boolean"
                              : std::is_same<T, double>::value ? "number"
                                                               : "integer") +
                             ", got " + json_bounds::excerpt(v));
  }
  return v.get<T>();
}

// The file's numbers within what sample's flags accept (config/args.cpp): a hostile
// max_new_tokens of 10^12 would otherwise generate until the process is killed.
constexpr int64_t kMaxTokens = int64_t{1} << 20;

void check_ranges(const GenerationDefaults& g, const std::string& path) {
  auto fail = [&](const char* key, const std::string& want) {
    throw std::runtime_error(path + ": " + key + ": expected " + want);
  };
  if (g.temperature && !(*g.temperature >= 0 && *g.temperature <= 1e6)) {
    fail("temperature", "a number from 0 to 1e6");
  }
  if (g.top_p && !(*g.top_p > 0 && *g.top_p <= 1)) fail("top_p", "a number above 0, at most 1");
  if (g.top_k && (*g.top_k < 0 || *g.top_k > INT32_MAX)) fail("top_k", "0 to 2147483647");
  for (const auto& [key, v] :
       {std::pair{"max_new_tokens", g.max_new_tokens}, std::pair{"max_length", g.max_length}}) {
    if (v && (*v < 0 || *v > kMaxTokens)) fail(key, "0 to " + std::to_string(kMaxTokens));
  }
}

}  // namespace

GenerationDefaults read_generation_defaults(const std::string& dir) {
  GenerationDefaults g;
  const std::string config = (fs::path(dir) / "config.json").string();
  const std::string gen = (fs::path(dir) / "generation_config.json").string();
  std::error_code ec;
  if (fs::exists(fs::symlink_status(gen, ec))) {
    const json j = read_json(gen);
    g.file = gen;
    g.do_sample = field<bool>(j, "do_sample", gen);
    g.temperature = field<double>(j, "temperature", gen);
    g.top_p = field<double>(j, "top_p", gen);
    g.top_k = field<int64_t>(j, "top_k", gen);
    g.max_new_tokens = field<int64_t>(j, "max_new_tokens", gen);
    g.max_length = field<int64_t>(j, "max_length", gen);
    g.eos_ids = eos_ids(j, gen);
    check_ranges(g, gen);
    static const std::set<std::string> kRead = {"do_sample",   "temperature",    "top_p",
                                                "top_k",       "max_new_tokens", "max_length",
                                                "eos_token_id"};
    for (const auto& [key, value] : j.items()) {
      if (kRead.count(key) || kInert.count(key)) continue;
      const auto no_op = kNoOpValues.find(key);
      if (no_op != kNoOpValues.end() && (value == no_op->second || value.is_null())) continue;
      g.not_applied.push_back(key + " = " + json_bounds::excerpt(value));
    }
  }
  if (g.eos_ids.empty() && fs::exists(fs::symlink_status(config, ec))) {
    g.eos_ids = eos_ids(read_json(config), config);
  }
  return g;
}

}  // namespace hf
}  // namespace fsdp
