// The trainer's configuration layer: defaults, precedence (overrides > file > defaults), every
// Accelerate and TorchAcc key, the error messages (file, line, key, suggestion), the settings that
// are not supported, the YAML round trip, the command line, and that --help, docs/config.md
// and the files in configs/ agree with the parser.
#include <ATen/Context.h>
#include <dirent.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "compat.h"
#include "fsdp/config/config.h"
#include "train/run_log.h"

namespace {

using fsdp::AutoWrapPolicy;
using fsdp::ConfigError;
using fsdp::ConfigKey;
using fsdp::ConfigOverride;
using fsdp::DType;
using fsdp::ModelType;
using fsdp::ShardingStrategy;
using fsdp::TrainConfig;
using fsdp::WrapPolicy;

TrainConfig parse(const std::string& yaml, const std::vector<ConfigOverride>& overrides = {}) {
  return fsdp::parse_config(yaml, "test.yaml", overrides);
}

// The error parsing `yaml` with `overrides` raises; a test failure when there is none.
ConfigError parse_error(const std::string& yaml,
                        const std::vector<ConfigOverride>& overrides = {}) {
  try {
    parse(yaml, overrides);
  } catch (const ConfigError& e) {
    return e;
  }
  ADD_FAILURE() << "no ConfigError for:\n" << yaml;
  return ConfigError("", 0, "", "(none)");
}

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << part << "' not in:\n" << text;
}

std::string temp_file(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> yaml_files(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() > 5 && name.substr(name.size() - 5) == ".yaml")
        out.push_back(dir + "/" + name);
    }
    closedir(d);
  }
  return out;
}

// --- defaults --------------------------------------------------------------------------------

TEST(ConfigDefaults, SmallGpt2FullShardOnTheBundledCorpus) {
  const TrainConfig c;
  EXPECT_EQ(c.model.type, ModelType::kGPT2);
  EXPECT_EQ(c.model.vocab_size, 50257);
  EXPECT_EQ(c.model.n_layer, 4);
  EXPECT_EQ(c.model.n_head, 4);
  EXPECT_EQ(c.model.n_embd, 128);
  EXPECT_EQ(c.data.seq_len, 128);
  EXPECT_EQ(c.context_length(), 128);
  EXPECT_EQ(c.data.dataset, "sotu");
  EXPECT_EQ(c.optim.max_steps, 300);
  EXPECT_LE(c.optim.warmup_steps, c.optim.max_steps);
  EXPECT_EQ(c.train.micro_batch_size, 4);
  EXPECT_EQ(c.fsdp.sharding_strategy, ShardingStrategy::kFullShard);
  EXPECT_EQ(c.fsdp.auto_wrap_policy, AutoWrapPolicy::kTransformerBased);
  EXPECT_EQ(c.fsdp.backward_prefetch, fsdp::BackwardPrefetch::kBackwardPre);
  EXPECT_EQ(c.mixed_precision, DType::kFloat32);
  EXPECT_NO_THROW(fsdp::validate_config(c));
}

TEST(ConfigDefaults, AnEmptyFileAndNoFileGiveTheDefaults) {
  EXPECT_EQ(parse(""), TrainConfig{});
  EXPECT_EQ(parse("# only a comment\n"), TrainConfig{});
  EXPECT_EQ(fsdp::load_config(""), TrainConfig{});
}

// The default run must train in a few minutes on 2 cores with one thread per rank. Counted from the
// architecture, independently of any model code: 6 FLOP per parameter per token for forward and
// backward, the tied output projection (vocab x width) counted as a matmul, at the slow end of this
// machine's fp32 speed (30 GFLOP/s per core, OpenBLAS's generic kernel).
TEST(ConfigDefaults, DefaultRunFitsInAFewMinutesOnTwoCores) {
  const TrainConfig c;
  const double C = static_cast<double>(c.model.n_embd);
  const double block = 12 * C * C + 13 * C;  // attention 4C^2+4C, MLP 8C^2+5C, two LayerNorms 4C
  const double matmul_params = c.model.n_layer * block + c.model.vocab_size * C;
  const double tokens_per_rank_step =
      c.train.micro_batch_size * c.train.gradient_accumulation_steps * c.data.seq_len;
  const double train_flop = 6 * matmul_params * tokens_per_rank_step * c.optim.max_steps;
  const double evals = c.optim.max_steps / c.train.eval_every;
  const double eval_flop =
      2 * matmul_params * c.train.eval_batches * c.train.micro_batch_size * c.data.seq_len * evals;
  const double seconds = (train_flop + eval_flop) / 30e9;
  EXPECT_LT(seconds, 300) << "the default run needs about " << seconds << " s at 30 GFLOP/s";
  EXPECT_GT(seconds, 10) << "too small to show anything";
}

TEST(ConfigDefaults, ShardingOptionsWrapEachBlockInFp32) {
  const fsdp::ShardingOptions o = TrainConfig{}.sharding_options();
  EXPECT_EQ(o.strategy_, ShardingStrategy::kFullShard);
  EXPECT_EQ(o.wrap_.kind, WrapPolicy::Kind::kModuleType);
  EXPECT_EQ(o.wrap_.module_types, std::vector<std::string>{"GPT2Block"});
  EXPECT_EQ(o.param_dtype_, DType::kFloat32);
  EXPECT_EQ(o.reduce_dtype_, DType::kFloat32);
  EXPECT_EQ(o.shard_group_size_, 0);

  const TrainConfig llama = parse("model:\n  type: llama\n");
  EXPECT_EQ(llama.sharding_options().wrap_.module_types,
            std::vector<std::string>{"LlamaDecoderLayer"});
}

// --- precedence ------------------------------------------------------------------------------

TEST(ConfigPrecedence, OverridesBeatTheFileWhichBeatsTheDefaults) {
  const std::string yaml = "optim:\n  lr: 0.002\n  max_steps: 50\n";
  const TrainConfig file_only = parse(yaml);
  EXPECT_EQ(file_only.optim.lr, 0.002);
  EXPECT_EQ(file_only.optim.max_steps, 50);
  EXPECT_EQ(file_only.optim.min_lr, TrainConfig{}.optim.min_lr);

  const TrainConfig overridden = parse(yaml, {{"optim.lr", "3e-4"}});
  EXPECT_EQ(overridden.optim.lr, 3e-4);
  EXPECT_EQ(overridden.optim.max_steps, 50);  // the file's, not overridden

  EXPECT_EQ(parse(yaml, {{"optim.lr", "3e-4"}, {"optim.lr", "5e-4"}}).optim.lr, 5e-4);
}

TEST(ConfigPrecedence, LoadConfigReadsTheFileThenTheOverrides) {
  const std::string path = temp_file("precedence.yaml", "train:\n  seed: 7\n  log_every: 3\n");
  const TrainConfig c = fsdp::load_config(path, {{"train.seed", "9"}});
  EXPECT_EQ(c.train.seed, 9);
  EXPECT_EQ(c.train.log_every, 3);
}

// Validation runs after every source: an override can repair a value the file got wrong.
TEST(ConfigPrecedence, AnOverrideRepairsAFileValue) {
  const std::string yaml = "fsdp_config:\n  prefetch_depth: 0\n";
  EXPECT_TRUE(contains(parse_error(yaml).what(), "fsdp_config.prefetch_depth"));
  EXPECT_EQ(parse(yaml, {{"fsdp_config.prefetch_depth", "2"}}).fsdp.prefetch_depth, 2);
}

// --- Accelerate ------------------------------------------------------------------------------

TEST(ConfigAccelerate, StrategiesByNameAndNumber) {
  const std::vector<std::pair<std::string, ShardingStrategy>> cases = {
      {"FULL_SHARD", ShardingStrategy::kFullShard},
      {"SHARD_GRAD_OP", ShardingStrategy::kShardGradOp},
      {"NO_SHARD", ShardingStrategy::kNoShard},
      {"HYBRID_SHARD", ShardingStrategy::kHybridShard},
      {"HYBRID_SHARD_ZERO2", ShardingStrategy::kHybridShardZero2},
      {"1", ShardingStrategy::kFullShard},
      {"2", ShardingStrategy::kShardGradOp},
      {"3", ShardingStrategy::kNoShard},
      {"4", ShardingStrategy::kHybridShard},
      {"5", ShardingStrategy::kHybridShardZero2},
      {"shard_grad_op", ShardingStrategy::kShardGradOp},
  };
  for (const auto& [name, strategy] : cases) {
    const TrainConfig c = parse("fsdp_config:\n  fsdp_sharding_strategy: " + name + "\n");
    EXPECT_EQ(c.fsdp.sharding_strategy, strategy) << name;
    EXPECT_EQ(c.sharding_options().strategy_, strategy) << name;
  }
  EXPECT_TRUE(contains(parse_error("fsdp_config:\n  fsdp_sharding_strategy: 6\n").what(),
                       "HYBRID_SHARD_ZERO2"));
}

TEST(ConfigAccelerate, ReshardAfterForwardIsFsdp2sSpellingOfTheStrategy) {
  const std::string key = "fsdp_config:\n  fsdp_version: 2\n  fsdp_reshard_after_forward: ";
  EXPECT_EQ(parse(key + "true\n").fsdp.sharding_strategy, ShardingStrategy::kFullShard);
  EXPECT_EQ(parse(key + "false\n").fsdp.sharding_strategy, ShardingStrategy::kShardGradOp);
  EXPECT_EQ(parse(key + "NO_SHARD\n").fsdp.sharding_strategy, ShardingStrategy::kNoShard);
  EXPECT_TRUE(contains(parse_error(key + "sometimes\n").what(), "expected true, false or"));
  EXPECT_TRUE(contains(parse_error("fsdp_config:\n  fsdp_version: 3\n").what(), "1, 2"));
}

