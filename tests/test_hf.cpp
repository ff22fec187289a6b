// Hugging Face model folders in (hf/folder.h): each fixture of tests/data/hf/models (tiny
// random models transformers 5.12 saved, with its losses, logits and greedy tokens on a fixed
// batch: scripts/hf_fixtures.sh) becomes our model through model.pretrained alone, loads its
// weights (sharded files, bf16, Hub-style GPT-2 names) and computes what transformers computed.
//
// Tolerances. The fixtures ran transformers in fp32 on the CPU (eager attention); we run the same
// operations in fp32, but kernels may sum in other orders (oneDNN or not, fused attention on
// LibTorch 2.x): on these 2-layer, 64-wide models that moves a logit by a few ulps of values of
// order 1 (1e-6 measured), so logits are compared to 1e-4 absolute and the loss (a mean of 30 log
// softmaxes of order 6) to 1e-5 relative, the bound. Greedy tokens must be equal: the
// fixtures' smallest top-2 margin is 2.6e-3, far above those differences.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "factory/model_factory.h"
#include "fsdp/checkpoint/checkpoint.h"
#include "fsdp/checkpoint/full_state.h"
#include "fsdp/comm.h"
#include "fsdp/config/config.h"
#include "fsdp/fully_shard.h"
#include "fsdp/models/gpt2.h"
#include "fsdp/train/trainer.h"
#include "hf/export.h"
#include "hf/folder.h"
#include "hf/generation.h"
#include "train/run_data.h"

namespace fsdp {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kFixtures = FSDP_HF_FIXTURES;
const fs::path kModels = kFixtures / "models";

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TrainConfig pretrained_config(const fs::path& dir, std::vector<ConfigOverride> extra = {}) {
  // The model fixtures hold no tokenizer (the tokenizer fixtures are apart): name one.
  const fs::path tokenizer = fs::path(FSDP_HF_FIXTURES) / "tokenizers" / "llama3";
  std::vector<ConfigOverride> o = {{"model.pretrained", dir.string()},
                                   {"data.seq_len", "16"},
                                   {"data.tokenizer_dir", tokenizer.string()}};
  o.insert(o.end(), extra.begin(), extra.end());
  return load_config("", o, {}, hf::read_folder_settings);
}

struct Loaded {
  CausalLM lm;
  std::shared_ptr<FullyShardedModel> sharded;
};

Loaded load(const TrainConfig& c) {
  Loaded out{build_model(c), nullptr};
  out.sharded = fully_shard(
      out.lm.module, make_local_comm(),
      c.sharding_options().param_init([](const std::string&, at::Tensor& t) { t.zero_(); }));
  FullStateLoadOptions options;
  options.name_map(hf::weight_name_map(c.model.type));
  load_full_safetensors(*out.sharded, c.model.pretrained, options);
  return out;
}

at::Tensor ids_of(const json& rows) {
  std::vector<int64_t> flat;
  for (const auto& row : rows) {
    for (const auto& v : row) flat.push_back(v.get<int64_t>());
  }
  return torch::tensor(flat, torch::kLong).view({static_cast<int64_t>(rows.size()), -1});
}

// transformers' causal LM loss: position t predicts token t + 1, the mean over every prediction.
double hf_loss(const at::Tensor& logits, const at::Tensor& ids) {
  const int64_t T = ids.size(1);
  return gpt2_loss(logits.narrow(1, 0, T - 1).contiguous(), ids.narrow(1, 1, T - 1).contiguous())
      .item<double>();
}

void expect_matches_transformers(const std::string& name, const fs::path& dir) {
  SCOPED_TRACE(name);
  const json ref = read_json(kModels / name / "reference.json");
  Loaded m = load(pretrained_config(dir));
  torch::NoGradGuard no_grad;
  const at::Tensor ids = ids_of(ref["input_ids"]);
  const at::Tensor logits = m.lm.forward(ids);
  const double loss = hf_loss(logits, ids), want = ref["loss"].get<double>();
  EXPECT_NEAR(loss, want, 1e-5 * want);
  const auto& rows = ref["logits"];
  for (size_t t = 0; t < rows.size(); ++t) {
    for (size_t v = 0; v < rows[t].size(); ++v) {
      EXPECT_NEAR(logits[0][t][v].item<double>(), rows[t][v].get<double>(), 1e-4)
          << "logit [0, " << t << ", " << v << "]";
    }
  }
  at::Tensor seq = ids.narrow(0, 0, 1).narrow(1, 0, ref["greedy_prompt_length"].get<int64_t>());
  std::vector<int64_t> greedy;
  for (size_t i = 0; i < ref["greedy"].size(); ++i) {
    const at::Tensor next = m.lm.forward(seq).select(1, seq.size(1) - 1).argmax(-1, true);
    greedy.push_back(next.item<int64_t>());
    seq = at::cat({seq, next}, 1);
  }
  EXPECT_EQ(greedy, ref["greedy"].get<std::vector<int64_t>>());
  std::cout << "[ hf ] " << name << ": loss " << loss << " (transformers " << want << ")\n";
}

class HfModel : public ::testing::TestWithParam<std::string> {};

TEST_P(HfModel, LossLogitsAndGreedyTokensMatchTransformers) {
  expect_matches_transformers(GetParam(), kModels / GetParam());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfModel,
                         ::testing::Values("gpt2", "gpt2-hub", "llama", "llama-tied",
                                           "llama-linear", "qwen2", "mistral", "qwen3", "smollm3",
                                           "phi3", "phi4-mini", "gemma3"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s) ch = std::isalnum(ch) ? ch : '_';
                           return s;
                         });

