// The option table. Adding a key is one row here (and a line in docs/config.md, which a test
// checks); the loader, --help, to_yaml and config_keys() pick it up. Order is --help's order.
#include "config/schema.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <utility>

namespace fsdp {
namespace config {
namespace {

using Kind = ConfigKey::Kind;

// A reference to one field of a TrainConfig, const or not: FIELD(optim.lr).
#define FIELD(path) \
  [](auto& c) -> auto& { return c.path; }

void assign(int64_t& field, int64_t v) { field = v; }
void assign(int& field, int64_t v) {
  if (v < INT_MIN || v > INT_MAX) throw ValueError(std::to_string(v) + " is too large");
  field = static_cast<int>(v);
}

Option setting(const std::string& key, const std::string& type, const std::string& help) {
  Option o;
  o.key = key;
  o.type = type;
  o.help = help;
  o.kind = Kind::kSetting;
  o.targets = {key};
  return o;
}

template <typename Ref>
Option int_setting(const std::string& key, Ref ref, const std::string& help) {
  Option o = setting(key, "int", help);
  o.set = [ref](TrainConfig& c, const RawValue& v) { assign(ref(c), to_int(v)); };
  o.get = [ref](const TrainConfig& c) { return std::to_string(ref(c)); };
  return o;
}

template <typename Ref>
Option number_setting(const std::string& key, Ref ref, const std::string& help) {
  Option o = setting(key, "number", help);
  o.set = [ref](TrainConfig& c, const RawValue& v) { ref(c) = to_number(v); };
  o.get = [ref](const TrainConfig& c) { return format_number(ref(c)); };
  return o;
}

template <typename Ref>
Option bool_setting(const std::string& key, Ref ref, const std::string& help) {
  Option o = setting(key, "bool", help);
  o.set = [ref](TrainConfig& c, const RawValue& v) { ref(c) = to_bool(v); };
  o.get = [ref](const TrainConfig& c) { return std::string(ref(c) ? "true" : "false"); };
  return o;
}

template <typename Ref>
Option string_setting(const std::string& key, Ref ref, const std::string& help) {
  Option o = setting(key, "string", help);
  o.set = [ref](TrainConfig& c, const RawValue& v) { ref(c) = to_text(v); };
  o.get = [ref](const TrainConfig& c) { return ref(c); };
  return o;
}

template <typename Ref>
Option list_setting(const std::string& key, Ref ref, const std::string& help) {
  Option o = setting(key, "list", help);
  o.set = [ref](TrainConfig& c, const RawValue& v) { ref(c) = to_list(v); };
  o.get = [ref](const TrainConfig& c) { return format_list(ref(c)); };
  return o;
}

// A list of numbers ("3,7,11", "1,1.5" or a YAML sequence) of type T (int64_t or double); an
// item that is none is named, and each is written back exactly.
template <typename T, typename Ref>
Option number_list_setting(const std::string& key, Ref ref, const std::string& help) {
  Option o = setting(key, "list", help);
  o.set = [ref](TrainConfig& c, const RawValue& v) {
    std::vector<T> out;
    for (const std::string& item : to_list(v)) {
      const RawValue x = RawValue::scalar(item);
      out.push_back(std::is_integral<T>::value ? static_cast<T>(to_int(x))
                                               : static_cast<T>(to_number(x)));
    }
    ref(c) = out;
  };
  o.get = [ref](const TrainConfig& c) {
    std::vector<std::string> items;
    for (T x : ref(c)) {
      items.push_back(std::is_integral<T>::value ? std::to_string(static_cast<int64_t>(x))
                                                 : format_number(static_cast<double>(x)));
    }
    return format_list(items);
  };
  return o;
}

template <typename E>
using Names = std::vector<std::pair<std::string, E>>;

template <typename E>
std::vector<std::string> names_of(const Names<E>& names) {
  std::vector<std::string> out;
  for (const auto& n : names) out.push_back(n.first);
  return out;
}

template <typename E>
E choose(const Names<E>& names, const RawValue& v) {
  return names[to_choice(v, names_of(names))].second;
}

template <typename E, typename Ref>
Option choice_setting(const std::string& key, Ref ref, Names<E> names, const std::string& help) {
  Option o = setting(key, join(names_of(names), "|"), help);
  o.set = [ref, names](TrainConfig& c, const RawValue& v) { ref(c) = choose(names, v); };
  o.get = [ref, names](const TrainConfig& c) {
    for (const auto& n : names) {
      if (n.second == ref(c)) return n.first;
    }
    return std::string("?");
  };
  return o;
}

Option only_for(ModelType type, Option o) {
  o.type_specific = true;
  o.model_type = type;
  return o;
}

Option alias(const std::string& key, const std::string& type, const std::string& help,
             std::vector<std::string> targets,
             std::function<void(TrainConfig&, const RawValue&)> set) {
  Option o;
  o.key = key;
  o.type = type;
  o.help = help;
  o.kind = Kind::kAlias;
  o.targets = std::move(targets);
  o.set = std::move(set);
  return o;
}

// Accepted for compatibility, stored nowhere; `check` (optional) rejects values that would mean
// something this build does not do.
Option accepted(const std::string& key, const std::string& type, const std::string& help,
                std::function<void(const RawValue&)> check = nullptr) {
  Option o;
  o.key = key;
  o.type = type;
  o.help = help;
  o.kind = Kind::kAccepted;
  o.set = [check](TrainConfig&, const RawValue& v) {
    if (check) check(v);
  };
  return o;
}

bool is_empty(const RawValue& v) {
  switch (v.kind) {
    case RawValue::Kind::kNull:
      return true;
    case RawValue::Kind::kScalar:
      return v.text.empty();
    case RawValue::Kind::kList:
      return v.items.empty();
    case RawValue::Kind::kMap:
      return v.map_size == 0;
  }
  return false;
}

// A section of another launcher's feature: an error unless empty (Accelerate writes `{}`).
Option rejected(const std::string& key, const std::string& help, const std::string& reason) {
  Option o;
  o.key = key;
  o.type = "section";
  o.help = help;
  o.kind = Kind::kRejected;
  o.set = [reason](TrainConfig&, const RawValue& v) {
    if (!is_empty(v)) throw ValueError(reason);
  };
  return o;
}

// Accepted keys' checks.
void check_int(const RawValue& v) {
  if (v.kind != RawValue::Kind::kNull) to_int(v);
}
void check_bool(const RawValue& v) {
  if (v.kind != RawValue::Kind::kNull) to_bool(v);
}
void check_scalar(const RawValue& v) {
  if (v.kind != RawValue::Kind::kNull) to_text(v);
}
std::function<void(const RawValue&)> only_value(std::string expected, std::string reason) {
  return [expected, reason](const RawValue& v) {
    const std::string text = to_text(v);
    if (!same_name(text, expected)) throw ValueError(reason + "; got '" + text + "'");
  };
}

const Names<ModelType> kModelTypes = {{"gpt2", ModelType::kGPT2}, {"llama", ModelType::kLlama}};
const Names<int> kFsdpVersions = {{"1", 1}, {"2", 2}};
const Names<std::string> kRopeScalings = {
    {"none", "none"}, {"linear", "linear"}, {"llama3", "llama3"}, {"longrope", "longrope"}};
const Names<std::string> kActivations = {{"silu", "silu"}, {"gelu_tanh", "gelu_tanh"}};
const Names<AttentionKernel> kAttentionKernels = {{"auto", AttentionKernel::kAuto},
                                                  {"fused", AttentionKernel::kFused},
                                                  {"explicit", AttentionKernel::kExplicit}};
const Names<data::DataFormat> kDataFormats = {
    {"auto", data::DataFormat::kAuto},
    {"text", data::DataFormat::kText},
    {"jsonl_text", data::DataFormat::kJsonlText},
    {"prompt_completion", data::DataFormat::kPromptCompletion},
    {"messages", data::DataFormat::kMessages}};
const Names<data::TrainOn> kTrainOn = {{"assistant", data::TrainOn::kAssistant},
                                       {"last_assistant", data::TrainOn::kLastAssistant},
                                       {"all", data::TrainOn::kAll}};
const Names<FusedOptimizer> kFusedOptimizers = {{"auto", FusedOptimizer::kAuto},
                                                {"true", FusedOptimizer::kOn},
                                                {"false", FusedOptimizer::kOff}};
const Names<TrainDevice> kDevices = {{"cpu", TrainDevice::kCpu}, {"cuda", TrainDevice::kCuda}};
const Names<AutoWrapPolicy> kWrapPolicies = {
    {"TRANSFORMER_BASED_WRAP", AutoWrapPolicy::kTransformerBased},
    {"SIZE_BASED_WRAP", AutoWrapPolicy::kSizeBased},
    {"NO_WRAP", AutoWrapPolicy::kNoWrap}};
const Names<BackwardPrefetch> kPrefetches = {{"BACKWARD_PRE", BackwardPrefetch::kBackwardPre},
                                             {"BACKWARD_POST", BackwardPrefetch::kBackwardPost},
                                             {"NO_PREFETCH", BackwardPrefetch::kNoPrefetch}};
const char* kStrategyType = "FULL_SHARD|SHARD_GRAD_OP|NO_SHARD|HYBRID_SHARD|HYBRID_SHARD_ZERO2|1-5";

ShardingStrategy to_strategy(const RawValue& v) {
  try {
    return parse_sharding_strategy(to_text(v));
  } catch (const std::invalid_argument& e) {
    throw ValueError(e.what());
  }
}

StateDictType to_state_dict_type(const RawValue& v) {
  const size_t i = to_choice(v, {"SHARDED_STATE_DICT", "FULL_STATE_DICT", "LOCAL_STATE_DICT"});
  if (i == 2) {
    throw ValueError(
        "LOCAL_STATE_DICT is not supported: checkpoints are SHARDED_STATE_DICT (loadable at any "
        "world size) or FULL_STATE_DICT");
  }
  return i == 0 ? StateDictType::kShardedStateDict : StateDictType::kFullStateDict;
}

// Accelerate's mixed_precision ("no", "bf16", "fp16") and train.dtype ("fp32", "bf16", "fp16")
// share one setting.
DType to_compute_dtype(const RawValue& v, const std::vector<std::string>& full_names) {
  std::vector<std::string> names = full_names;
  names.insert(names.end(), {"bf16", "fp16", "fp8"});
  const size_t i = to_choice(v, names);
  if (i < full_names.size()) return DType::kFloat32;
  if (names[i] == "bf16") return DType::kBFloat16;
  if (names[i] == "fp16") return DType::kFloat16;
  throw ValueError("fp8 is not supported; use bf16 or fp16");
}

std::string compute_dtype_name(DType d, const char* full) {
  if (d == DType::kFloat32) return full;
  return dtype_name(d);  // "bf16", "fp16"
}

Option mixed_precision_option() {
  Option o = setting("mixed_precision", "no|bf16|fp16",
                     "compute dtype of gathered parameters and gradient reduction; master weights "
                     "and optimizer state stay fp32; fp16 scales the loss (grad_scaler)");
  o.set = [](TrainConfig& c, const RawValue& v) {
    c.mixed_precision = to_compute_dtype(v, {"no", "false"});
  };
  o.get = [](const TrainConfig& c) { return compute_dtype_name(c.mixed_precision, "no"); };
  return o;
}

Option strategy_option() {
  Option o = setting("fsdp_config.fsdp_sharding_strategy", kStrategyType,
                     "what is sharded: FULL_SHARD (parameters, gradients, optimizer state), "
                     "SHARD_GRAD_OP (parameters stay gathered through backward), NO_SHARD (DDP), "
                     "HYBRID_SHARD[_ZERO2] (shard within groups of shard_group_size, replicate "
                     "across)");
  o.set = [](TrainConfig& c, const RawValue& v) { c.fsdp.sharding_strategy = to_strategy(v); };
  o.get = [](const TrainConfig& c) { return std::string(to_string(c.fsdp.sharding_strategy)); };
  return o;
}

std::vector<Option> accelerate_top_level() {
  const std::string launcher = "accepted; the launcher's business (fsdp-run ";
  return {
      accepted("compute_environment", "LOCAL_MACHINE", "accepted when LOCAL_MACHINE",
               only_value("LOCAL_MACHINE",
                          "only LOCAL_MACHINE is supported: fsdp.cpp runs on the machines "
                          "fsdp-run starts it on")),
      accepted("distributed_type", "FSDP", "accepted when FSDP",
               only_value("FSDP",
                          "fsdp.cpp trains with FSDP only: distributed_type must be FSDP (or left "
                          "out)")),
      mixed_precision_option(),
      int_setting("num_processes", FIELD(num_processes),
                  "ranks the run expects, all machines together; the trainer checks the launcher "
                  "started that many; 0: as many as were started"),
      int_setting("num_machines", FIELD(num_machines), "nodes the run expects"),
      accepted("machine_rank", "int", launcher + "--node-rank)", check_int),
      accepted("main_process_ip", "string", launcher + "--master-addr)", check_scalar),
      accepted("main_process_port", "int", launcher + "--master-port)", check_int),
      accepted("rdzv_backend", "string", launcher + "rendezvous is static)", check_scalar),
      accepted("same_network", "bool", "accepted; no effect", check_bool),
      accepted("main_training_function", "string", "accepted; no effect (C++ has main)",
               check_scalar),
      accepted("use_cpu", "bool", "accepted; train.device chooses the device (default cpu)",
               check_bool),
      accepted("debug", "bool", "accepted; no effect", check_bool),
      accepted("downcast_bf16", "string", "accepted; TPU only, no effect", check_scalar),
      accepted("gpu_ids", "string", "accepted; no effect on CPU", check_scalar),
      accepted("enable_cpu_affinity", "bool", "accepted; no effect (NVIDIA only)", check_bool),
      accepted("tpu_env", "list", "accepted; TPU only, no effect"),
      accepted("tpu_use_cluster", "bool", "accepted; TPU only, no effect", check_bool),
      accepted("tpu_use_sudo", "bool", "accepted; TPU only, no effect", check_bool),
      accepted("tpu_name", "string", "accepted; TPU only, no effect"),
      accepted("tpu_zone", "string", "accepted; TPU only, no effect"),
      accepted("tpu_vm", "list", "accepted; TPU only, no effect"),
      accepted("commands", "list", "accepted; TPU only, no effect"),
      accepted("command_file", "string", "accepted; TPU only, no effect"),
  };
}

std::vector<Option> fsdp_section() {
  const std::string p = "fsdp_config.";
  return {
      strategy_option(),
      alias(p + "fsdp_reshard_after_forward", "bool|" + std::string(kStrategyType),
            "Accelerate's newer spelling: true is FULL_SHARD, false SHARD_GRAD_OP, or a strategy "
            "name",
            {p + "fsdp_sharding_strategy"},
            [](TrainConfig& c, const RawValue& v) {
              try {
                c.fsdp.sharding_strategy =
                    to_bool(v) ? ShardingStrategy::kFullShard : ShardingStrategy::kShardGradOp;
              } catch (const ValueError&) {
                try {
                  c.fsdp.sharding_strategy = to_strategy(v);
                } catch (const ValueError&) {
                  throw ValueError("expected true, false or a sharding strategy (" +
                                   std::string(kStrategyType) + "), got " + describe(v));
                }
              }
            }),
      choice_setting(p + "fsdp_auto_wrap_policy", FIELD(fsdp.auto_wrap_policy), kWrapPolicies,
                     "which modules become FSDP units: the layer classes below, every module "
                     "reaching fsdp_min_num_params, or none (the whole model is one unit)"),
      list_setting(p + "fsdp_transformer_layer_cls_to_wrap",
                   FIELD(fsdp.transformer_layer_cls_to_wrap),
                   "comma-separated class names for TRANSFORMER_BASED_WRAP (GPT2Block, "
                   "LlamaDecoderLayer, ...); empty: the model type's block class"),
      int_setting(p + "fsdp_min_num_params", FIELD(fsdp.min_num_params),
                  "SIZE_BASED_WRAP: a module with at least this many parameters not yet in a unit "
                  "becomes one"),
      choice_setting(p + "fsdp_backward_prefetch", FIELD(fsdp.backward_prefetch), kPrefetches,
                     "when backward gathers the next unit: as a unit's backward begins, once "
                     "its gradients are computed, or not ahead of use"),
      alias(p + "fsdp_backward_prefetch_policy", "BACKWARD_PRE|BACKWARD_POST|NO_PREFETCH",
            "Accelerate's older spelling of fsdp_backward_prefetch", {p + "fsdp_backward_prefetch"},
            [](TrainConfig& c, const RawValue& v) {
              c.fsdp.backward_prefetch = choose(kPrefetches, v);
            }),
      bool_setting(p + "fsdp_forward_prefetch", FIELD(fsdp.forward_prefetch),
                   "gather the next unit during this unit's forward"),
      int_setting(p + "prefetch_depth", FIELD(fsdp.prefetch_depth),
                  "units a prefetch gathers ahead, forward and backward (fsdp.cpp's key)"),
      int_setting(p + "limit_all_gathers", FIELD(fsdp.limit_all_gathers),
                  "at most this many units gathered ahead of use; 0: no limit (fsdp.cpp's key)"),
      bool_setting(p + "split_root_reduction", FIELD(fsdp.split_root_reduction),
                   "reduce the root's gradients in two parts: the output head's while the blocks' "
                   "backward runs, the embeddings' at the end as the rows the batch touched "
                   "(fsdp.cpp's key)"),
      int_setting(p + "root_reduction_chunks", FIELD(fsdp.root_reduction_chunks),
                  "pieces the root's early gradients are reduced in, one as each of the first "
                  "blocks' backward begins; 0: the root's size over a block's (fsdp.cpp's key)"),
      bool_setting(p + "fsdp_offload_params", FIELD(fsdp.offload_params),
                   "master shards, gradient shards and optimizer state in host memory; the "
                   "optimizer steps on the CPU"),
      bool_setting(p + "fsdp_activation_checkpointing", FIELD(fsdp.activation_checkpointing),
                   "recompute each unit's activations in backward instead of keeping them"),
      int_setting(p + "activation_checkpointing_every", FIELD(fsdp.activation_checkpointing_every),
                  "with fsdp_activation_checkpointing: only every N-th wrapped unit recomputes, "
                  "the rest keep their activations; 1: every unit (fsdp.cpp's key)"),
      [p] {
        Option o = setting(p + "fsdp_state_dict_type", "SHARDED_STATE_DICT|FULL_STATE_DICT",
                           "checkpoints: one file per rank (loadable at any world size), or the "
                           "full model written by rank 0");
        o.set = [](TrainConfig& c, const RawValue& v) {
          c.fsdp.state_dict_type = to_state_dict_type(v);
        };
        o.get = [](const TrainConfig& c) { return std::string(to_string(c.fsdp.state_dict_type)); };
        return o;
      }(),
      bool_setting(p + "fsdp_sync_module_states", FIELD(fsdp.sync_module_states),
                   "broadcast rank 0's parameters before training (initialisation is already "
                   "identical on every rank)"),
      bool_setting(p + "fsdp_cpu_ram_efficient_loading", FIELD(fsdp.cpu_ram_efficient_loading),
                   "only rank 0 materialises the full model; needs fsdp_sync_module_states"),
      accepted(p + "fsdp_use_orig_params", "bool",
               "accepted, true or false; the model always keeps its original parameters and the "
               "optimizer steps flat shards with a weight-decay mask",
               check_bool),
      choice_setting(p + "fsdp_version", FIELD(fsdp.version), kFsdpVersions,
                     "1 or 2: the same runtime either way (FSDP2 configs set "
                     "fsdp_reshard_after_forward); under 2 fsdp_cpu_ram_efficient_loading needs no "
                     "fsdp_sync_module_states"),
      int_setting(p + "shard_group_size", FIELD(fsdp.shard_group_size),
                  "HYBRID strategies: ranks per shard group, must divide the world size; 0: the "
                  "ranks of one node (fsdp.cpp's key, not Accelerate's)"),
  };
}

// Accelerate 1.14's parallelism_config (FSDP2): data-parallel sizes map to our strategies;
// tensor and context parallelism are refused by name.
std::vector<Option> parallelism_section() {
  const std::string p = "parallelism_config.parallelism_config_";
  auto only_one = [](const char* what) {
    return [what](const RawValue& v) {
      if (v.kind != RawValue::Kind::kNull && to_int(v) > 1) {
        throw ValueError(std::string(what) +
                         " is not supported (fsdp.cpp is data parallel: "
                         "FSDP and HSDP); set it to 1");
      }
    };
  };
  return {
      int_setting(p + "dp_shard_size", FIELD(fsdp.dp_shard_size),
                  "ranks one copy of the model is sharded over; with dp_replicate_size above 1 "
                  "the strategy becomes hybrid with that shard group size; 0: not given"),
      int_setting(p + "dp_replicate_size", FIELD(fsdp.dp_replicate_size),
                  "copies of the sharded model (HYBRID_SHARD's replicas); 0: not given"),
      accepted(p + "tp_size", "int", "1 only: tensor parallelism is not supported",
               only_one("tensor parallelism (tp_size)")),
      accepted(p + "cp_size", "int", "1 only: context parallelism is not supported",
               only_one("context parallelism (cp_size)")),
      accepted(p + "cp_comm_strategy", "string", "accepted; no effect (cp_size is 1)",
               check_scalar),
  };
}

std::vector<Option> model_section() {
  const ModelType gpt2 = ModelType::kGPT2, llama = ModelType::kLlama;
  return {
      choice_setting("model.type", FIELD(model.type), kModelTypes, "architecture"),
      int_setting("model.vocab_size", FIELD(model.vocab_size),
                  "tokens in the vocabulary (GPT-2's BPE, used by both types: 50257)"),
      int_setting("model.n_layer", FIELD(model.n_layer), "transformer blocks"),
      int_setting("model.n_head", FIELD(model.n_head),
                  "attention (query) heads; must divide the width (n_embd or dim)"),
      int_setting("model.n_positions", FIELD(model.n_positions),
                  "longest sequence the model accepts (position or RoPE table); 0: data.seq_len"),
      number_setting("model.norm_eps", FIELD(model.norm_eps),
                     "epsilon of every LayerNorm (GPT-2) or RMSNorm (Llama)"),
      choice_setting("model.attention", FIELD(model.attention), kAttentionKernels,
                     "attention kernel: fused (at::scaled_dot_product_attention, LibTorch 2.x), "
                     "explicit (softmax written out), auto (fused where available)"),
      string_setting("model.init_from", FIELD(model.init_from),
                     "a safetensors file (Hugging Face names) to start a fresh run from instead "
                     "of the seeded initialisation; empty: none"),
      only_for(gpt2,
               int_setting("model.n_embd", FIELD(model.n_embd), "width of the residual stream")),
      only_for(llama, int_setting("model.dim", FIELD(model.dim), "width of the residual stream")),
      only_for(llama, int_setting("model.n_kv_head", FIELD(model.n_kv_head),
                                  "key/value heads (grouped-query attention), must divide "
                                  "n_head; 0: n_head")),
      only_for(llama, int_setting("model.intermediate_size", FIELD(model.intermediate_size),
                                  "hidden width of the SwiGLU feed-forward")),
      only_for(llama,
               number_setting("model.rope_theta", FIELD(model.rope_theta), "RoPE base frequency")),
      only_for(llama, bool_setting("model.tie_embeddings", FIELD(model.tie_embeddings),
                                   "the output projection shares the token embedding "
                                   "(GPT-2 always does)")),
      string_setting("model.pretrained", FIELD(model.pretrained),
                     "a Hugging Face model folder to fine-tune: type, shape, weights and "
                     "tokenizer from it (model.* keys set elsewhere must agree); empty: none"),
      string_setting("model.adapter", FIELD(model.adapter),
                     "a PEFT adapter folder (adapter_config.json, adapter_model.safetensors) to "
                     "read onto model.pretrained: its LoRA settings and weights; empty: none"),
      only_for(llama, int_setting("model.head_dim", FIELD(model.head_dim),
                                  "channels per attention head; 0: dim / n_head")),
      only_for(llama, bool_setting("model.qkv_bias", FIELD(model.qkv_bias),
                                   "biases on the q, k and v projections (Qwen2)")),
      only_for(llama, bool_setting("model.o_bias", FIELD(model.o_bias),
                                   "a bias on the attention's output projection")),
      only_for(llama, bool_setting("model.mlp_bias", FIELD(model.mlp_bias),
                                   "biases on the feed-forward projections")),
      only_for(llama, choice_setting("model.rope_scaling", FIELD(model.rope_scaling), kRopeScalings,
                                     "RoPE frequency scaling")),
      only_for(llama, number_setting("model.rope_factor", FIELD(model.rope_factor),
                                     "rope_scaling linear and llama3: the scaling factor")),
      only_for(llama,
               number_setting("model.rope_low_freq_factor", FIELD(model.rope_low_freq_factor),
                              "rope_scaling llama3: low_freq_factor")),
      only_for(llama,
               number_setting("model.rope_high_freq_factor", FIELD(model.rope_high_freq_factor),
                              "rope_scaling llama3: high_freq_factor")),
      only_for(llama, int_setting("model.rope_original_max_positions",
                                  FIELD(model.rope_original_max_positions),
                                  "rope_scaling llama3: original_max_position_embeddings")),
      only_for(llama, number_list_setting<double>(
                          "model.rope_short_factor", FIELD(model.rope_short_factor),
                          "rope_scaling longrope: short_factor, one per rotated "
                          "channel pair")),
      only_for(llama,
               number_list_setting<double>("model.rope_long_factor", FIELD(model.rope_long_factor),
                                           "rope_scaling longrope: long_factor, for a forward "
                                           "longer than rope_original_max_positions")),
      only_for(llama,
               number_setting("model.rope_attention_factor", FIELD(model.rope_attention_factor),
                              "rope_scaling longrope: cos and sin scaled by it; 0: "
                              "sqrt(1 + ln rope_factor / ln rope_original_max_positions)")),
      only_for(llama,
               number_setting("model.partial_rotary_factor", FIELD(model.partial_rotary_factor),
                              "the fraction of each head's channels RoPE turns (Phi-4-mini)")),
      only_for(llama, bool_setting("model.fused_projections", FIELD(model.fused_projections),
                                   "one qkv_proj and one gate_up_proj (Phi-3)")),
      only_for(llama, bool_setting("model.norm_offset", FIELD(model.norm_offset),
                                   "RMSNorms scale by (1 + weight), from zero (Gemma 3)")),
      only_for(llama, bool_setting("model.sandwich_norms", FIELD(model.sandwich_norms),
                                   "the attention's and the feed-forward's outputs normalised "
                                   "too: four norms a block (Gemma 3)")),
      only_for(llama, number_setting("model.embedding_scale", FIELD(model.embedding_scale),
                                     "embeddings multiplied by it (Gemma 3: sqrt(dim)); 0: not")),
      only_for(llama, choice_setting("model.activation", FIELD(model.activation), kActivations,
                                     "the feed-forward gate's activation")),
      only_for(llama,
               bool_setting("model.fused_ops", FIELD(model.fused_ops),
                            "RMSNorm, the gated activation and RoPE each one autograd node (CUDA "
                            "kernels on a GPU); false: ATen's composite ops")),
      only_for(llama, number_setting("model.attention_scale", FIELD(model.attention_scale),
                                     "attention scores multiplied by it (Gemma 3: "
                                     "query_pre_attn_scalar^-0.5); 0: 1 / sqrt(head_dim)")),
      only_for(llama, number_list_setting<int64_t>(
                          "model.sliding_layers", FIELD(model.sliding_layers),
                          "layers that attend to the last model.sliding_window positions only")),
      only_for(llama, int_setting("model.sliding_window", FIELD(model.sliding_window),
                                  "the window of model.sliding_layers; 0 with none")),
      only_for(llama, number_setting("model.local_rope_theta", FIELD(model.local_rope_theta),
                                     "RoPE base of model.sliding_layers (Gemma 3's "
                                     "rope_local_base_freq); rope_scaling applies to the others")),
      only_for(llama, bool_setting("model.qk_norm", FIELD(model.qk_norm),
                                   "an RMSNorm of each query and key head (Qwen3)")),
      only_for(llama, number_list_setting<int64_t>(
                          "model.nope_layers", FIELD(model.nope_layers),
                          "layers without rotary embeddings, by index (SmolLM3)")),
  };
}

std::vector<Option> data_section() {
  return {
      string_setting("data.dataset", FIELD(data.dataset),
                     "\"sotu\" (the bundled corpus), a text file, a folder of text files, or an "
                     "llm.c .bin token file"),
      string_setting("data.val_dataset", FIELD(data.val_dataset),
                     "held-out data, same kinds as data.dataset; empty: the last val_split of "
                     "data.dataset"),
      number_setting("data.val_split", FIELD(data.val_split),
                     "fraction of data.dataset held out when val_dataset is empty, in [0, 1)"),
      int_setting("data.seq_len", FIELD(data.seq_len), "tokens per training sequence"),
      string_setting("data.tokenizer_dir", FIELD(data.tokenizer_dir),
                     "folder with GPT-2's encoder.json and vocab.bpe"),
      string_setting("data.cache_dir", FIELD(data.cache_dir), "where tokenized corpora are cached"),
      string_setting("data.sotu_dir", FIELD(data.sotu_dir),
                     "the bundled State of the Union texts' folder (data.dataset sotu)"),
      choice_setting("data.format", FIELD(data.format), kDataFormats,
                     "how data.dataset is read: a JSONL file of messages, prompt/completion "
                     "pairs or texts, or plain text; auto: from the file's first line"),
      choice_setting("data.train_on", FIELD(data.train_on), kTrainOn,
                     "the tokens the loss is taken on in prompt_completion and messages data"),
      bool_setting("data.packing", FIELD(data.packing),
                   "JSONL examples packed first-fit into rows of data.seq_len tokens; false: one "
                   "a row, padded"),
      bool_setting("data.cross_example_attention", FIELD(data.cross_example_attention),
                   "packed examples attend to the earlier examples of their row (faster; not "
                   "the same model as training them apart)"),
      bool_setting("data.truncate", FIELD(data.truncate),
                   "an example longer than data.seq_len keeps its first data.seq_len tokens; "
                   "false: refused"),
  };
}

std::vector<Option> optim_section() {
  return {
      number_setting("optim.lr", FIELD(optim.lr), "peak learning rate, reached after warmup"),
      number_setting("optim.min_lr", FIELD(optim.min_lr),
                     "learning rate at the end of the cosine decay, at most optim.lr"),
      int_setting("optim.warmup_steps", FIELD(optim.warmup_steps),
                  "steps of linear warmup, at most optim.max_steps"),
      int_setting("optim.max_steps", FIELD(optim.max_steps),
                  "optimizer steps to train for; the cosine schedule's length"),
      number_setting("optim.weight_decay", FIELD(optim.weight_decay),
                     "AdamW's decoupled weight decay (matrices and embeddings only)"),
      number_setting("optim.beta1", FIELD(optim.beta1), "Adam's first-moment decay, in [0, 1)"),
      number_setting("optim.beta2", FIELD(optim.beta2), "Adam's second-moment decay, in [0, 1)"),
      number_setting("optim.eps", FIELD(optim.eps), "Adam's denominator epsilon"),
      number_setting("optim.grad_clip", FIELD(optim.grad_clip),
                     "clip the global gradient norm to this; 0: no clipping"),
      choice_setting("optim.fused", FIELD(optim.fused), kFusedOptimizers,
                     "AdamW's kernel: auto (fused on the CPU, op by op on a GPU), true (fused "
                     "everywhere: on a GPU ATen's, torch's fused=True), false (op by op)"),
  };
}

// PyTorch's GradScaler arguments, and DeepSpeed's floor.
std::vector<Option> grad_scaler_section() {
  return {
      number_setting("grad_scaler.init_scale", FIELD(grad_scaler.init_scale),
                     "fp16: the loss scale of the first step"),
      number_setting("grad_scaler.growth_factor", FIELD(grad_scaler.growth_factor),
                     "fp16: the scale is multiplied by this after growth_interval good steps"),
      number_setting("grad_scaler.backoff_factor", FIELD(grad_scaler.backoff_factor),
                     "fp16: the scale is multiplied by this after a step with inf/NaN gradients, "
                     "which is skipped on every rank"),
      int_setting("grad_scaler.growth_interval", FIELD(grad_scaler.growth_interval),
                  "fp16: good steps in a row before the scale grows"),
      number_setting("grad_scaler.min_scale", FIELD(grad_scaler.min_scale),
                     "fp16: a backoff below this stops the run (the loss is not finite at any "
                     "scale)"),
  };
}

// PEFT's LoraConfig, its names (lora_alpha as alpha, lora_dropout as dropout).
std::vector<Option> lora_section() {
  return {
      list_setting("lora.target_modules", FIELD(lora.target_modules),
                   "layers that get LoRA adapters (q_proj, v_proj, ..., c_attn, or all-linear); "
                   "set: everything else is frozen; empty: no LoRA"),
      int_setting("lora.r", FIELD(lora.r), "the adapters' rank"),
      number_setting("lora.alpha", FIELD(lora.alpha),
                     "lora_alpha: the adapters' output is scaled by alpha / r"),
      number_setting("lora.dropout", FIELD(lora.dropout),
                     "lora_dropout: dropout on the adapters' input while training"),
      bool_setting("lora.use_rslora", FIELD(lora.use_rslora),
                   "rsLoRA: scale by alpha / sqrt(r) instead of alpha / r"),
      list_setting("lora.modules_to_save", FIELD(lora.modules_to_save),
                   "modules trained in full beside the adapters (a module whose name ends with "
                   "an entry: embed_tokens, lm_head); empty: none"),
  };
}

std::vector<Option> train_section() {
  return {
      int_setting("train.micro_batch_size", FIELD(train.micro_batch_size),
                  "sequences per rank per forward"),
      int_setting("train.gradient_accumulation_steps", FIELD(train.gradient_accumulation_steps),
                  "micro-batches per optimizer step"),
      int_setting("train.seed", FIELD(train.seed),
                  "seed of initialisation and data order (the same on every rank)"),
      int_setting("train.eval_every", FIELD(train.eval_every),
                  "steps between evaluations on the held-out data; 0: never"),
      int_setting("train.eval_batches", FIELD(train.eval_batches),
                  "micro-batches per rank in one evaluation"),
      int_setting("train.log_every", FIELD(train.log_every), "steps between log lines"),
      string_setting("train.checkpoint_dir", FIELD(train.checkpoint_dir),
                     "root folder of the sharded checkpoints"),
      int_setting("train.checkpoint_every", FIELD(train.checkpoint_every),
                  "steps between checkpoints (one more after the last step); 0: none"),
      int_setting("train.checkpoint_keep_last", FIELD(train.checkpoint_keep_last),
                  "complete checkpoints kept, older ones deleted; 0: all"),
      string_setting("train.resume", FIELD(train.resume),
                     "\"\": start fresh; \"auto\": the newest checkpoint in checkpoint_dir if any; "
                     "or a checkpoint's path"),
      string_setting("train.metrics_file", FIELD(train.metrics_file),
                     "append one JSON object per logged step here (JSONL); empty: none"),
      bool_setting("train.fused_loss", FIELD(train.fused_loss),
                   "the head and the cross entropy fused, chunked over tokens: the logits are "
                   "never whole (default true; false: the logits whole, then the loss)"),
      string_setting(
          "train.export_dir", FIELD(train.export_dir),
          "at the end, the last checkpoint as a Hugging Face model folder here "
          "(config.json, weights, tokenizer); needs train.checkpoint_every; empty: none"),
      list_setting("train.freeze", FIELD(train.freeze),
                   "parameters that do not train: glob patterns over the model's (Hugging Face's) "
                   "parameter names, e.g. model.embed_tokens.*,model.layers.0.*; empty: none"),
      int_setting("train.num_threads", FIELD(train.num_threads),
                  "intra-op threads per rank; 0: LibTorch's default"),
      number_setting("train.process_group_timeout", FIELD(train.process_group_timeout),
                     "seconds a rank waits for a collective or the rendezvous before it fails, "
                     "naming the ranks that did not arrive (PyTorch's process group timeout)"),
      choice_setting(
          "train.device", FIELD(train.device), kDevices,
          "where the model trains: cpu, or cuda (the GPU of each rank's LOCAL_RANK under "
          "fsdp-run, over NCCL; one GPU shared under mpirun, over MPI)"),
      alias("device", "cpu|cuda", "another spelling of train.device (fsdp-train --device cuda)",
            {"train.device"},
            [](TrainConfig& c, const RawValue& v) { c.train.device = choose(kDevices, v); }),
      alias("train.dtype", "fp32|bf16|fp16", "another spelling of mixed_precision (fp32 is \"no\")",
            {"mixed_precision"},
            [](TrainConfig& c, const RawValue& v) {
              c.mixed_precision = to_compute_dtype(v, {"fp32", "float32"});
            }),
  };
}

std::vector<Option> torchacc_section() {
  const std::string p = "dist.fsdp.";
  const std::string f = "fsdp_config.";
  return {
      alias(p + "size", "int",
            "TorchAcc: shard over this many ranks, replicate across groups; sets HYBRID_SHARD "
            "with shard_group_size (with the world size, that is FULL_SHARD)",
            {f + "fsdp_sharding_strategy", f + "shard_group_size"},
            [](TrainConfig& c, const RawValue& v) {
              const int64_t size = to_int(v);
              if (size < 1) throw ValueError("must be at least 1, got " + std::to_string(size));
              c.fsdp.sharding_strategy = ShardingStrategy::kHybridShard;
              assign(c.fsdp.shard_group_size, size);
            }),
      alias(p + "wrap_layer_cls", "list",
            "TorchAcc: class names, each module of which becomes a unit (TRANSFORMER_BASED_WRAP); "
            "empty: NO_WRAP",
            {f + "fsdp_auto_wrap_policy", f + "fsdp_transformer_layer_cls_to_wrap"},
            [](TrainConfig& c, const RawValue& v) {
              c.fsdp.transformer_layer_cls_to_wrap = to_list(v);
              c.fsdp.auto_wrap_policy = c.fsdp.transformer_layer_cls_to_wrap.empty()
                                            ? AutoWrapPolicy::kNoWrap
                                            : AutoWrapPolicy::kTransformerBased;
            }),
      accepted(p + "flatten_parameters", "bool", "TorchAcc: accepted when true (units are flat)",
               [](const RawValue& v) {
                 if (!to_bool(v)) {
                   throw ValueError(
                       "false is not supported: every unit's parameters are flattened into one "
                       "buffer (original parameters are views into it)");
                 }
               }),
      alias(p + "sync_module_states", "bool", "TorchAcc: fsdp_config.fsdp_sync_module_states",
            {f + "fsdp_sync_module_states"},
            [](TrainConfig& c, const RawValue& v) { c.fsdp.sync_module_states = to_bool(v); }),
  };
}

std::vector<Option> foreign_sections() {
  const std::string dynamo = "accepted; no effect (dynamo_backend must be NO or EAGER)";
  return {
      accepted("dynamo_config.dynamo_backend", "NO|EAGER",
               "accepted when NO or EAGER (torch.compile does not exist for LibTorch C++)",
               [](const RawValue& v) {
                 const std::string backend = to_text(v);
                 if (!same_name(backend, "NO") && !same_name(backend, "EAGER")) {
                   throw ValueError(
                       "torch.compile (dynamo) is not available to LibTorch C++ "
                       "programs; use NO (got '" +
                       backend + "')");
                 }
               }),
      accepted("dynamo_config.dynamo_mode", "string", dynamo),
      accepted("dynamo_config.dynamo_use_fullgraph", "bool", dynamo),
      accepted("dynamo_config.dynamo_use_dynamic", "bool", dynamo),
      accepted("dynamo_config.dynamo_use_regional_compilation", "bool", dynamo),
      rejected("deepspeed_config", "an error unless empty: DeepSpeed is not supported",
               "DeepSpeed is not supported: fsdp.cpp is its own ZeRO-3 (use fsdp_config)"),
      rejected("megatron_lm_config", "an error unless empty: Megatron-LM is not supported",
               "Megatron-LM (tensor and pipeline parallelism) is not supported"),
      rejected("tp_config", "an error unless empty: tensor parallelism is not supported",
               "tensor parallelism is not supported"),
      rejected("fp8_config", "an error unless empty: fp8 is not supported",
               "fp8 training is not supported on CPU"),
      rejected("ipex_config", "an error unless empty: IPEX is not used",
               "Intel Extension for PyTorch is not used by fsdp.cpp"),
      rejected("mpirun_config", "an error unless empty: use fsdp-run --backend mpi",
               "mpirun settings belong to the launcher: fsdp-run --backend mpi"),
  };
}

#undef FIELD

std::vector<Option> build_options() {
  std::vector<Option> all;
  for (auto part : {accelerate_top_level(), fsdp_section(), parallelism_section(), model_section(),
                    data_section(), optim_section(), grad_scaler_section(), lora_section(),
                    train_section(), torchacc_section(), foreign_sections()}) {
    for (auto& o : part) all.push_back(std::move(o));
  }
  return all;
}

std::string parent_of(const std::string& key) {
  const size_t dot = key.rfind('.');
  return dot == std::string::npos ? "" : key.substr(0, dot);
}

std::string leaf_of(const std::string& key) { return key.substr(key.rfind('.') + 1); }

std::vector<std::string> sections() {
  std::vector<std::string> out;
  for (const auto& o : options()) {
    for (std::string s = parent_of(o.key); !s.empty(); s = parent_of(s)) {
      if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
    }
  }
  return out;
}

}  // namespace

const std::vector<Option>& options() {
  static const std::vector<Option> all = build_options();
  return all;
}

const Option* find_option(const std::string& key) {
  for (const auto& o : options()) {
    if (o.key == key) return &o;
  }
  return nullptr;
}

bool is_section(const std::string& key) {
  static const std::vector<std::string> all = sections();
  return std::find(all.begin(), all.end(), key) != all.end();
}

std::string closest_key(const std::string& key, bool want_section) {
  std::vector<std::string> candidates;
  if (want_section) candidates = sections();
  for (const auto& o : options()) {
    if (want_section == (o.kind == ConfigKey::Kind::kRejected)) candidates.push_back(o.key);
  }
  std::string best;
  size_t best_distance = std::max<size_t>(2, leaf_of(key).size() / 3) + 1;
  for (const auto& candidate : candidates) {
    // A known name under the wrong section ("lr" for "optim.lr"), or a longer or shorter form of
    // one ("optimizer" for "optim"), counts as one edit.
    const bool prefix = candidate.rfind(key, 0) == 0 || key.rfind(candidate, 0) == 0;
    const size_t d = std::min({edit_distance(key, candidate),
                               edit_distance(leaf_of(key), leaf_of(candidate)) + 1,
                               prefix ? size_t{1} : SIZE_MAX});
    if (d < best_distance) {
      best = candidate;
      best_distance = d;
    }
  }
  return best;
}

std::vector<std::string> keys_under(const std::string& section) {
  std::vector<std::string> out;
  for (const auto& o : options()) {
    std::string k = o.key;
    while (!k.empty() && parent_of(k) != section) k = parent_of(k);
    if (!k.empty() && std::find(out.begin(), out.end(), leaf_of(k)) == out.end()) {
      out.push_back(leaf_of(k));
    }
  }
  return out;
}

}  // namespace config
}  // namespace fsdp