TEST(ConfigAccelerate, WrapPolicies) {
  const TrainConfig by_size =
      parse("fsdp_config:\n  fsdp_auto_wrap_policy: SIZE_BASED_WRAP\n  fsdp_min_num_params: 1e6\n");
  EXPECT_EQ(by_size.sharding_options().wrap_.kind, WrapPolicy::Kind::kSize);
  EXPECT_EQ(by_size.sharding_options().wrap_.min_num_params, 1000000);

  const TrainConfig none = parse("fsdp_config:\n  fsdp_auto_wrap_policy: NO_WRAP\n");
  EXPECT_EQ(none.sharding_options().wrap_.kind, WrapPolicy::Kind::kNone);

  const TrainConfig classes = parse(
      "fsdp_config:\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
      "  fsdp_transformer_layer_cls_to_wrap: GPT2Block, GPT2MLP\n");
  const std::vector<std::string> expected = {"GPT2Block", "GPT2MLP"};
  EXPECT_EQ(classes.fsdp.transformer_layer_cls_to_wrap, expected);
  EXPECT_EQ(classes.sharding_options().wrap_.module_types, expected);
  // A YAML list says the same.
  EXPECT_EQ(parse("fsdp_config:\n  fsdp_transformer_layer_cls_to_wrap: [GPT2Block, GPT2MLP]\n")
                .fsdp.transformer_layer_cls_to_wrap,
            expected);

  // The class names transformers gives each Llama-shaped family's block name ours, which all
  // families build from Llama's classes.
  const TrainConfig qwen = parse(
      "model:\n  type: llama\nfsdp_config:\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
      "  fsdp_transformer_layer_cls_to_wrap: Qwen2DecoderLayer, SmolLM3DecoderLayer, LlamaMLP\n");
  EXPECT_EQ(qwen.sharding_options().wrap_.module_types,
            (std::vector<std::string>{"LlamaDecoderLayer", "LlamaMLP"}));

  EXPECT_TRUE(contains(parse_error("fsdp_config:\n  fsdp_auto_wrap_policy: LAMBDA_WRAP\n").what(),
                       "TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP, NO_WRAP"));
}

TEST(ConfigAccelerate, StateDictTypes) {
  EXPECT_EQ(parse("fsdp_config:\n  fsdp_state_dict_type: FULL_STATE_DICT\n").fsdp.state_dict_type,
            fsdp::StateDictType::kFullStateDict);
  EXPECT_EQ(
      parse("fsdp_config:\n  fsdp_state_dict_type: SHARDED_STATE_DICT\n").fsdp.state_dict_type,
      fsdp::StateDictType::kShardedStateDict);
  const ConfigError e = parse_error("fsdp_config:\n  fsdp_state_dict_type: LOCAL_STATE_DICT\n");
  EXPECT_TRUE(contains(e.what(), "LOCAL_STATE_DICT is not supported"));
  EXPECT_EQ(e.line(), 2);
}

TEST(ConfigAccelerate, SyncModuleStatesAndRamEfficientLoading) {
  const TrainConfig c = parse(
      "fsdp_config:\n  fsdp_sync_module_states: true\n  fsdp_cpu_ram_efficient_loading: true\n");
  EXPECT_TRUE(c.fsdp.sync_module_states);
  EXPECT_TRUE(c.fsdp.cpu_ram_efficient_loading);
  const ConfigError e = parse_error(
      "fsdp_config:\n  fsdp_sync_module_states: false\n  fsdp_cpu_ram_efficient_loading: true\n");
  EXPECT_TRUE(contains(e.what(), "needs fsdp_sync_module_states: true"));
  EXPECT_EQ(e.line(), 3);
}

// FSDP2 (fsdp_version: 2): rank 0 loads and the others receive without fsdp_sync_module_states,
// which Accelerate 1.14 no longer writes.
TEST(ConfigAccelerate, RamEfficientLoadingUnderFsdp2NeedsNoSync) {
  const TrainConfig c =
      parse("fsdp_config:\n  fsdp_version: 2\n  fsdp_cpu_ram_efficient_loading: true\n");
  EXPECT_TRUE(c.fsdp.cpu_ram_efficient_loading);
  EXPECT_FALSE(c.fsdp.sync_module_states);
  EXPECT_EQ(c.fsdp.version, 2);
}

// parallelism_config's data-parallel sizes: replicas of a sharded model are HYBRID_SHARD (or its
// ZeRO-2 form without resharding after forward), replicas of an unsharded one NO_SHARD; tensor
// and context parallelism are refused by name; the sizes must multiply to num_processes.
TEST(ConfigAccelerate, ParallelismConfigMapsToStrategies) {
  const std::string p = "parallelism_config:\n  parallelism_config_";
  const TrainConfig hybrid = parse("num_processes: 4\n" + p +
                                   "dp_shard_size: 2\n  parallelism_config_dp_replicate_size: 2\n");
  EXPECT_EQ(hybrid.fsdp.sharding_strategy, ShardingStrategy::kHybridShard);
  EXPECT_EQ(hybrid.fsdp.shard_group_size, 2);
  EXPECT_EQ(parse(fsdp::to_yaml(hybrid)), hybrid);  // a saved config reads back the same
  const TrainConfig zero2 =
      parse("num_processes: 4\nfsdp_config:\n  fsdp_reshard_after_forward: false\n" + p +
            "dp_shard_size: 2\n  parallelism_config_dp_replicate_size: 2\n");
  EXPECT_EQ(zero2.fsdp.sharding_strategy, ShardingStrategy::kHybridShardZero2);
  const TrainConfig ddp = parse("num_processes: 2\n" + p +
                                "dp_shard_size: 1\n  parallelism_config_dp_replicate_size: 2\n");
  EXPECT_EQ(ddp.fsdp.sharding_strategy, ShardingStrategy::kNoShard);
  EXPECT_EQ(parse("num_processes: 2\n" + p + "dp_shard_size: 2\n").fsdp.sharding_strategy,
            ShardingStrategy::kFullShard);
  EXPECT_TRUE(contains(parse_error(p + "tp_size: 2\n").what(), "tensor parallelism (tp_size)"));
  EXPECT_TRUE(contains(parse_error(p + "cp_size: 4\n").what(), "context parallelism (cp_size)"));
  EXPECT_TRUE(contains(parse_error("num_processes: 4\n" + p + "dp_shard_size: 3\n").what(),
                       "must equal num_processes"));
}

TEST(ConfigAccelerate, Fsdp2ExampleFile) {
  const TrainConfig c = fsdp::load_config(FSDP_CONFIGS_DIR "/accelerate-fsdp2.yaml");
  EXPECT_EQ(c.fsdp.version, 2);
  EXPECT_EQ(c.fsdp.sharding_strategy, ShardingStrategy::kFullShard);
  EXPECT_TRUE(c.fsdp.cpu_ram_efficient_loading);
  EXPECT_EQ(c.fsdp.dp_shard_size, 2);
  EXPECT_EQ(c.num_processes, 2);
}

TEST(ConfigAccelerate, UseOrigParamsIsAcceptedEitherWay) {
  EXPECT_EQ(parse("fsdp_config:\n  fsdp_use_orig_params: true\n"), TrainConfig{});
  EXPECT_EQ(parse("fsdp_config:\n  fsdp_use_orig_params: false\n"), TrainConfig{});
  EXPECT_TRUE(contains(parse_error("fsdp_config:\n  fsdp_use_orig_params: sure\n").what(),
                       "expected true or false, got 'sure'"));
}

TEST(ConfigAccelerate, MixedPrecision) {
  EXPECT_EQ(parse("mixed_precision: 'no'\n").mixed_precision, DType::kFloat32);
  const TrainConfig bf16 = parse("mixed_precision: bf16\n");
  EXPECT_EQ(bf16.mixed_precision, DType::kBFloat16);
  EXPECT_EQ(bf16.sharding_options().param_dtype_, DType::kBFloat16);
  EXPECT_EQ(bf16.sharding_options().reduce_dtype_, DType::kBFloat16);
  EXPECT_EQ(parse("train:\n  dtype: bf16\n").mixed_precision, DType::kBFloat16);

  // fp16 (Accelerate's fp16 YAML, with its loss scaler): fp16 parameters and reductions; on the
  // CPU only where LibTorch has fp16 CPU kernels (2.x), on a GPU everywhere.
  const std::string fp16_yaml = "num_processes: 2\nmixed_precision: fp16\n";
  if (fsdp::compat::kHasCpuHalfKernels) {
    const TrainConfig fp16 = parse(fp16_yaml);
    EXPECT_EQ(fp16.mixed_precision, DType::kFloat16);
    EXPECT_EQ(fp16.sharding_options().param_dtype_, DType::kFloat16);
    EXPECT_EQ(fp16.sharding_options().reduce_dtype_, DType::kFloat16);
    EXPECT_EQ(parse("train:\n  dtype: fp16\n").mixed_precision, DType::kFloat16);
  } else {
    const ConfigError fp16 = parse_error(fp16_yaml);
    EXPECT_TRUE(contains(fp16.what(),
                         "test.yaml:2: mixed_precision: fp16 on the CPU needs "
                         "LibTorch 2.x"))
        << fp16.what();
    EXPECT_TRUE(contains(fp16.what(), "use bf16, or train.device cuda")) << fp16.what();
    EXPECT_TRUE(contains(parse_error("train:\n  dtype: fp16\n").what(), "use bf16"));
  }
  const fsdp::ParsedArgs gpu = fsdp::parse_train_args(
      {"--mixed_precision", "fp16", "--device", "cuda"}, fsdp::MachineChecks{false});
  EXPECT_EQ(gpu.config.mixed_precision, DType::kFloat16);
  // The loss scaler's keys, PyTorch's GradScaler defaults, each checked by name.
  const TrainConfig scaled = parse("grad_scaler:\n  init_scale: 1024\n  growth_interval: 100\n");
  EXPECT_EQ(scaled.grad_scaler.init_scale, 1024);
  EXPECT_EQ(scaled.grad_scaler.growth_interval, 100);
  EXPECT_EQ(TrainConfig{}.grad_scaler.init_scale, 65536);
  EXPECT_EQ(TrainConfig{}.grad_scaler.growth_interval, 2000);
  for (const auto& [yaml, key] : std::vector<std::pair<std::string, std::string>>{
           {"init_scale: 0", "grad_scaler.init_scale"},
           {"growth_factor: 1", "grad_scaler.growth_factor"},
           {"backoff_factor: 1.5", "grad_scaler.backoff_factor"},
           {"growth_interval: 0", "grad_scaler.growth_interval"},
           {"min_scale: 100000", "grad_scaler.min_scale"}}) {
    const ConfigError e = parse_error("grad_scaler:\n  " + yaml + "\n");
    EXPECT_TRUE(contains(e.what(), key)) << e.what();
  }
}