fs::path scratch(const std::string& name) {
  const fs::path p =
      fs::temp_directory_path() / ("fsdp_hf_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

// A folder copied to a temporary place, to be broken one way per test.
class TempFolder {
 public:
  explicit TempFolder(const std::string& fixture) {
    path_ = fs::temp_directory_path() / ("fsdp_hf_" + fixture + "_" + std::to_string(::getpid()) +
                                         "_" + std::to_string(counter_++));
    fs::remove_all(path_);
    fs::copy(kModels / fixture, path_, fs::copy_options::recursive);
  }
  ~TempFolder() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  void edit_config(const std::function<void(json&)>& edit) const {
    json j = read_json(path_ / "config.json");
    edit(j);
    std::ofstream(path_ / "config.json") << j.dump(2);
  }

 private:
  fs::path path_;
  static inline int counter_ = 0;
};

// transformers 4.x and most Hub files spell RoPE as rope_theta + rope_scaling; 5.x writes
// rope_parameters. Both give the same model.
TEST(HfFolder, FourPointXRopeFieldsReadAsFiveDoes) {
  for (const char* fixture : {"llama", "llama-linear", "qwen2", "phi3", "phi4-mini", "gemma3"}) {
    TempFolder f(fixture);
    fs::copy_file(f.path() / "config_v4.json", f.path() / "config.json",
                  fs::copy_options::overwrite_existing);
    expect_matches_transformers(fixture, f.path());
  }
}

TEST(HfFolder, ConfigJsonSetsTheShape) {
  const TrainConfig c = pretrained_config(kModels / "llama");
  EXPECT_EQ(c.model.type, ModelType::kLlama);
  EXPECT_EQ(c.model.dim, 64);
  EXPECT_EQ(c.model.n_kv_head, 2);
  EXPECT_EQ(c.model.head_dim, 16);
  EXPECT_EQ(c.model.rope_scaling, "llama3");
  EXPECT_EQ(c.model.rope_theta, 500000.0);
  EXPECT_EQ(c.model.rope_original_max_positions, 16);
  EXPECT_FALSE(c.model.tie_embeddings);
  EXPECT_TRUE(fs::path(c.model.pretrained).is_absolute());
  const TrainConfig q = pretrained_config(kModels / "qwen2");
  EXPECT_TRUE(q.model.qkv_bias);
  EXPECT_FALSE(q.model.o_bias);
  EXPECT_TRUE(q.model.tie_embeddings);
}

TEST(HfFolder, Qwen3AndSmolLM3ReadTheirOwnFields) {
  const TrainConfig q = pretrained_config(kModels / "qwen3");
  EXPECT_TRUE(q.model.qk_norm);
  EXPECT_EQ(q.model.head_dim, 32);  // wider than hidden_size / heads = 16, as Qwen3's are
  EXPECT_TRUE(q.model.nope_layers.empty());
  const TrainConfig s = pretrained_config(kModels / "smollm3");
  EXPECT_EQ(s.model.nope_layers, std::vector<int64_t>{1});
  EXPECT_TRUE(s.model.qkv_bias && s.model.o_bias && !s.model.mlp_bias);
  // Without no_rope_layers, every no_rope_layer_interval-th layer is NoPE (SmolLM3Config).
  TempFolder f("smollm3");
  f.edit_config([](json& j) {
    j.erase("no_rope_layers");
    j["no_rope_layer_interval"] = 2;
  });
  EXPECT_EQ(pretrained_config(f.path()).model.nope_layers, std::vector<int64_t>{1});
}

// The config.json of models people fine-tune, as their Hub repositories hold them
// (tests/data/hf/published/README.md): each loads, with the shape its fields say.
TEST(HfFolder, PublishedConfigsLoadAsPublished) {
  struct Want {
    const char* file;
    int64_t layers, width, kv_heads, head_dim;
    bool tied, qk_norm;
    std::vector<int64_t> nope;
  };
  std::vector<int64_t> smollm3_nope;
  for (int64_t i = 3; i < 36; i += 4) smollm3_nope.push_back(i);
  const std::vector<Want> published = {
      {"SmolLM2-135M", 30, 576, 3, 0, true, false, {}},
      {"SmolLM2-1.7B-Instruct", 24, 2048, 32, 0, true, false, {}},
      {"SmolLM3-3B", 36, 2048, 4, 0, false, false, smollm3_nope},
      {"Llama-3.2-1B-Instruct", 16, 2048, 8, 64, true, false, {}},
      {"Qwen2.5-0.5B-Instruct", 24, 896, 2, 0, true, false, {}},
      {"Qwen3-0.6B", 28, 1024, 8, 128, true, true, {}},
      {"Mistral-7B-Instruct-v0.3", 32, 4096, 8, 0, false, false, {}},
      {"Phi-3.5-mini-instruct", 32, 3072, 32, 0, false, false, {}},
      {"Phi-4-mini-instruct", 32, 3072, 8, 0, true, false, {}},
      {"gemma-3-1b-it", 26, 1152, 1, 256, true, true, {}},
  };
  const fs::path dir = scratch("published");
  fs::create_directories(dir);
  for (const Want& w : published) {
    SCOPED_TRACE(w.file);
    fs::copy_file(kFixtures / "published" / (std::string(w.file) + ".json"), dir / "config.json",
                  fs::copy_options::overwrite_existing);
    const FolderSettings folder = hf::read_folder_settings(dir.string(), 2048);
    auto setting = [&](const std::string& key) {
      const auto it = folder.settings.find(key);
      return it == folder.settings.end() ? std::string("(unset)") : it->second.text;
    };
    EXPECT_EQ(setting("model.n_layer"), std::to_string(w.layers));
    EXPECT_EQ(setting("model.dim"), std::to_string(w.width));
    EXPECT_EQ(setting("model.n_kv_head"), std::to_string(w.kv_heads));
    EXPECT_EQ(setting("model.head_dim"), w.head_dim ? std::to_string(w.head_dim) : "(unset)");
    EXPECT_EQ(setting("model.tie_embeddings"), w.tied ? "true" : "false");
    EXPECT_EQ(setting("model.qk_norm"), w.qk_norm ? "true" : "(unset)");
    std::string nope;
    for (int64_t i : w.nope) nope += (nope.empty() ? "" : ",") + std::to_string(i);
    EXPECT_EQ(setting("model.nope_layers"), w.nope.empty() ? "(unset)" : nope);
    if (std::string(w.file) == "gemma-3-1b-it") {  // 5 sliding layers, then a full one
      std::string sliding;
      for (int i = 0; i < 26; ++i) {
        if ((i + 1) % 6) sliding += (sliding.empty() ? "" : ",") + std::to_string(i);
      }
      EXPECT_EQ(setting("model.sliding_layers"), sliding);
      EXPECT_EQ(setting("model.sliding_window"), "512");
      EXPECT_EQ(setting("model.local_rope_theta"), "10000");
      EXPECT_EQ(setting("model.rope_theta"), "1000000");
    }
    if (std::string(w.file).rfind("Phi-", 0) == 0) {
      EXPECT_EQ(setting("model.rope_scaling"), "longrope");
      EXPECT_EQ(setting("model.rope_factor"), "32");  // 131072 / 4096
      EXPECT_EQ(setting("model.fused_projections"), "true");
      EXPECT_EQ(setting("model.partial_rotary_factor"),
                std::string(w.file) == "Phi-4-mini-instruct" ? "0.75" : "1");
    }
  }
  fs::remove_all(dir);
}

std::string config_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a ConfigError: ") + e.what();
  }
  return "no error";
}