TEST(ConfigAccelerate, TopLevelKeys) {
  const TrainConfig c = parse(
      "compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nnum_processes: 4\n"
      "num_machines: 2\nmachine_rank: 1\nmain_training_function: main\nuse_cpu: true\n"
      "debug: false\ndowncast_bf16: 'no'\ngpu_ids: all\nmain_process_ip: 10.0.0.1\n"
      "main_process_port: 29500\nrdzv_backend: static\nsame_network: true\n"
      "enable_cpu_affinity: false\ntpu_env: []\ntpu_use_cluster: false\ntpu_use_sudo: false\n"
      "dynamo_config:\n  dynamo_backend: 'NO'\n");
  TrainConfig expected;
  expected.num_processes = 4;
  expected.num_machines = 2;
  EXPECT_EQ(c, expected);
}

TEST(ConfigAccelerate, SettingsThatWouldChangeBehaviourAreRejected) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"distributed_type: MULTI_GPU\n", "distributed_type must be FSDP"},
      {"compute_environment: AMAZON_SAGEMAKER\n", "only LOCAL_MACHINE"},
      {"dynamo_config:\n  dynamo_backend: INDUCTOR\n", "torch.compile"},
      {"deepspeed_config:\n  zero_stage: 3\n", "DeepSpeed is not supported"},
      {"megatron_lm_config:\n  megatron_lm_tp_degree: 2\n", "Megatron-LM"},
      {"mixed_precision: fp8\n", "fp8"},
      {"num_processes: 3\nnum_machines: 2\n", "multiple of num_machines"},
  };
  for (const auto& [yaml, message] : cases) {
    EXPECT_TRUE(contains(parse_error(yaml).what(), message)) << yaml;
  }
  EXPECT_EQ(parse("deepspeed_config: {}\n"), TrainConfig{});  // Accelerate's empty section
}

// Every key of the Accelerate file in configs/, read as Accelerate means it.
TEST(ConfigAccelerate, ExampleFile) {
  const TrainConfig c = fsdp::load_config(FSDP_CONFIGS_DIR "/accelerate-example.yaml");
  EXPECT_EQ(c.mixed_precision, DType::kBFloat16);
  EXPECT_EQ(c.num_processes, 2);
  EXPECT_EQ(c.num_machines, 1);
  EXPECT_EQ(c.fsdp.sharding_strategy, ShardingStrategy::kFullShard);
  EXPECT_EQ(c.fsdp.auto_wrap_policy, AutoWrapPolicy::kTransformerBased);
  EXPECT_EQ(c.fsdp.transformer_layer_cls_to_wrap, std::vector<std::string>{"GPT2Block"});
  EXPECT_EQ(c.fsdp.state_dict_type, fsdp::StateDictType::kShardedStateDict);
  EXPECT_TRUE(c.fsdp.sync_module_states);
  EXPECT_TRUE(c.fsdp.cpu_ram_efficient_loading);
  EXPECT_EQ(c.model, fsdp::ModelConfig{});  // no model section: the defaults
}

// --- TorchAcc --------------------------------------------------------------------------------

TEST(ConfigTorchAcc, FsdpSizeShardsWithinGroupsAndReplicatesAcross) {
  const TrainConfig c = parse("dist:\n  fsdp:\n    size: 2\n");
  EXPECT_EQ(c.fsdp.sharding_strategy, ShardingStrategy::kHybridShard);
  EXPECT_EQ(c.fsdp.shard_group_size, 2);
  EXPECT_EQ(c.sharding_options().shard_group_size_, 2);
  EXPECT_TRUE(contains(parse_error("dist:\n  fsdp:\n    size: 0\n").what(), "at least 1"));
  EXPECT_TRUE(contains(parse_error("num_processes: 3\ndist:\n  fsdp:\n    size: 2\n").what(),
                       "must divide num_processes"));
}

TEST(ConfigTorchAcc, WrapLayerClsFlattenAndSync) {
  const TrainConfig c = parse(
      "dist:\n  fsdp:\n    wrap_layer_cls: [GPT2Block]\n    flatten_parameters: true\n"
      "    sync_module_states: true\n");
  EXPECT_EQ(c.fsdp.auto_wrap_policy, AutoWrapPolicy::kTransformerBased);
  EXPECT_EQ(c.fsdp.transformer_layer_cls_to_wrap, std::vector<std::string>{"GPT2Block"});
  EXPECT_TRUE(c.fsdp.sync_module_states);
  EXPECT_EQ(parse("dist:\n  fsdp:\n    wrap_layer_cls: []\n").fsdp.auto_wrap_policy,
            AutoWrapPolicy::kNoWrap);
  EXPECT_TRUE(
      contains(parse_error("dist:\n  fsdp:\n    flatten_parameters: false\n").what(), "flattened"));
}

TEST(ConfigTorchAcc, TwoSpellingsInOneFileMustAgree) {
  EXPECT_EQ(parse("fsdp_config:\n  fsdp_sharding_strategy: HYBRID_SHARD\n"
                  "dist:\n  fsdp:\n    size: 2\n")
                .fsdp.shard_group_size,
            2);
  const ConfigError e = parse_error(
      "fsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\ndist:\n  fsdp:\n    size: 2\n");
  EXPECT_EQ(e.line(), 5);
  EXPECT_TRUE(contains(e.what(), "conflicts with fsdp_config.fsdp_sharding_strategy (line 2)"));
}

// --- errors ----------------------------------------------------------------------------------

TEST(ConfigErrors, UnknownKeyNamesFileLineAndTheClosestKey) {
  const ConfigError e = parse_error("model:\n  n_layer: 2\n  n_embed: 64\n");
  EXPECT_EQ(e.source(), "test.yaml");
  EXPECT_EQ(e.line(), 3);
  EXPECT_EQ(e.key(), "model.n_embed");
  EXPECT_EQ(std::string(e.what()),
            "test.yaml:3: model.n_embed: unknown key; did you mean model.n_embd?");
}

TEST(ConfigErrors, KnownNameInTheWrongSection) {
  EXPECT_TRUE(contains(parse_error("lr: 0.1\n").what(), "did you mean optim.lr?"));
  EXPECT_TRUE(contains(parse_error("fsdp_sharding_strategy: FULL_SHARD\n").what(),
                       "did you mean fsdp_config.fsdp_sharding_strategy?"));
  EXPECT_TRUE(contains(parse_error("optimizer:\n  lr: 1\n").what(), "did you mean optim?"));
}

TEST(ConfigErrors, FarFromAnyKeyListsTheSection) {
  const ConfigError e = parse_error("optim:\n  learning_rate: 0.1\n");
  EXPECT_TRUE(contains(e.what(), "optim has lr, min_lr, warmup_steps"));
}

TEST(ConfigErrors, WrongTypes) {
  EXPECT_EQ(std::string(parse_error("optim:\n  lr: abc\n").what()),
            "test.yaml:2: optim.lr: expected a number, got 'abc'");
  EXPECT_TRUE(contains(parse_error("train:\n  micro_batch_size: 2.5\n").what(),
                       "train.micro_batch_size: expected an integer, got '2.5'"));
  EXPECT_TRUE(contains(parse_error("model:\n  type: bert\n").what(),
                       "expected one of gpt2, llama, got 'bert'"));
  EXPECT_TRUE(contains(parse_error("optim:\n  lr: [1, 2]\n").what(), "got a list"));
  EXPECT_TRUE(contains(parse_error("optim:\n  lr:\n    a: 1\n").what(), "got a mapping"));
  EXPECT_TRUE(contains(parse_error("optim: 3\n").what(), "expected a section"));
  EXPECT_TRUE(contains(parse_error("optim:\n  lr: 0x10\n").what(), "expected a number"));
  EXPECT_TRUE(contains(parse_error("- a\n- b\n").what(), "expected a mapping"));
}

TEST(ConfigErrors, OutOfRangeValuesPointAtTheirLine) {
  const ConfigError lr = parse_error("optim:\n  min_lr: 0\n  lr: 0\n");
  EXPECT_EQ(std::string(lr.what()), "test.yaml:3: optim.lr: must be > 0, got 0");

  const ConfigError batch = parse_error("train:\n  micro_batch_size: 0\n");
  EXPECT_EQ(batch.line(), 2);
  EXPECT_TRUE(contains(batch.what(), "must be at least 1, got 0"));

  const ConfigError beta = parse_error("optim:\n  beta2: 1\n");
  EXPECT_TRUE(contains(beta.what(), "optim.beta2: must be in [0, 1), got 1"));
}

// model.attention: fused exists on LibTorch 2.x only; on 1.13 asking for it is an error at the key.
TEST(ConfigErrors, FusedAttentionOnlyWhereTheLibTorchHasIt) {
  const std::string yaml = "model:\n  attention: fused\n";
  if (fsdp::attention_kernel_available(fsdp::AttentionKernel::kFused)) {
    EXPECT_EQ(parse(yaml).model.attention, fsdp::AttentionKernel::kFused);
    return;
  }
  const ConfigError e = parse_error(yaml);
  EXPECT_EQ(e.key(), "model.attention");
  EXPECT_EQ(e.line(), 2);
  EXPECT_TRUE(contains(e.what(), "fused needs LibTorch 2.0 or later"));
}

TEST(ConfigErrors, RelationsBetweenKeys) {
  const ConfigError warmup = parse_error("optim:\n  warmup_steps: 500\n");
  EXPECT_EQ(warmup.line(), 2);
  EXPECT_TRUE(
      contains(warmup.what(), "optim.warmup_steps (500) must not exceed optim.max_steps (300)"));
  // The default warmup (30) against a file's max_steps: the file's line is the one to fix.
  const ConfigError steps = parse_error("train:\n  seed: 1\noptim:\n  max_steps: 10\n");
  EXPECT_EQ(steps.line(), 4);
  EXPECT_EQ(steps.key(), "optim.max_steps");

  EXPECT_TRUE(contains(parse_error("model:\n  n_embd: 130\n").what(),
                       "model.n_embd (130) must be divisible by model.n_head (4)"));
  EXPECT_TRUE(contains(
      parse_error("model:\n  type: llama\n  dim: 256\n  n_head: 8\n  n_kv_head: 3\n").what(),
      "model.n_head (8) must be divisible by model.n_kv_head (3)"));
  EXPECT_TRUE(contains(parse_error("model:\n  type: llama\n  dim: 12\n  n_head: 4\n").what(),
                       "must be even"));
  EXPECT_TRUE(contains(parse_error("model:\n  n_positions: 64\n").what(),
                       "data.seq_len (128) exceeds model.n_positions (64)"));
  EXPECT_TRUE(contains(parse_error("data:\n  dataset: my.txt\n  val_split: 0\n").what(),
                       "evaluation needs"));
  EXPECT_TRUE(contains(parse_error("data:\n  val_split: 0.05\n").what(),
                       "data.val_split (0.05) does not apply to the bundled corpus 'sotu'"));
  EXPECT_TRUE(contains(parse_error("fsdp_config:\n  shard_group_size: 2\n").what(),
                       "applies to HYBRID_SHARD and HYBRID_SHARD_ZERO2 only"));
}

TEST(ConfigErrors, ModelKeysOfTheOtherType) {
  const ConfigError e = parse_error("model:\n  type: gpt2\n  dim: 256\n");
  EXPECT_EQ(e.line(), 3);
  EXPECT_TRUE(contains(e.what(), "model.dim: applies to model.type llama only"));
  EXPECT_TRUE(contains(parse_error("model:\n  type: llama\n  n_embd: 64\n").what(),
                       "applies to model.type gpt2 only"));
}

TEST(ConfigErrors, CommandLineOverridesNameTheFlag) {
  EXPECT_EQ(std::string(parse_error("", {{"optim.lr", "abc"}}).what()),
            "--optim.lr: expected a number, got 'abc'");
  EXPECT_EQ(std::string(parse_error("", {{"optim.lrr", "1"}}).what()),
            "--optim.lrr: unknown key; did you mean --optim.lr?");
  const ConfigError range = parse_error("optim:\n  lr: 0.1\n", {{"optim.lr", "-1"}});
  EXPECT_EQ(range.line(), 0);
  EXPECT_EQ(std::string(range.what()), "--optim.lr: must be > 0, got -1");
  EXPECT_TRUE(contains(parse_error("", {{"optim", "1"}}).what(), "is a section"));
}

TEST(ConfigErrors, OneFileSetsASettingOnce) {
  EXPECT_TRUE(contains(parse_error("optim:\n  lr: 0.1\n  lr: 0.2\n").what(),
                       "test.yaml:3: optim.lr: set twice (first at line 2)"));
  EXPECT_TRUE(contains(parse_error("mixed_precision: bf16\ntrain:\n  dtype: fp32\n").what(),
                       "conflicts with mixed_precision (line 1)"));
  // Two spellings that agree are fine.
  EXPECT_EQ(parse("mixed_precision: bf16\ntrain:\n  dtype: bf16\n").mixed_precision,
            DType::kBFloat16);
}

TEST(ConfigErrors, BadYamlAndMissingFiles) {
  const ConfigError yaml = parse_error("optim:\n  lr: [1\n  max_steps: 3\n");
  EXPECT_TRUE(contains(yaml.what(), "invalid YAML"));
  EXPECT_GT(yaml.line(), 1);
  // Bytes that are not UTF-8 (here 0xFF, and an overlong '/'), in the file or in a flag.
  for (const char* bad : {"a\xff"
                          "b",
                          "a\xc0\xaf"
                          "b"}) {
    const ConfigError utf8 =
        parse_error(std::string("optim:\n  lr: 0.1\ntrain:\n  checkpoint_dir: ") + bad);
    EXPECT_EQ(utf8.line(), 4) << utf8.what();
    EXPECT_TRUE(contains(utf8.what(), "not valid UTF-8 text (byte 43)")) << utf8.what();
  }
  EXPECT_EQ(std::string(parse_error("", {{"train.checkpoint_dir", "a\xff"}}).what()),
            "--train.checkpoint_dir: not valid UTF-8 text");
  try {
    fsdp::load_config("/nonexistent/dir/x.yaml");
    ADD_FAILURE() << "no error for a missing file";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "/nonexistent/dir/x.yaml: cannot open"));
  }
}

// model.pretrained goes through the reader the caller gives (the configuration reads no model
// folder itself): without one it is an error naming the key; with one, its settings fill the keys
// left unset, with the reader's file and field as their origin, and contradict a key set to another
// value by name.
TEST(ConfigPretrained, AFolderIsReadByTheReaderGiven) {
  const std::string folder = ::testing::TempDir();
  const std::vector<fsdp::ConfigOverride> o = {{"model.pretrained", folder},
                                               {"data.tokenizer_dir", folder}};
  try {
    fsdp::load_config("", o);
    ADD_FAILURE() << "model.pretrained was taken without a reader";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "model.pretrained: this program reads no model folders"))
        << e.what();
  }
  const fsdp::FolderReader reader = [](const std::string& dir, int64_t) {
    fsdp::FolderSettings s;
    s.file = dir + "/settings.json";
    s.settings["model.n_layer"] = {"3", "layers"};
    return s;
  };
  EXPECT_EQ(fsdp::load_config("", o, {}, reader).model.n_layer, 3);
  std::vector<fsdp::ConfigOverride> other = o;
  other.push_back({"model.n_layer", "5"});
  try {
    fsdp::load_config("", other, {}, reader);
    ADD_FAILURE() << "a contradicting setting was taken";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "model.n_layer = 5 contradicts")) << e.what();
    EXPECT_TRUE(contains(e.what(), "settings.json, whose layers gives 3")) << e.what();
  }
}

// A checkpoint's config read from another folder means the folder its run started in: every path,
// the bundled corpus's folder included (eval of a sotu run from elsewhere once looked for
// ./assets/sotu), while "sotu" stays a name and absolute paths stay as they are.
TEST(ConfigPaths, RelativePathsResolveAgainstTheFolderTheRunStartedIn) {
  TrainConfig c;
  c.data.val_dataset = "/data/val.txt";
  fsdp::resolve_paths(c, "/runs/a");
  EXPECT_EQ(c.data.dataset, "sotu");
  EXPECT_EQ(c.data.sotu_dir, "/runs/a/assets/sotu");
  EXPECT_EQ(c.data.tokenizer_dir, "/runs/a/assets/gpt2");
  EXPECT_EQ(c.data.cache_dir, "/runs/a/build/data-cache");
  EXPECT_EQ(c.data.val_dataset, "/data/val.txt");
}