TEST(HfFolder, AValueThatContradictsConfigJsonNamesBoth) {
  const std::string e = config_error([] {
    pretrained_config(kModels / "gpt2", {{"model.n_layer", "3"}});
  });
  EXPECT_NE(e.find("--model.n_layer"), std::string::npos) << e;
  EXPECT_NE(e.find("n_layer gives 2"), std::string::npos) << e;
  // The same value is no contradiction.
  EXPECT_EQ(pretrained_config(kModels / "gpt2", {{"model.n_layer", "2"}}).model.n_layer, 2);
}

// A Llama-family folder brings its tokenizer, or data.tokenizer_dir names one: GPT-2's default
// files would tokenize its data silently wrong. "model/" is the folder "model".
TEST(HfFolder, ALlamaFolderWithoutATokenizerNeedsOneNamed) {
  const std::string e = config_error([] {
    load_config("", {{"model.pretrained", (kModels / "llama").string()}}, {},
                hf::read_folder_settings);
  });
  EXPECT_NE(e.find("holds no tokenizer"), std::string::npos) << e;
  const TrainConfig c = pretrained_config(kModels / "llama" / "");
  EXPECT_EQ(c.model.pretrained, (kModels / "llama").string());
}

TEST(HfFolder, WhatWeDoNotBuildIsRefusedByName) {
  auto refused = [](const std::string& fixture, const std::function<void(json&)>& edit) {
    TempFolder f(fixture);
    f.edit_config(edit);
    return config_error([&] { pretrained_config(f.path()); });
  };
  EXPECT_NE(refused("llama", [](json& j) { j["model_type"] = "gemma"; }).find("'gemma' is not"),
            std::string::npos);
  EXPECT_NE(refused("llama", [](json& j) { j["rope_parameters"]["rope_type"] = "yarn"; })
                .find("'yarn' is not implemented"),
            std::string::npos);
  EXPECT_NE(refused("llama", [](json& j) { j["quantization_config"] = json::object(); })
                .find("quantization_config"),
            std::string::npos);
  EXPECT_NE(refused("llama", [](json& j) { j["hidden_act"] = "gelu"; }).find("hidden_act"),
            std::string::npos);
  EXPECT_NE(refused("mistral", [](json& j) { j["sliding_window"] = 8; }).find("sliding_window"),
            std::string::npos);
  EXPECT_NE(refused("llama", [](json& j) { j["rope_parameters"]["attention_factor"] = 2.0; })
                .find("rope_parameters.attention_factor"),
            std::string::npos);
  EXPECT_NE(refused("llama", [](json& j) { j["rope_parameters"]["rope_theta"] = "5e5"; })
                .find("rope_parameters.rope_theta"),
            std::string::npos);
  EXPECT_NE(refused("gpt2", [](json& j) { j["architectures"] = {"GPT2ForSequenceClassification"}; })
                .find("architectures"),
            std::string::npos);
  // nanotron's interleaved RoPE pairs other channels than transformers rotates.
  EXPECT_NE(
      refused("llama", [](json& j) { j["rope_interleaved"] = true; }).find("rope_interleaved"),
      std::string::npos);
  EXPECT_NE(refused("smollm3",
                    [](json& j) {
                      j["no_rope_layers"] = {1, 2};
                    })
                .find("no_rope_layers: item 1 is 2"),
            std::string::npos);
  EXPECT_NE(refused("smollm3", [](json& j) { j["no_rope_layers"] = {1}; }).find("no_rope_layers"),
            std::string::npos);
  EXPECT_NE(refused("qwen3", [](json& j) { j["model_type"] = "qwen3_moe"; })
                .find("(gemma3_text, gpt2, llama, mistral, phi3, qwen2, qwen3, smollm3)"),
            std::string::npos);
  EXPECT_NE(refused("phi3",
                    [](json& j) {
                      j["rope_parameters"]["short_factor"] = {1.0, 2.0};
                    })
                .find("longrope needs 8"),
            std::string::npos);
  EXPECT_NE(refused("phi3", [](json& j) { j["lm_head_bias"] = true; }).find("lm_head_bias"),
            std::string::npos);
  // Gemma 2's soft-capping, and another RoPE for the sliding layers, are not Gemma 3's math.
  EXPECT_NE(refused("gemma3", [](json& j) { j["final_logit_softcapping"] = 30.0; })
                .find("final_logit_softcapping"),
            std::string::npos);
  EXPECT_NE(
      refused("gemma3",
              [](json& j) { j["rope_parameters"]["sliding_attention"]["rope_type"] = "linear"; })
          .find("rope_parameters.sliding_attention.rope_type"),
      std::string::npos);
  // A context length of 1e300 has no integer value: named, not converted (undefined behaviour).
  EXPECT_NE(
      refused("llama",
              [](json& j) { j["rope_parameters"]["original_max_position_embeddings"] = 1e300; })
          .find("original_max_position_embeddings: expected a positive integer"),
      std::string::npos);
  EXPECT_NE(
      refused("phi3",
              [](json& j) { j["rope_parameters"]["original_max_position_embeddings"] = 1e300; })
          .find("original_max_position_embeddings: expected a positive integer"),
      std::string::npos);
  EXPECT_NE(refused("llama", [](json& j) { j["partial_rotary_factor"] = 0.5; })
                .find("partial_rotary_factor"),
            std::string::npos);
}

// Hostile config.json files (issue 45): 100,000 nested arrays as a value crashed the process in an
// error message's dump(); a folder, a FIFO or a link to /dev/zero in its place was "missing"; a
// 200 MB one trained. Each is refused naming the file, in well under a second.
TEST(HfFolder, HostileConfigJsonIsRefusedNamingTheFile) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const char* field : {"vocab_size", "architectures", "hidden_act", "rope_theta"}) {
    TempFolder f("llama");
    std::string text = read_text(f.path() / "config.json");
    text.insert(1, "\"" + std::string(field) + "_x\": " + deep + ",");
    std::ofstream(f.path() / "config.json") << text;
    const std::string e = config_error([&] { pretrained_config(f.path()); });
    EXPECT_NE(e.find("config.json: JSON nested deeper than 64 levels"), std::string::npos) << e;
  }
  {
    TempFolder f("llama");
    f.edit_config([&](json& j) {
      j["vocab_size"] = json::parse(std::string(60, '[') + "1" + std::string(60, ']'));
    });
    const std::string e = config_error([&] { pretrained_config(f.path()); });
    EXPECT_NE(e.find("vocab_size: expected an integer, got [[[["), std::string::npos) << e;
    EXPECT_LT(e.size(), 400u) << e;
  }
  const auto replaced = [](const std::function<void(const fs::path&)>& make) {
    TempFolder f("llama");
    fs::remove(f.path() / "config.json");
    make(f.path() / "config.json");
    return config_error([&] { pretrained_config(f.path()); });
  };
  std::string e = replaced([](const fs::path& p) { fs::create_directory(p); });
  EXPECT_NE(e.find("config.json: is a folder, not a config.json"), std::string::npos) << e;
  e = replaced([](const fs::path& p) { ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0); });
  EXPECT_NE(e.find("config.json: is not a regular file"), std::string::npos) << e;
  e = replaced([](const fs::path& p) { fs::create_symlink("/dev/zero", p); });
  EXPECT_NE(e.find("config.json: is not a regular file"), std::string::npos) << e;
  e = replaced([](const fs::path& p) {
    std::ofstream(p) << "{\"_name_or_path\": \"" << std::string(2 << 20, 'x') << "\"}";
  });
  EXPECT_NE(e.find("more than a config.json may hold (1 MiB)"), std::string::npos) << e;
  e = replaced([](const fs::path&) {});
  EXPECT_NE(e.find("missing: a Hugging Face model folder holds config.json"), std::string::npos)
      << e;
}