// A config must be a regular file of bounded size: a folder once meant "no settings" (rc 0), and
// /dev/zero was read until the kernel killed the process. The /dev/zero case comes last, after
// assertions that stop the test on a build that would read it without end.
TEST(ConfigErrors, ConfigIsARegularFileOfBoundedSize) {
  const std::string folder = ::testing::TempDir();
  try {
    fsdp::load_config(folder);
    FAIL() << "a folder was taken as a config";
  } catch (const ConfigError& e) {
    ASSERT_TRUE(contains(e.what(), folder + ": is a folder, not a config file"));
  }
  const std::string big =
      temp_file("big.yaml", "# " + std::string(fsdp::kMaxConfigFileBytes, 'x') + "\n");
  try {
    fsdp::load_config(big);
    FAIL() << "a config larger than the limit was read";
  } catch (const ConfigError& e) {
    ASSERT_TRUE(contains(e.what(), big + ": is larger than 1024 KiB"));
  }
  const std::string fits =
      temp_file("fits.yaml",
                "# " + std::string(fsdp::kMaxConfigFileBytes - 40, 'x') + "\noptim:\n  lr: 0.5\n");
  EXPECT_EQ(fsdp::load_config(fits).optim.lr, 0.5);
  try {
    fsdp::load_config("/dev/zero");
    ADD_FAILURE() << "/dev/zero was taken as a config";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "/dev/zero: is not a regular file"));
  }
}

// train.process_group_timeout: seconds, a millisecond to a week; errors name the key.
TEST(ConfigErrors, ProcessGroupTimeoutIsCheckedAndNamed) {
  EXPECT_EQ(TrainConfig().train.process_group_timeout, 300);
  EXPECT_EQ(parse("train:\n  process_group_timeout: 2.5\n").train.process_group_timeout, 2.5);
  const ConfigError zero = parse_error("train:\n  process_group_timeout: 0\n");
  EXPECT_EQ(std::string(zero.what()),
            "test.yaml:2: train.process_group_timeout: must be in [0.001, 604800] seconds, got 0");
  const ConfigError text = parse_error("", {{"train.process_group_timeout", "5m"}});
  EXPECT_EQ(std::string(text.what()), "--train.process_group_timeout: expected a number, got '5m'");
  const ConfigError huge = parse_error("", {{"train.process_group_timeout", "1e9"}});
  EXPECT_TRUE(contains(huge.what(), "--train.process_group_timeout: must be in"));
}

TEST(ConfigErrors, DeviceIsCheckedAndNamed) {
  EXPECT_EQ(TrainConfig().train.device, fsdp::TrainDevice::kCpu);
  EXPECT_EQ(parse("train:\n  device: cpu\n").train.device, fsdp::TrainDevice::kCpu);
  const ConfigError bad = parse_error("train:\n  device: tpu\n");
  EXPECT_TRUE(contains(bad.what(), "test.yaml:2: train.device")) << bad.what();
  EXPECT_TRUE(contains(bad.what(), "cpu")) << bad.what();
  if (at::globalContext().hasCUDA()) {
    EXPECT_EQ(parse("", {{"device", "cuda"}}).train.device, fsdp::TrainDevice::kCuda);
    EXPECT_EQ(parse("", {{"device", "cuda"}}).sharding_options().device_, "cuda");
  } else {  // --device cuda is the short spelling, and it fails here, naming it and why
    const ConfigError none = parse_error("", {{"device", "cuda"}});
    EXPECT_TRUE(contains(none.what(), "--device: is cuda")) << none.what();
    EXPECT_TRUE(contains(none.what(), "CUDA is not available")) << none.what();
    const ConfigError key = parse_error("train:\n  device: cuda\n");
    EXPECT_TRUE(contains(key.what(), "test.yaml:2: train.device: is cuda")) << key.what();
  }
  // fsdp-plan plans a GPU job from any machine: without the machine's checks it loads anywhere.
  const fsdp::ParsedArgs planned =
      fsdp::parse_train_args({"--device", "cuda"}, fsdp::MachineChecks{/*device_available=*/false});
  EXPECT_EQ(planned.config.train.device, fsdp::TrainDevice::kCuda);
}

// --- not supported ------------------------------------------------------------------------------

TEST(ConfigUnsupported, EachIsAnErrorThatSaysSo) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"mixed_precision: fp8", "fp8 is not supported"},
      {"fsdp_config:\n  fsdp_state_dict_type: LOCAL_STATE_DICT",
       "LOCAL_STATE_DICT is not supported"},
  };
  for (const auto& [text, message] : cases) {
    const ConfigError e = parse_error("num_processes: 2\n" + text + "\n");
    EXPECT_TRUE(contains(e.what(), message)) << e.what();
    EXPECT_EQ(e.line(), text.find('\n') == std::string::npos ? 2 : 3) << text;
  }
  EXPECT_EQ(parse("fsdp_config:\n  fsdp_backward_prefetch: BACKWARD_PRE\n"), TrainConfig{});
}

// CPU offload (PyTorch's CPUOffload(offload_params=True)) reaches ShardingOptions.
TEST(ConfigFsdp, OffloadParamsBecomesAShardingOption) {
  const TrainConfig c = parse("fsdp_config:\n  fsdp_offload_params: true\n");
  EXPECT_TRUE(c.fsdp.offload_params);
  EXPECT_TRUE(c.sharding_options().offload_params_);
  EXPECT_FALSE(TrainConfig{}.sharding_options().offload_params_);
}

// Prefetch, the root's reduction and activation checkpointing reach ShardingOptions.
TEST(ConfigFsdp, PrefetchAndCheckpointingBecomeShardingOptions) {
  const TrainConfig c = parse(
      "fsdp_config:\n  fsdp_backward_prefetch_policy: BACKWARD_POST\n  fsdp_forward_prefetch: "
      "true\n  prefetch_depth: 2\n  limit_all_gathers: 0\n  fsdp_activation_checkpointing: true\n"
      "  split_root_reduction: false\n");
  const fsdp::ShardingOptions o = c.sharding_options();
  EXPECT_EQ(o.backward_prefetch_, fsdp::BackwardPrefetch::kBackwardPost);
  EXPECT_TRUE(o.forward_prefetch_);
  EXPECT_EQ(o.prefetch_depth_, 2);
  EXPECT_EQ(o.limit_all_gathers_, 0);
  EXPECT_FALSE(o.split_root_reduction_);
  EXPECT_TRUE(TrainConfig{}.sharding_options().split_root_reduction_);
  EXPECT_EQ(parse("fsdp_config:\n  root_reduction_chunks: 12\n")
                .sharding_options()
                .root_reduction_chunks_,
            12);
  EXPECT_EQ(TrainConfig{}.sharding_options().root_reduction_chunks_, 0);
  EXPECT_EQ(o.checkpoint_units_, std::vector<std::string>{"*"});
  EXPECT_TRUE(TrainConfig{}.sharding_options().checkpoint_units_.empty());
  EXPECT_TRUE(contains(parse_error("fsdp_config:\n  prefetch_depth: 0\n").what(),
                       "fsdp_config.prefetch_depth"));
  EXPECT_TRUE(contains(parse_error("fsdp_config:\n  limit_all_gathers: -1\n").what(),
                       "fsdp_config.limit_all_gathers"));
  EXPECT_TRUE(contains(parse_error("fsdp_config:\n  root_reduction_chunks: -1\n").what(),
                       "fsdp_config.root_reduction_chunks"));
  EXPECT_TRUE(contains(
      parse_error("fsdp_config:\n  split_root_reduction: false\n  root_reduction_chunks: 2\n")
          .what(),
      "split_root_reduction: false turns off"));
  EXPECT_TRUE(contains(parse_error("fsdp_config:\n  fsdp_auto_wrap_policy: NO_WRAP\n  "
                                   "fsdp_activation_checkpointing: true\n")
                           .what(),
                       "NO_WRAP wraps none"));
  // Every N-th unit: reaches the options; below 1, or without checkpointing on, refused by name.
  EXPECT_EQ(o.checkpoint_every_, 1);
  EXPECT_EQ(parse("fsdp_config:\n  fsdp_activation_checkpointing: true\n"
                  "  activation_checkpointing_every: 3\n")
                .sharding_options()
                .checkpoint_every_,
            3);
  EXPECT_TRUE(contains(parse_error("fsdp_config:\n  fsdp_activation_checkpointing: true\n"
                                   "  activation_checkpointing_every: 0\n")
                           .what(),
                       "fsdp_config.activation_checkpointing_every"));
  EXPECT_TRUE(contains(parse_error("fsdp_config:\n  activation_checkpointing_every: 2\n").what(),
                       "activation checkpointing is off"));
}

TEST(ConfigUnsupported, CodeBuiltConfigsAreCheckedToo) {
  TrainConfig c;
  c.fsdp.prefetch_depth = 0;
  EXPECT_THROW(fsdp::validate_config(c), ConfigError);
  c = TrainConfig{};
  c.grad_scaler.backoff_factor = 0;
  EXPECT_THROW(fsdp::validate_config(c), ConfigError);
}

// --- every setting: equality, YAML, round trip -------------------------------------------------