// A config.json edited over weights of another size (issue 45: vocab_size 20 million ran to 16.7 GB
// and the OOM killer; 100,000 layers ran for minutes) is refused from the files' headers, naming
// config.json's field and the tensor, before anything is allocated.
TEST(HfFolder, AConfigJsonThatContradictsItsWeightsIsRefusedBeforeBuilding) {
  const auto refused = [](const std::function<void(json&)>& edit) {
    TempFolder f("llama");
    f.edit_config(edit);
    const TrainConfig c = pretrained_config(f.path());
    struct rusage before {};
    ::getrusage(RUSAGE_SELF, &before);
    const std::string e = config_error([&] { hf::check_folder_weights(c); });
    struct rusage after {};
    ::getrusage(RUSAGE_SELF, &after);
    EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 100 * 1024) << "KiB of peak RSS added";
    return e;
  };
  std::string e = refused([](json& j) { j["vocab_size"] = 20000000; });
  EXPECT_NE(e.find("config.json: vocab_size: vocab_size and hidden_size (model.vocab_size, "
                   "model.dim) give model.embed_tokens.weight the shape [20000000, 64], but "),
            std::string::npos)
      << e;
  e = refused([](json& j) { j["num_hidden_layers"] = 100000; });
  EXPECT_NE(e.find("num_hidden_layers (model.n_layer) is 100000, but the weights in "),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("hold 2 blocks (model.layers.0 to model.layers.1)"), std::string::npos) << e;
  e = refused([](json& j) { j["intermediate_size"] = 1000; });
  EXPECT_NE(e.find("intermediate_size and hidden_size (model.intermediate_size, model.dim) give "
                   "model.layers.0.mlp.gate_proj.weight the shape [1000, 64]"),
            std::string::npos)
      << e;
  e = refused([](json& j) { j["tie_word_embeddings"] = true; });
  EXPECT_NE(e.find("holds the tensor lm_head.weight, which the model config.json describes does "
                   "not have"),
            std::string::npos)
      << e;
  // Every fixture as saved passes (gpt2-hub: Hub-style names, the causal-mask buffers dropped).
  for (const char* fixture : {"gpt2", "gpt2-hub", "llama", "llama-linear", "llama-tied", "mistral",
                              "qwen2", "qwen3", "smollm3", "phi3", "phi4-mini", "gemma3"}) {
    EXPECT_NO_THROW(hf::check_folder_weights(pretrained_config(kModels / fixture))) << fixture;
  }
}

std::string load_error(const fs::path& dir) {
  try {
    load(pretrained_config(dir));
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

// A tokenizer whose ids run past the model's embedding (2001 tokens, 384 rows) is named before the
// first step, not found at the first rare token.
TEST(HfFolder, ATokenizerLargerThanTheEmbeddingIsNamed) {
  const fs::path work = scratch("vocab");
  fs::create_directories(work);
  std::ofstream(work / "text.txt") << "Fellow citizens of the Senate and the House.\n";
  const fs::path tokenizer = fs::path(FSDP_HF_FIXTURES) / "tokenizers" / "bytelevel";
  const TrainConfig c =
      pretrained_config(kModels / "gpt2", {{"data.tokenizer_dir", tokenizer.string()},
                                           {"data.dataset", (work / "text.txt").string()},
                                           {"data.cache_dir", (work / "cache").string()},
                                           {"data.val_split", "0"},
                                           {"train.eval_every", "0"}});
  std::ostringstream out;
  RunLog log(out, false, false, "", 0);
  try {
    prepare_data(c, log);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("has ids up to 2000 (2001 tokens), more than the model's "
                                         "embedding holds (model.vocab_size 384)"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(work);
}

TEST(HfFolder, AMissingShardOrIndexEntryIsNamed) {
  {
    TempFolder f("llama");
    fs::remove(f.path() / "model-00003-of-00005.safetensors");
    const std::string e = load_error(f.path());
    EXPECT_NE(e.find("model-00003-of-00005.safetensors', which is missing"), std::string::npos)
        << e;
  }
  {
    TempFolder f("llama");
    json index = read_json(f.path() / "model.safetensors.index.json");
    index["weight_map"]["model.norm.weight"] = "model-00001-of-00005.safetensors";
    std::ofstream(f.path() / "model.safetensors.index.json") << index.dump();
    const std::string e = load_error(f.path());
    EXPECT_NE(e.find("puts tensor 'model.norm.weight'"), std::string::npos) << e;
  }
  {
    TempFolder f("llama");  // a shard linked to a device is named as what it is, not "missing"
    fs::remove(f.path() / "model-00003-of-00005.safetensors");
    fs::create_symlink("/dev/zero", f.path() / "model-00003-of-00005.safetensors");
    const std::string e = load_error(f.path());
    EXPECT_NE(e.find("model-00003-of-00005.safetensors', which is not a regular file"),
              std::string::npos)
        << e;
  }
  {
    TempFolder f("gpt2");
    fs::remove(f.path() / "model.safetensors");
    const std::string e = load_error(f.path());
    EXPECT_NE(e.find("neither model.safetensors.index.json nor model.safetensors"),
              std::string::npos)
        << e;
  }
}

// --- out ------------------------------------------------------------------------------------

// A checkpoint of `c`'s model loaded from its folder, as fsdp-train writes one (the train state
// holds the config), under a fresh root.
std::string checkpoint_of(const TrainConfig& c, const fs::path& root) {
  Loaded m = load(c);
  const nlohmann::json state = {{"config", to_yaml(c)}};
  return save_checkpoint(root.string(), 7, *m.sharded, nullptr, state.dump());
}

// From a folder and back: config.json as it came in (every field, model_type and the rope
// spelling included; a bf16 model comes back bf16), the tokenizer beside it, and weights that
// compute transformers' numbers again, in one file or split with an index.
TEST(HfExport, AFolderComesBackAsItCameIn) {
  const fs::path tokenizer = fs::path(FSDP_HF_FIXTURES) / "tokenizers" / "llama3";
  for (int64_t shard_bytes : {int64_t{50000000000}, int64_t{40000}}) {
    const fs::path root = scratch("export_ckpt"), out = scratch("export_out");
    const TrainConfig c =
        pretrained_config(kModels / "llama", {{"data.tokenizer_dir", tokenizer.string()}});
    const std::string step = checkpoint_of(c, root);
    hf::ExportOptions options;
    options.max_shard_bytes = shard_bytes;
    hf::export_model_folder(step, out.string(), options);
    const json in = read_json(kModels / "llama" / "config.json");
    const json back = read_json(out / "config.json");
    for (const auto& [k, v] : in.items()) EXPECT_EQ(back[k], v) << k;
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
      EXPECT_TRUE(fs::is_regular_file(out / f)) << f;
    }
    EXPECT_EQ(fs::exists(out / "model.safetensors.index.json"), shard_bytes < 1000000);
    expect_matches_transformers("llama", out);
    fs::remove_all(root);
    fs::remove_all(out);
  }
}

// A run that did not start from a folder gets a config.json written whole; GPT-2's tokenizer
// files are renamed as transformers' GPT2Tokenizer reads them.
TEST(HfExport, AConfigIsWrittenForARunWithoutAFolder) {
  const json ref = read_json(kModels / "gpt2" / "config.json");
  TrainConfig c =
      load_config("", {{"model.n_embd", "32"},
                       {"model.n_layer", "2"},
                       {"model.n_head", "4"},
                       {"model.vocab_size", "384"},
                       {"model.n_positions", "64"},
                       {"data.seq_len", "16"},
                       {"model.init_from", (kModels / "gpt2" / "model.safetensors").string()}});
  c.data.tokenizer_dir = (fs::path(FSDP_SOURCE_DIR) / "assets" / "gpt2").string();
  if (!fs::exists(fs::path(c.data.tokenizer_dir) / "encoder.json")) {
    GTEST_SKIP() << "no " << c.data.tokenizer_dir << " (scripts/fetch_assets.sh fetches it)";
  }
  const fs::path root = scratch("export_gpt2_ckpt"), out = scratch("export_gpt2_out");
  Loaded m{build_model(c), nullptr};
  m.sharded =
      fully_shard(m.lm.module, make_local_comm(), c.sharding_options().param_init(m.lm.param_init));
  load_full_safetensors(*m.sharded, c.model.init_from);
  const std::string step = save_checkpoint(root.string(), 3, *m.sharded, nullptr,
                                           nlohmann::json({{"config", to_yaml(c)}}).dump());
  hf::export_model_folder(step, out.string());
  const json back = read_json(out / "config.json");
  for (const char* k : {"model_type", "n_embd", "n_layer", "n_head", "n_positions", "vocab_size",
                        "activation_function", "layer_norm_epsilon"}) {
    EXPECT_EQ(back[k], ref[k]) << k;
  }
  EXPECT_EQ(back["dtype"], "float32");
  EXPECT_EQ(back["eos_token_id"], 50256);
  for (const char* f : {"vocab.json", "merges.txt", "tokenizer_config.json"}) {
    EXPECT_TRUE(fs::is_regular_file(out / f)) << f;
  }
  expect_matches_transformers("gpt2", out);
  fs::remove_all(root);
  fs::remove_all(out);
}

TEST(HfExport, RefusesToWriteOverAFolderOrIntoTheCheckpoint) {
  const fs::path root = scratch("export_refuse");
  const TrainConfig c = pretrained_config(kModels / "llama-tied");
  const std::string step = checkpoint_of(c, root);
  auto error = [&](const fs::path& out) {
    try {
      hf::export_model_folder(step, out.string());
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error(fs::path(step) / "hf").find("lies inside the checkpoint"), std::string::npos);
  EXPECT_NE(error(root).find("exists and is not an empty folder"), std::string::npos);
  EXPECT_TRUE(fs::exists(fs::path(step) / "COMMITTED"));  // nothing of it was touched
  fs::remove_all(root);
}

// `fsdp-train sample` on a folder is model.generate(**tokenizer(prompt)) (tests/hf/
// make_fixtures.py, generate_fixture): each prompt with the post-processor's BOS, greedy as the
// folder's generation_config.json says (do_sample false beside a temperature and a top_p), at most
// its max_new_tokens, stopped at the second of its two EOS ids, an id the tokenizer lacks skipped
// when decoding. Compared as decoded text, which holds every id the tokenizer knows.
TEST(HfGenerate, SampleIsGenerateWithTheFoldersSettings) {
  const fs::path dir = kModels / "llama-generate";
  const json ref = read_json(dir / "reference.json");
  const TrainConfig c =
      pretrained_config(dir, {{"data.seq_len", "64"}, {"data.tokenizer_dir", dir.string()}});
  SampleOptions options;
  for (const auto& item : ref["cases"]) options.prompts.push_back(item["prompt"]);
  std::ostringstream out;
  const std::vector<std::string> texts = fsdp::sample(c, options, make_local_comm(), out);
  ASSERT_EQ(texts.size(), ref["cases"].size()) << out.str();
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(texts[i], ref["cases"][i]["text"].get<std::string>()) << "prompt " << i;
  }
  const std::string log = out.str();
  EXPECT_NE(log.find("greedy; at most 16 new tokens, stopping at EOS 2002, " +
                     std::to_string(ref["stop_id"].get<int64_t>())),
            std::string::npos)
      << log;
  // A flag beats the file: ten tokens at most, whatever the file says.
  options.max_new_tokens = 10;
  options.prompts = {ref["cases"][1]["prompt"]};
  std::ostringstream capped;
  const auto ten = fsdp::sample(c, options, make_local_comm(), capped);
  EXPECT_NE(capped.str().find("at most 10 new tokens"), std::string::npos) << capped.str();
  EXPECT_EQ(ten.at(0).size() < texts[1].size(), true);
}

TEST(HfGenerate, GenerationConfigIsReadAsTransformersReadsIt) {
  const fs::path dir = scratch("generation");
  fs::create_directories(dir);
  auto write = [&](const char* name, const json& j) { std::ofstream(dir / name) << j.dump(); };
  write("config.json", {{"eos_token_id", 7}});
  EXPECT_EQ(hf::read_generation_defaults(dir.string()).eos_ids, std::vector<int64_t>{7});
  write("generation_config.json", {{"eos_token_id", {3, 4}},
                                   {"do_sample", true},
                                   {"top_k", 20},
                                   {"repetition_penalty", 1.1},
                                   {"num_beams", 1},
                                   {"transformers_version", "5.12.1"}});
  const hf::GenerationDefaults g = hf::read_generation_defaults(dir.string());
  EXPECT_EQ(g.eos_ids, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(g.do_sample, true);
  EXPECT_EQ(g.top_k, 20);
  EXPECT_FALSE(g.temperature.has_value());
  // What generate() would do that sample does not is named; a no-op value is not.
  EXPECT_EQ(g.not_applied, std::vector<std::string>{"repetition_penalty = 1.1"});
  // Numbers outside what sample's flags accept are named: 10^12 new tokens would never end.
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, json>>{{"max_new_tokens", 1000000000000},
                                                 {"max_length", -1},
                                                 {"top_p", 0},
                                                 {"top_k", -5},
                                                 {"temperature", -1.0}}) {
    write("generation_config.json", {{key, value}});
    try {
      hf::read_generation_defaults(dir.string());
      ADD_FAILURE() << key << " = " << value.dump() << " was read";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("generation_config.json: " + key + ": expected"),
                std::string::npos)
          << e.what();
    }
  }
  write("generation_config.json", {{"temperature", "hot"}});
  try {
    hf::read_generation_defaults(dir.string());
    ADD_FAILURE() << "a temperature of \"hot\" was read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("generation_config.json: temperature: expected a number"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fsdp