// One change per setting key, each away from the default, each valid alone (on a Llama base for
// Llama keys). The test below fails when a key has none, so a new setting must come with one.
struct Change {
  std::function<void(TrainConfig&)> apply;
  bool llama = false;
};
std::map<std::string, Change> changes() {
  return {
      {"mixed_precision", {[](TrainConfig& c) { c.mixed_precision = DType::kBFloat16; }}},
      {"num_processes", {[](TrainConfig& c) { c.num_processes = 4; }}},
      {"num_machines", {[](TrainConfig& c) { c.num_machines = 2; }}},
      {"fsdp_config.fsdp_sharding_strategy",
       {[](TrainConfig& c) { c.fsdp.sharding_strategy = ShardingStrategy::kNoShard; }}},
      {"fsdp_config.fsdp_auto_wrap_policy",
       {[](TrainConfig& c) { c.fsdp.auto_wrap_policy = AutoWrapPolicy::kSizeBased; }}},
      {"fsdp_config.fsdp_transformer_layer_cls_to_wrap", {[](TrainConfig& c) {
         c.fsdp.transformer_layer_cls_to_wrap = {"GPT2Block", "GPT2MLP"};
       }}},
      {"fsdp_config.fsdp_min_num_params", {[](TrainConfig& c) { c.fsdp.min_num_params = 1000; }}},
      {"fsdp_config.fsdp_backward_prefetch",
       {[](TrainConfig& c) { c.fsdp.backward_prefetch = fsdp::BackwardPrefetch::kNoPrefetch; }}},
      {"fsdp_config.fsdp_forward_prefetch",
       {[](TrainConfig& c) { c.fsdp.forward_prefetch = true; }}},
      {"fsdp_config.prefetch_depth", {[](TrainConfig& c) { c.fsdp.prefetch_depth = 3; }}},
      {"fsdp_config.limit_all_gathers", {[](TrainConfig& c) { c.fsdp.limit_all_gathers = 0; }}},
      {"fsdp_config.split_root_reduction",
       {[](TrainConfig& c) { c.fsdp.split_root_reduction = false; }}},
      {"fsdp_config.root_reduction_chunks",
       {[](TrainConfig& c) { c.fsdp.root_reduction_chunks = 4; }}},
      {"fsdp_config.fsdp_offload_params", {[](TrainConfig& c) { c.fsdp.offload_params = true; }}},
      {"fsdp_config.fsdp_activation_checkpointing",
       {[](TrainConfig& c) { c.fsdp.activation_checkpointing = true; }}},
      {"fsdp_config.activation_checkpointing_every", {[](TrainConfig& c) {
         c.fsdp.activation_checkpointing = true;
         c.fsdp.activation_checkpointing_every = 2;
       }}},
      {"fsdp_config.fsdp_state_dict_type",
       {[](TrainConfig& c) { c.fsdp.state_dict_type = fsdp::StateDictType::kFullStateDict; }}},
      {"fsdp_config.fsdp_sync_module_states",
       {[](TrainConfig& c) { c.fsdp.sync_module_states = true; }}},
      {"fsdp_config.fsdp_cpu_ram_efficient_loading",
       {[](TrainConfig& c) { c.fsdp.cpu_ram_efficient_loading = true; }}},
      {"fsdp_config.shard_group_size", {[](TrainConfig& c) { c.fsdp.shard_group_size = 2; }}},
      {"model.type", {[](TrainConfig& c) { c.model.type = ModelType::kLlama; }}},
      {"model.vocab_size", {[](TrainConfig& c) { c.model.vocab_size = 256; }}},
      {"model.n_layer", {[](TrainConfig& c) { c.model.n_layer = 2; }}},
      {"model.n_head", {[](TrainConfig& c) { c.model.n_head = 8; }}},
      {"model.n_positions", {[](TrainConfig& c) { c.model.n_positions = 512; }}},
      {"model.norm_eps", {[](TrainConfig& c) { c.model.norm_eps = 1e-6; }}},
      {"model.attention",
       {[](TrainConfig& c) { c.model.attention = fsdp::AttentionKernel::kExplicit; }}},
      {"model.init_from", {[](TrainConfig& c) { c.model.init_from = "out/model.safetensors"; }}},
      {"model.n_embd", {[](TrainConfig& c) { c.model.n_embd = 64; }}},
      {"model.dim", {[](TrainConfig& c) { c.model.dim = 256; }, true}},
      {"model.n_kv_head", {[](TrainConfig& c) { c.model.n_kv_head = 2; }, true}},
      {"model.intermediate_size", {[](TrainConfig& c) { c.model.intermediate_size = 500; }, true}},
      {"model.rope_theta", {[](TrainConfig& c) { c.model.rope_theta = 500000; }, true}},
      {"model.tie_embeddings", {[](TrainConfig& c) { c.model.tie_embeddings = true; }, true}},
      {"model.pretrained", {[](TrainConfig& c) { c.model.pretrained = "/models/my llama"; }}},
      {"model.adapter", {[](TrainConfig& c) { c.model.adapter = "/adapters/my run"; }}},
      {"fsdp_config.fsdp_version", {[](TrainConfig& c) { c.fsdp.version = 2; }}},
      {"parallelism_config.parallelism_config_dp_shard_size",
       {[](TrainConfig& c) { c.fsdp.dp_shard_size = 4; }}},
      {"parallelism_config.parallelism_config_dp_replicate_size",
       {[](TrainConfig& c) { c.fsdp.dp_replicate_size = 1; }}},
      {"model.head_dim", {[](TrainConfig& c) { c.model.head_dim = 64; }, true}},
      {"model.qkv_bias", {[](TrainConfig& c) { c.model.qkv_bias = true; }, true}},
      {"model.o_bias", {[](TrainConfig& c) { c.model.o_bias = true; }, true}},
      {"model.mlp_bias", {[](TrainConfig& c) { c.model.mlp_bias = true; }, true}},
      {"model.rope_scaling", {[](TrainConfig& c) { c.model.rope_scaling = "llama3"; }, true}},
      {"model.rope_factor", {[](TrainConfig& c) { c.model.rope_factor = 8; }, true}},
      {"model.rope_low_freq_factor",
       {[](TrainConfig& c) { c.model.rope_low_freq_factor = 0.5; }, true}},
      {"model.rope_high_freq_factor",
       {[](TrainConfig& c) { c.model.rope_high_freq_factor = 2; }, true}},
      {"model.rope_original_max_positions",
       {[](TrainConfig& c) { c.model.rope_original_max_positions = 4096; }, true}},
      {"model.qk_norm", {[](TrainConfig& c) { c.model.qk_norm = true; }, true}},
      {"model.rope_short_factor",
       {[](TrainConfig& c) {
          c.model.rope_short_factor = {1, 1.25};
        },
        true}},
      {"model.rope_long_factor",
       {[](TrainConfig& c) {
          c.model.rope_long_factor = {2, 0.1 + 0.2};
        },
        true}},
      {"model.rope_attention_factor",
       {[](TrainConfig& c) { c.model.rope_attention_factor = 1.19; }, true}},
      {"model.partial_rotary_factor",
       {[](TrainConfig& c) { c.model.partial_rotary_factor = 0.75; }, true}},
      {"model.fused_projections", {[](TrainConfig& c) { c.model.fused_projections = true; }, true}},
      {"model.norm_offset", {[](TrainConfig& c) { c.model.norm_offset = true; }, true}},
      {"model.sandwich_norms", {[](TrainConfig& c) { c.model.sandwich_norms = true; }, true}},
      {"model.embedding_scale", {[](TrainConfig& c) { c.model.embedding_scale = 8; }, true}},
      {"model.activation", {[](TrainConfig& c) { c.model.activation = "gelu_tanh"; }, true}},
      {"model.attention_scale", {[](TrainConfig& c) { c.model.attention_scale = 0.0625; }, true}},
      {"model.fused_ops", {[](TrainConfig& c) { c.model.fused_ops = false; }, true}},
      {"model.sliding_layers",
       {[](TrainConfig& c) {
          c.model.sliding_layers = {0, 2};
        },
        true}},
      {"model.sliding_window", {[](TrainConfig& c) { c.model.sliding_window = 512; }, true}},
      {"model.local_rope_theta", {[](TrainConfig& c) { c.model.local_rope_theta = 1e5; }, true}},
      {"model.nope_layers",
       {[](TrainConfig& c) {
          c.model.nope_layers = {1, 3};
        },
        true}},
      {"data.dataset", {[](TrainConfig& c) { c.data.dataset = "my corpus: v2.txt"; }}},
      {"data.val_dataset", {[](TrainConfig& c) { c.data.val_dataset = "val.bin"; }}},
      {"data.val_split", {[](TrainConfig& c) {
         c.data.dataset = "my.txt";  // the bundled corpus splits by year instead
         c.data.val_split = 0.05;
       }}},
      {"data.seq_len", {[](TrainConfig& c) { c.data.seq_len = 64; }}},
      {"data.tokenizer_dir", {[](TrainConfig& c) { c.data.tokenizer_dir = "/opt/gpt2"; }}},
      {"data.cache_dir", {[](TrainConfig& c) { c.data.cache_dir = "123"; }}},
      {"data.sotu_dir", {[](TrainConfig& c) { c.data.sotu_dir = "/corpora/sotu"; }}},
      {"data.format",
       {[](TrainConfig& c) { c.data.format = fsdp::data::DataFormat::kPromptCompletion; }}},
      {"data.train_on",
       {[](TrainConfig& c) { c.data.train_on = fsdp::data::TrainOn::kLastAssistant; }}},
      {"data.packing", {[](TrainConfig& c) { c.data.packing = false; }}},
      {"data.cross_example_attention",
       {[](TrainConfig& c) { c.data.cross_example_attention = true; }}},
      {"data.truncate", {[](TrainConfig& c) { c.data.truncate = true; }}},
      {"optim.lr", {[](TrainConfig& c) { c.optim.lr = 3e-4; }}},
      {"optim.min_lr", {[](TrainConfig& c) { c.optim.min_lr = 0; }}},
      {"optim.warmup_steps", {[](TrainConfig& c) { c.optim.warmup_steps = 0; }}},
      {"optim.max_steps", {[](TrainConfig& c) { c.optim.max_steps = 1000; }}},
      {"optim.weight_decay", {[](TrainConfig& c) { c.optim.weight_decay = 0; }}},
      {"optim.beta1", {[](TrainConfig& c) { c.optim.beta1 = 0.8; }}},
      {"optim.beta2", {[](TrainConfig& c) { c.optim.beta2 = 0.999; }}},
      {"optim.eps", {[](TrainConfig& c) { c.optim.eps = 1e-6; }}},
      {"optim.grad_clip", {[](TrainConfig& c) { c.optim.grad_clip = 0; }}},
      {"optim.fused", {[](TrainConfig& c) { c.optim.fused = fsdp::FusedOptimizer::kOff; }}},
      {"grad_scaler.init_scale", {[](TrainConfig& c) { c.grad_scaler.init_scale = 1024; }}},
      {"grad_scaler.growth_factor", {[](TrainConfig& c) { c.grad_scaler.growth_factor = 1.5; }}},
      {"grad_scaler.backoff_factor", {[](TrainConfig& c) { c.grad_scaler.backoff_factor = 0.25; }}},
      {"grad_scaler.growth_interval",
       {[](TrainConfig& c) { c.grad_scaler.growth_interval = 100; }}},
      {"grad_scaler.min_scale", {[](TrainConfig& c) { c.grad_scaler.min_scale = 0.5; }}},
      {"train.micro_batch_size", {[](TrainConfig& c) { c.train.micro_batch_size = 16; }}},
      {"train.gradient_accumulation_steps",
       {[](TrainConfig& c) { c.train.gradient_accumulation_steps = 4; }}},
      {"train.seed", {[](TrainConfig& c) { c.train.seed = 0; }}},
      {"train.eval_every", {[](TrainConfig& c) { c.train.eval_every = 0; }}},
      {"train.eval_batches", {[](TrainConfig& c) { c.train.eval_batches = 1; }}},
      {"train.log_every", {[](TrainConfig& c) { c.train.log_every = 1; }}},
      {"train.checkpoint_dir", {[](TrainConfig& c) { c.train.checkpoint_dir = "/tmp/ck #1"; }}},
      {"train.checkpoint_every", {[](TrainConfig& c) { c.train.checkpoint_every = 0; }}},
      {"train.checkpoint_keep_last", {[](TrainConfig& c) { c.train.checkpoint_keep_last = 3; }}},
      {"train.resume", {[](TrainConfig& c) { c.train.resume = "no"; }}},  // a path named "no"
      {"train.metrics_file", {[](TrainConfig& c) { c.train.metrics_file = "m.jsonl"; }}},
      {"train.fused_loss", {[](TrainConfig& c) { c.train.fused_loss = false; }}},
      {"train.export_dir", {[](TrainConfig& c) { c.train.export_dir = "out/my model"; }}},
      {"lora.target_modules", {[](TrainConfig& c) {
         c.lora.target_modules = {"q_proj", "v_proj"};
         c.model.init_from = "base.safetensors";
       }}},
      {"lora.r", {[](TrainConfig& c) { c.lora.r = 16; }}},
      {"lora.alpha", {[](TrainConfig& c) { c.lora.alpha = 32; }}},
      {"lora.dropout", {[](TrainConfig& c) { c.lora.dropout = 0.05; }}},
      {"lora.use_rslora", {[](TrainConfig& c) { c.lora.use_rslora = true; }}},
      {"lora.modules_to_save", {[](TrainConfig& c) {
         c.lora.modules_to_save = {"lm_head"};
         c.lora.target_modules = {"all-linear"};
         c.model.init_from = "base.safetensors";
       }}},
      {"train.freeze",  // frozen weights are the ones a run starts from: init_from names them
       {[](TrainConfig& c) {
         c.train.freeze = {"transformer.wte.weight", "transformer.h.0.*"};
         c.model.init_from = "base.safetensors";
       }}},
      {"train.num_threads", {[](TrainConfig& c) { c.train.num_threads = 0; }}},
      {"train.process_group_timeout",
       {[](TrainConfig& c) { c.train.process_group_timeout = 2.5; }}},
      {"train.device", {[](TrainConfig& c) { c.train.device = fsdp::TrainDevice::kCuda; }}},
  };
}

TrainConfig base_for(const Change& change) {
  TrainConfig c;
  if (change.llama) c.model.type = ModelType::kLlama;
  return c;
}

TEST(ConfigEverySetting, HasAChangeInThisTest) {
  std::set<std::string> settings, changed;
  for (const ConfigKey& k : fsdp::config_keys()) {
    if (k.kind == ConfigKey::Kind::kSetting) settings.insert(k.key);
  }
  for (const auto& entry : changes()) changed.insert(entry.first);
  EXPECT_EQ(settings, changed);
}

// operator== and to_yaml both see every setting.
TEST(ConfigEverySetting, ChangesEqualityAndYaml) {
  for (const auto& [key, change] : changes()) {
    const TrainConfig base = base_for(change);
    TrainConfig changed = base;
    change.apply(changed);
    EXPECT_NE(changed, base) << key;
    EXPECT_NE(fsdp::to_yaml(changed), fsdp::to_yaml(base)) << key;
  }
}

void expect_round_trip(const TrainConfig& c, const std::string& what) {
  const std::string yaml = fsdp::to_yaml(c);
  TrainConfig back;
  try {
    back = fsdp::parse_config(yaml, what);
  } catch (const ConfigError& e) {
    ADD_FAILURE() << what << ": " << e.what() << "\n" << yaml;
    return;
  }
  EXPECT_EQ(back, c) << what << ":\n" << yaml;
  EXPECT_EQ(fsdp::to_yaml(back), yaml) << what;
}

TEST(ConfigRoundTrip, EachValidChange) {
  expect_round_trip(TrainConfig{}, "defaults");
  for (const auto& [key, change] : changes()) {
    TrainConfig c = base_for(change);
    change.apply(c);
    if (key == "fsdp_config.shard_group_size")
      c.fsdp.sharding_strategy = ShardingStrategy::kHybridShard;
    if (key == "fsdp_config.fsdp_cpu_ram_efficient_loading") c.fsdp.sync_module_states = true;
    try {
      fsdp::validate_config(c);
    } catch (const ConfigError&) {
      continue;  // the unsupported ones: to_yaml still writes them, validation stops them
    }
    expect_round_trip(c, key);
  }
}

TEST(ConfigRoundTrip, EveryConfigFile) {
  const auto files = yaml_files(FSDP_CONFIGS_DIR);
  ASSERT_GE(files.size(), 4u);
  for (const auto& path : files) expect_round_trip(fsdp::load_config(path), path);
}

TEST(ConfigRoundTrip, LlamaConfigsLeaveOutGpt2Keys) {
  TrainConfig c;
  c.model.type = ModelType::kLlama;
  const std::string yaml = fsdp::to_yaml(c);
  EXPECT_TRUE(contains(yaml, "n_kv_head:"));
  EXPECT_EQ(yaml.find("n_embd"), std::string::npos);
  EXPECT_EQ(fsdp::to_yaml(TrainConfig{}).find("n_kv_head"), std::string::npos);
}

// --- the files in configs/ ---------------------------------------------------------------------

TEST(ConfigFiles, EveryFileParses) {
  for (const auto& path : yaml_files(FSDP_CONFIGS_DIR)) {
    EXPECT_NO_THROW(fsdp::load_config(path)) << path;
  }
}

TEST(ConfigFiles, DefaultYamlSpellsOutTheDefaults) {
  TrainConfig expected;
  expected.num_processes = 2;
  EXPECT_EQ(fsdp::load_config(FSDP_CONFIGS_DIR "/default.yaml"), expected);
}

TEST(ConfigFiles, PresetsAreWhatTheyAreNamed) {
  const TrainConfig gpt2 = fsdp::load_config(FSDP_CONFIGS_DIR "/gpt2-124m.yaml");
  EXPECT_EQ(gpt2.model.type, ModelType::kGPT2);
  EXPECT_EQ(gpt2.model.n_layer, 12);
  EXPECT_EQ(gpt2.model.n_head, 12);
  EXPECT_EQ(gpt2.model.n_embd, 768);
  EXPECT_EQ(gpt2.context_length(), 1024);

  const TrainConfig llama = fsdp::load_config(FSDP_CONFIGS_DIR "/llama-small.yaml");
  EXPECT_EQ(llama.model.type, ModelType::kLlama);
  EXPECT_LT(llama.model.kv_heads(), llama.model.n_head);  // grouped-query attention
  EXPECT_EQ(llama.sharding_options().wrap_.module_types,
            std::vector<std::string>{"LlamaDecoderLayer"});
}

// --- help and docs -----------------------------------------------------------------------------

TEST(ConfigHelp, ListsEveryKeyWithItsTypeAndDefault) {
  const std::string help = fsdp::train_usage();
  for (const ConfigKey& k : fsdp::config_keys()) {
    std::string line = "--" + k.key + " " + k.type;
    if (k.kind == ConfigKey::Kind::kSetting) line += "  (default: " + k.default_value + ")";
    EXPECT_TRUE(contains(help, line + "\n"));
  }
  for (const char* flag : {"--config FILE", "--print-config", "--resume[=DIR]", "--help"}) {
    EXPECT_TRUE(contains(help, flag));
  }
}

TEST(ConfigHelp, SampleHelpListsItsFlags) {
  const std::string help = fsdp::train_usage(fsdp::TrainCommand::kSample);
  for (const char* flag : {"--checkpoint DIR", "--prompt TEXT", "--max-new-tokens N",
                           "--temperature T", "--top-k K", "--num-samples N", "--seed S"}) {
    EXPECT_TRUE(contains(help, flag));
  }
  EXPECT_EQ(help.find("--resume"), std::string::npos);
}

TEST(ConfigHelp, DocsListEveryKey) {
  const std::string docs = read(FSDP_DOCS_DIR "/config.md");
  ASSERT_FALSE(docs.empty());
  for (const ConfigKey& k : fsdp::config_keys()) EXPECT_TRUE(contains(docs, "`" + k.key + "`"));
}

// --- the command line --------------------------------------------------------------------------

fsdp::ParsedArgs args(const std::vector<std::string>& a) { return fsdp::parse_train_args(a); }

std::string args_error(const std::vector<std::string>& a) {
  try {
    args(a);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(ConfigArgs, NoArgumentsTrainWithTheDefaults) {
  const fsdp::ParsedArgs p = args({});
  EXPECT_EQ(p.command, fsdp::TrainCommand::kTrain);
  EXPECT_EQ(p.config, TrainConfig{});
  EXPECT_FALSE(p.help);
  EXPECT_FALSE(p.print_config);
}

TEST(ConfigArgs, ConfigFileOverridesAndFlags) {
  const std::string path = temp_file("args.yaml", "optim:\n  lr: 0.01\n  max_steps: 40\n");
  const fsdp::ParsedArgs p =
      args({"train", "--config", path, "--optim.lr", "0.02", "--optim.warmup-steps=5",
            "--print-config", "--fsdp_config.fsdp_sync_module_states", "--optim.min_lr", "0"});
  EXPECT_EQ(p.config_file, path);
  EXPECT_TRUE(p.print_config);
  EXPECT_EQ(p.config.optim.lr, 0.02);
  EXPECT_EQ(p.config.optim.max_steps, 40);
  EXPECT_EQ(p.config.optim.warmup_steps, 5);
  EXPECT_EQ(p.config.optim.min_lr, 0);
  EXPECT_TRUE(p.config.fsdp.sync_module_states);  // a bool key alone
}

TEST(ConfigArgs, ArgvForm) {
  const char* argv[] = {"fsdp-train", "--train.seed", "-0", "--mixed_precision", "bf16"};
  const fsdp::ParsedArgs p = fsdp::parse_train_args(5, argv);
  EXPECT_EQ(p.config.train.seed, 0);
  EXPECT_EQ(p.config.mixed_precision, DType::kBFloat16);
}

TEST(ConfigArgs, Resume) {
  EXPECT_EQ(args({"--resume"}).config.train.resume, "auto");
  EXPECT_EQ(args({"--resume=build/ck/step_00000100"}).config.train.resume,
            "build/ck/step_00000100");
  EXPECT_EQ(args({"--resume", "--train.seed", "3"}).config.train.resume, "auto");
  EXPECT_TRUE(contains(args_error({"sample", "--resume"}), "not a flag of `fsdp-train sample`"));
}

// `--config ""` names no file: an error, not a silent run on the defaults. A number too large
// for an integer says so.
TEST(ConfigArgs, EmptyConfigAndOverflowingNumbersAreNamed) {
  EXPECT_TRUE(contains(args_error({"--config", ""}), "--config: is empty"));
  EXPECT_TRUE(contains(args_error({"--config="}), "--config: is empty"));
  EXPECT_TRUE(
      contains(args_error({"--optim.max_steps", "99999999999999999999"}), "is out of range"));
}

// eval: a subcommand of its own, taking --checkpoint; a folder given as model.pretrained is the
// model when --checkpoint is not.
TEST(ConfigArgs, Eval) {
  const fsdp::ParsedArgs p = args({"eval", "--checkpoint", "ck", "--train.eval_batches", "3"});
  EXPECT_EQ(p.command, fsdp::TrainCommand::kEval);
  EXPECT_EQ(p.eval.checkpoint, "ck");
  EXPECT_EQ(p.config.train.eval_batches, 3);
  EXPECT_EQ(args({"eval"}).eval.checkpoint, TrainConfig{}.train.checkpoint_dir);
  EXPECT_TRUE(contains(args_error({"eval", "--prompt", "x"}), "not a flag of `fsdp-train eval`"));
}

// A metrics file whose folder cannot be made is named by its key, not a raw filesystem error.
TEST(ConfigRunLog, AMetricsFileThatCannotBeWrittenNamesTheKey) {
  std::ostringstream out;
  try {
    fsdp::RunLog log(out, true, false, "/proc/1/no-such-folder/metrics.jsonl", 1);
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(contains(e.what(), "train.metrics_file: cannot create the folder")) << e.what();
  }
}

TEST(ConfigArgs, HelpReadsNothingElse) {
  EXPECT_TRUE(args({"--help"}).help);
  EXPECT_TRUE(args({"--nonsense", "-h"}).help);
  const fsdp::ParsedArgs sample = args({"sample", "--help"});
  EXPECT_TRUE(sample.help);
  EXPECT_EQ(sample.command, fsdp::TrainCommand::kSample);
}

TEST(ConfigArgs, Sample) {
  const fsdp::ParsedArgs p =
      args({"sample", "--checkpoint",     "ck",  "--prompt",        "--- Hello", "--prompt",
            "",       "--max-new-tokens", "5",   "--temperature",   "0",         "--top_k",
            "3",      "--top-p",          "0.9", "--do-sample",     "yes",       "--num-samples",
            "2",      "--seed",           "9",   "--model.n_layer", "2"});
  EXPECT_EQ(p.command, fsdp::TrainCommand::kSample);
  EXPECT_EQ(p.sample.checkpoint, "ck");
  EXPECT_EQ(p.sample.prompts, (std::vector<std::string>{"--- Hello", ""}));
  EXPECT_EQ(p.sample.max_new_tokens, 5);
  EXPECT_EQ(p.sample.temperature, 0);
  EXPECT_EQ(p.sample.top_k, 3);
  EXPECT_EQ(p.sample.top_p, 0.9);
  EXPECT_EQ(p.sample.do_sample, true);
  // Unset, they come from the model folder's generation_config.json (or our defaults).
  const fsdp::ParsedArgs bare = args({"sample"});
  EXPECT_FALSE(bare.sample.temperature || bare.sample.top_k || bare.sample.top_p ||
               bare.sample.do_sample || bare.sample.max_new_tokens);
  EXPECT_EQ(p.sample.num_samples, 2);
  EXPECT_EQ(p.sample.seed, 9);
  EXPECT_EQ(p.config.model.n_layer, 2);

  const fsdp::ParsedArgs defaults = args({"sample", "--train.checkpoint_dir", "runs/a"});
  EXPECT_EQ(defaults.sample.checkpoint, "runs/a");  // the training run's checkpoints
  EXPECT_EQ(defaults.sample.max_new_tokens, fsdp::SampleOptions{}.max_new_tokens);
}

TEST(ConfigArgs, Errors) {
  EXPECT_EQ(args_error({"--optim.lr"}), "--optim.lr: needs a value (number)");
  EXPECT_EQ(args_error({"--confg", "x.yaml"}), "--confg: unknown option; did you mean --config?");
  EXPECT_EQ(args_error({"--optim.lrr", "1"}),
            "--optim.lrr: unknown option; did you mean --optim.lr?");
  EXPECT_TRUE(
      contains(args_error({"--prompt", "x"}), "--prompt: is not a flag of `fsdp-train train`"));
  EXPECT_TRUE(contains(args_error({"stray"}), "stray: unexpected argument"));
  EXPECT_EQ(args_error({"sample", "--top-k", "-1"}), "--top-k: -1 is out of range [0, 2147483647]");
  EXPECT_EQ(args_error({"sample", "--temperature", "hot"}), "--temperature: 'hot' is not a number");
  EXPECT_TRUE(contains(args_error({"sample", "--top-p", "0"}), "--top-p: must be above 0"));
  EXPECT_TRUE(contains(args_error({"sample", "--top-p", "1.5"}), "--top-p"));
  EXPECT_TRUE(contains(args_error({"sample", "--do-sample", "maybe"}), "--do-sample"));
}

// Every numeric flag goes through one checked parser with a range: trailing text is not dropped,
// and a number past the range is refused rather than wrapped; each error names the flag.
TEST(ConfigArgs, NumbersAreWholeAndInRange) {
  EXPECT_EQ(args_error({"sample", "--max-new-tokens", "3abc"}),
            "--max-new-tokens: '3abc' is not an integer");
  EXPECT_EQ(args_error({"sample", "--num-samples", "99999999999"}),
            "--num-samples: 99999999999 is out of range [1, 1048576]");
  EXPECT_EQ(args_error({"sample", "--top-k", "1e3"}), "--top-k: '1e3' is not an integer");
  EXPECT_EQ(args_error({"sample", "--seed", "99999999999999999999"}),
            "--seed: 99999999999999999999 is out of range [0, 9223372036854775807]");
  EXPECT_EQ(args_error({"sample", "--temperature", "0x10"}),
            "--temperature: '0x10' is not a number");
  EXPECT_EQ(args_error({"sample", "--temperature", "inf"}), "--temperature: 'inf' is not a number");
  EXPECT_EQ(args({"sample", "--seed", "99999999999"}).sample.seed, 99999999999);
  EXPECT_TRUE(contains(args_error({"--config", "a.yaml", "--config", "b.yaml"}), "given twice"));
  EXPECT_TRUE(contains(args_error({"--print-config=yes"}), "takes no value"));
  EXPECT_TRUE(contains(args_error({"--optim.lr", "-2"}), "--optim.lr: must be > 0, got -2"));
}

}  // namespace
