// The trainer's configuration: what to train (model, data), how (optimizer, loop) and how to shard
// it (FSDP), as one plain struct with a documented default per field, loaded from YAML files and
// `--key value` command-line overrides.
//
// Precedence: command-line overrides > the YAML file > the defaults below. Keys are dotted paths
// that mirror the YAML nesting: `optim.lr` is `lr:` under `optim:`. Besides our own sections
// (model, data, optim, train) a file may be an Hugging Face Accelerate config as
// `accelerate config` writes it (top-level `distributed_type`, `mixed_precision`,
// `num_processes`, ... and an `fsdp_config:` section), and may use TorchAcc's `dist: fsdp:` names.
// docs/config.md lists every key; `fsdp-train --help` prints the same list, generated from the
// table the parser reads.
//
// A setting this build cannot honour (fp16, a DeepSpeed section, ...) is an error that says so,
// never silently ignored. Keys that only matter to other launchers (Accelerate's
// main_training_function, gpu_ids, tpu_*) are accepted and have no effect; docs/config.md says
// which.
//
// Nothing here reads the environment or touches LibTorch: parsing is pure, so tests and tools call
// it directly, and every failure is one exception type, ConfigError (checkpoint_config, which
// reads a checkpoint's metadata, also throws CheckpointError). A model folder (model.pretrained)
// is read by the FolderReader the caller gives: the configuration knows no format but YAML.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "fsdp/comm.h"
#include "fsdp/data/examples.h"
#include "fsdp/grad_scaler.h"
#include "fsdp/models/attention.h"
#include "fsdp/options.h"

namespace fsdp {

enum class ModelType { kGPT2, kLlama };
const char* to_string(ModelType type);  // "gpt2", "llama"
// The class the transformer blocks of `type` are named after, which TRANSFORMER_BASED_WRAP wraps
// when no class is given: "GPT2Block" or "LlamaDecoderLayer".
const char* block_class_name(ModelType type);
// The transformers class names of this type's block, which a wrap policy may name for it (an
// Accelerate file written for Qwen2 says Qwen2DecoderLayer; our Qwen2 is built from Llama's).
std::vector<std::string> block_class_aliases(ModelType type);

// Architecture. GPT-2 and Llama share the first group; the rest apply to one type only, and
// setting one of those for the other type is an error.
struct ModelConfig {
  ModelType type = ModelType::kGPT2;  // "gpt2" | "llama"
  // Tokens in the vocabulary. Default 50257: GPT-2's BPE, the tokenizer both model types use.
  int64_t vocab_size = 50257;
  int64_t n_layer = 4;  // transformer blocks
  int64_t n_head = 4;   // attention (query) heads; must divide the width (n_embd or dim)
  // Longest sequence the model accepts: GPT-2's learned position table, Llama's RoPE table.
  // Default 0: data.seq_len (see TrainConfig::context_length()).
  int64_t n_positions = 0;
  double norm_eps = 1e-5;  // epsilon of every LayerNorm (GPT-2) or RMSNorm (Llama)
  // The attention kernel, "auto" | "fused" | "explicit" (fsdp/models/attention.h). Default auto:
  // at::scaled_dot_product_attention on LibTorch 2.x, the explicit path on 1.13.
  AttentionKernel attention = AttentionKernel::kAuto;
  // A safetensors file (Hugging Face names, e.g. from fsdp-ckpt consolidate or save_pretrained)
  // whose parameters replace the seeded initialisation of a fresh run; a resumed run takes the
  // checkpoint's instead. With fsdp_cpu_ram_efficient_loading only rank 0 reads it. Default empty.
  std::string init_from;
  // A Hugging Face model folder (config.json, model.safetensors or an index with its shards,
  // tokenizer files), as save_pretrained writes it: the model's type and shape come from its
  // config.json (a model.* key set elsewhere must agree with it), its weights replace the seeded
  // initialisation of a fresh run, and its tokenizer becomes data.tokenizer_dir unless that is
  // set. hf/folder.h maps the names. Default empty.
  std::string pretrained;
  // A PEFT adapter folder (adapter_config.json, adapter_model.safetensors) as save_pretrained
  // writes it, to read onto model.pretrained: its LoRA settings become lora.* (a lora.* key set
  // elsewhere must agree), its weights the adapters' (and the modules to save) initial values, to
  // continue training them, eval or sample. Its base_model_name_or_path gives model.pretrained
  // when that is unset and it names a folder here (and must be that folder when both do).
  // Default empty.
  std::string adapter;
  // The weights a run starts from (and its frozen parameters come from): init_from, else
  // pretrained; empty when neither is set.
  const std::string& start_weights() const { return !init_from.empty() ? init_from : pretrained; }

  // GPT-2 only. Width of the residual stream. Default 128.
  int64_t n_embd = 128;

  // Llama only.
  int64_t dim = 128;      // width of the residual stream
  int64_t n_kv_head = 0;  // key/value heads (grouped-query attention); 0: n_head (plain MHA)
  // Hidden width of the SwiGLU feed-forward. Default 352: about 8/3 of the default dim, rounded up
  // to a multiple of 32; set it together with dim.
  int64_t intermediate_size = 352;
  double rope_theta = 10000.0;  // RoPE base frequency (Llama 2's)
  bool tie_embeddings = false;  // output projection shares the token embedding (HF's default: no)
  int64_t head_dim = 0;         // channels per attention head; 0: dim / n_head
  bool qkv_bias = false;        // biases on the q, k and v projections (Qwen2)
  bool o_bias = false;          // a bias on the output projection (with qkv_bias: attention_bias)
  bool mlp_bias = false;        // biases on the feed-forward projections
  // RoPE frequency scaling: "none", "linear" (every frequency divided by rope_factor), "llama3"
  // (Llama 3.1's: long wavelengths divided by rope_factor, short ones kept, the band between
  // blended; the band's edges are rope_original_max_positions / rope_low_freq_factor and / rope_
  // high_freq_factor) or "longrope" (Phi-3's, below). Defaults: none, 1, 1, 4, 8192 (Llama 3.1's
  // values but the factor).
  std::string rope_scaling = "none";
  double rope_factor = 1.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int64_t rope_original_max_positions = 8192;
  // Phi-3's longrope ("longrope" above): the factors dividing each rotated channel pair's
  // frequency in a forward of at most rope_original_max_positions tokens (short) and beyond (long),
  // and the factor cos and sin are scaled by (0: derived from rope_factor, as transformers does).
  std::vector<double> rope_short_factor, rope_long_factor;
  double rope_attention_factor = 0;
  double partial_rotary_factor = 1.0;  // the fraction of a head's channels RoPE turns (Phi-4-mini)
  bool fused_projections = false;      // Phi-3's qkv_proj and gate_up_proj
  bool qk_norm = false;  // Qwen3's RMSNorm of each query and key head (q_norm, k_norm)
  // Gemma 3 (fsdp/models/llama.h, LlamaConfig): RMSNorms scaled by (1 + weight); four norms a
  // block; embeddings multiplied by embedding_scale (0: not); the gate's activation, "silu" or
  // "gelu_tanh"; scores multiplied by attention_scale (0: 1 / sqrt(head_dim)); sliding_layers
  // attending to the last sliding_window positions with RoPE base local_rope_theta.
  bool norm_offset = false;
  bool sandwich_norms = false;
  double embedding_scale = 0;
  std::string activation = "silu";
  double attention_scale = 0;
  std::vector<int64_t> sliding_layers;
  int64_t sliding_window = 0;
  double local_rope_theta = 10000.0;
  // Layers without rotary embeddings (SmolLM3's NoPE layers), by index. Default none.
  std::vector<int64_t> nope_layers;
  // RMSNorm, the gated activation and the rotary embedding each one autograd node (CUDA kernels
  // on a GPU; fsdp/models/fused_ops.h); false: ATen's composite ops. Default true.
  bool fused_ops = true;

  // The width of the residual stream of this type: n_embd for GPT-2, dim for Llama.
  int64_t width() const { return type == ModelType::kGPT2 ? n_embd : dim; }
  // Key/value heads with the 0 default resolved: n_kv_head, or n_head.
  int64_t kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
};

struct DataConfig {
  // What to train on: "sotu" (the bundled State of the Union corpus), a text file, a folder of
  // text files, or a .bin token file in llm.c's layout. Default "sotu".
  std::string dataset = "sotu";
  // Held-out data for evaluation, same kinds as `dataset`. Default empty: the last `val_split` of
  // `dataset`'s tokens.
  std::string val_dataset;
  // Fraction of `dataset` held out for evaluation when val_dataset is empty, in [0, 1). Default
  // 0.1.
  double val_split = 0.1;
  int64_t seq_len = 128;  // tokens per training sequence. Default 128
  // GPT-2's encoder.json and vocab.bpe (scripts/fetch_assets.sh). Default "assets/gpt2".
  std::string tokenizer_dir = "assets/gpt2";
  // Tokenized corpora are cached here, keyed by their source. Default "build/data-cache".
  std::string cache_dir = "build/data-cache";
  // The bundled corpus's folder (data.dataset sotu; scripts/fetch_assets.sh). Default
  // "assets/sotu": relative, so a checkpoint's eval from another folder finds it where the run
  // started (resolve_paths).
  std::string sotu_dir = "assets/sotu";
  // How data.dataset is read (fsdp/data/examples.h): auto (a JSONL file's first line decides
  // between messages, prompt_completion and jsonl_text; anything else is text), text, jsonl_text,
  // prompt_completion, messages. Default auto.
  data::DataFormat format = data::DataFormat::kAuto;
  // The tokens the loss is taken on in prompt_completion and messages data: assistant (the
  // completion, or every assistant turn), last_assistant, all. Default assistant.
  data::TrainOn train_on = data::TrainOn::kAssistant;
  // JSONL examples packed first-fit into rows of seq_len tokens; false: one example a row,
  // padded. Default true.
  bool packing = true;
  // Packed examples attend to the earlier examples of their row (no mask, positions 0..T-1):
  // faster, but not how they were trained apart. Default false: each example attends to itself.
  bool cross_example_attention = false;
  // An example longer than seq_len keeps its first seq_len tokens; false: refused. Default false.
  bool truncate = false;
};

// AdamW with linear warmup then cosine decay (fsdp::warmup_cosine_lr).
// optim.fused: the kernel that steps AdamW's shards (fsdp/optim.h's AdamWImpl). kAuto: fsdp's fused
// kernel on the CPU, torch::optim::AdamW's operations one by one on a GPU; kOn: fused on every
// device (on a GPU ATen's kernel, torch.optim.AdamW(fused=True)'s: its fp32 1 - beta moves v by
// about 1e-5 relative); kOff: one by one everywhere.
enum class FusedOptimizer { kAuto, kOn, kOff };

struct OptimConfig {
  double lr = 1e-3;           // peak learning rate, reached at the end of warmup
  double min_lr = 1e-4;       // learning rate at max_steps and after
  int64_t warmup_steps = 30;  // steps of linear warmup; at most max_steps
  int64_t max_steps = 300;    // optimizer steps to train for; also the schedule's length
  double weight_decay = 0.1;  // decoupled decay, on matrices and embeddings only
  double beta1 = 0.9;         // Adam's first-moment decay
  double beta2 = 0.95;        // Adam's second-moment decay
  double eps = 1e-8;          // Adam's denominator epsilon
  double grad_clip = 1.0;     // max global gradient norm; 0: no clipping
  FusedOptimizer fused = FusedOptimizer::kAuto;  // AdamW's kernel (above)
};

// The training loop.
enum class TrainDevice { kCpu, kCuda };
// "cpu", "cuda": the names of train.device, of CommOptions::device and of LibTorch's devices.
const char* to_string(TrainDevice device);

struct TrainLoopConfig {
  int64_t micro_batch_size = 4;             // sequences per rank per forward. Default 4
  int64_t gradient_accumulation_steps = 1;  // micro-batches per optimizer step
  int64_t seed = 1337;                      // initialisation and data order, same on every rank
  int64_t eval_every = 50;                  // steps between evaluations; 0: never
  int64_t eval_batches = 10;                // micro-batches per rank in one evaluation
  int64_t log_every = 10;                   // steps between log lines
  std::string checkpoint_dir = "build/checkpoints";  // root of the sharded checkpoints
  int64_t checkpoint_every = 100;  // steps between checkpoints, and one after the last; 0: none
  int checkpoint_keep_last = 0;    // complete checkpoints kept; older ones deleted; 0: all
  // "" (default): start fresh; "auto": the newest checkpoint under checkpoint_dir if there is one;
  // otherwise the path of a checkpoint (a step folder, or a root with `latest`).
  std::string resume;
  std::string metrics_file;  // one JSON object per logged step (JSONL); empty (default): none
  // The head and the cross entropy fused and chunked over tokens (fsdp/models/fused_loss.h): the
  // logits are never whole. Default true; false: the logits [B, T, V], then the loss.
  bool fused_loss = true;
  // At the end of the run, the last checkpoint written as a Hugging Face model folder here
  // (fsdp-ckpt export: config.json, weights, tokenizer), which from_pretrained loads. Needs
  // checkpoint_every > 0; the folder must not exist or be empty. Default empty: none.
  std::string export_dir;
  // Parameters that do not train (partial fine-tuning): glob patterns (`*` any run of characters,
  // `?` one) over the model's parameter names, which are Hugging Face's ("model.embed_tokens.*",
  // "model.layers.0.*", "transformer.wpe.weight"). A frozen parameter keeps no fp32 master, no
  // gradient and no optimizer state, and never changes (FullyShardedModel, frozen parameters). A
  // pattern matching no parameter, or patterns leaving nothing to train, are errors. Default
  // empty: everything trains.
  std::vector<std::string> freeze;
  int num_threads = 1;  // intra-op threads per rank (at::set_num_threads); 0: LibTorch's
  // Seconds a rank waits for a collective (and for the rendezvous) before it gives up and names
  // the ranks that did not arrive: PyTorch's init_process_group(timeout=...). Default 300.
  double process_group_timeout = 300;
  // Where the model trains: kCpu (default) or kCuda, the GPU of the rank's LOCAL_RANK under
  // fsdp-run (NCCL), or the current GPU, shared, under mpirun (MPI through pinned buffers).
  TrainDevice device = TrainDevice::kCpu;
};

// The `lora:` section: LoRA adapters as PEFT's LoraConfig defines them (fsdp/models/lora.h). LoRA
// is on when target_modules is set: adapters are added to the layers it names and everything but
// the adapters and modules_to_save is frozen (no fp32 master, gradient or optimizer state). Needs
// model.pretrained or model.init_from (the base it adapts).
struct LoraConfig {
  // PEFT's target_modules: layer names matched as PEFT matches a list (the name itself or its
  // last components: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, Phi-3's
  // qkv_proj and gate_up_proj, GPT-2's c_attn, c_proj, c_fc), or all-linear (every projection
  // but the output head). Default empty: no LoRA.
  std::vector<std::string> target_modules;
  int64_t r = 8;            // the adapters' rank. Default 8 (PEFT's)
  double alpha = 8;         // lora_alpha; the adapters' output is scaled by alpha / r. Default 8
  double dropout = 0;       // lora_dropout, on the adapters' input while training. Default 0
  bool use_rslora = false;  // rsLoRA: scaling alpha / sqrt(r). Default false
  // Modules trained in full beside the adapters (PEFT's modules_to_save: a module whose name ends
  // with an entry, e.g. embed_tokens, lm_head). Default empty.
  std::vector<std::string> modules_to_save;
  bool enabled() const { return !target_modules.empty(); }
};

// Accelerate's fsdp_config names (without their `fsdp_` prefix).
enum class AutoWrapPolicy { kTransformerBased, kSizeBased, kNoWrap };
enum class StateDictType { kShardedStateDict, kFullStateDict };
const char* to_string(AutoWrapPolicy policy);  // "TRANSFORMER_BASED_WRAP", ...
const char* to_string(StateDictType type);     // "SHARDED_STATE_DICT", ...

// The `fsdp_config:` section. TrainConfig::sharding_options() turns it into the runtime's options.
struct FsdpConfig {
  ShardingStrategy sharding_strategy = ShardingStrategy::kFullShard;
  // Default TRANSFORMER_BASED_WRAP: one unit per transformer block.
  AutoWrapPolicy auto_wrap_policy = AutoWrapPolicy::kTransformerBased;
  // Class names TRANSFORMER_BASED_WRAP wraps, case-sensitive ("GPT2Block", "LlamaDecoderLayer",
  // or a submodule class such as "GPT2MLP"). Default empty: the model type's block class. A name
  // that matches no module is an error when the model is wrapped.
  std::vector<std::string> transformer_layer_cls_to_wrap;
  int64_t min_num_params = 100000000;  // SIZE_BASED_WRAP's threshold. Default 1e8 (Accelerate's)
  // ShardingOptions' prefetch settings. Defaults: BACKWARD_PRE and no forward prefetch (PyTorch's),
  // one unit ahead, at most two units gathered ahead.
  BackwardPrefetch backward_prefetch = BackwardPrefetch::kBackwardPre;
  bool forward_prefetch = false;
  int prefetch_depth = 1;
  int limit_all_gathers = 2;
  // ShardingOptions::split_root_reduction: the root's gradients reduced in two parts, the head's
  // behind the blocks' backward and the embeddings' as the rows a batch touched. Default true.
  bool split_root_reduction = true;
  // ShardingOptions::root_reduction_chunks: the pieces the split's early part goes in, one as each
  // of the first blocks' backward begins. Default 0: the root's size over a block's, rounded up.
  int root_reduction_chunks = 0;
  // Master shards, gradient shards and optimizer state in host memory (ShardingOptions's
  // offload_params). Default false.
  bool offload_params = false;
  // Recompute every wrapped unit's forward in backward (ShardingOptions::checkpoint_units "*").
  // Default false.
  bool activation_checkpointing = false;
  // With activation_checkpointing: only every N-th wrapped unit recomputes (the 1st, the (N+1)-th,
  // ...), the rest keep their activations (ShardingOptions::checkpoint_every; torchtitan's
  // selective per-layer checkpointing). At least 1. Default 1: every unit.
  int activation_checkpointing_every = 1;
  // How checkpoints are written: sharded, one file per rank (default), or full on rank 0.
  StateDictType state_dict_type = StateDictType::kShardedStateDict;
  // Broadcast rank 0's parameters to every rank before training. Default false: initialisation is
  // already identical on every rank (derived from the seed and each parameter's name).
  bool sync_module_states = false;
  // Only rank 0 materialises the full model; the others receive it through sync_module_states,
  // which must then be true. Default false.
  bool cpu_ram_efficient_loading = false;
  // HYBRID strategies: ranks per shard group (ShardingOptions::shard_group_size). Default 0: the
  // ranks of one node. Not an Accelerate key; TorchAcc's dist.fsdp.size sets it.
  int shard_group_size = 0;
  // Accelerate's fsdp_version: 1 or 2. The runtime is the same; under 2, fsdp_cpu_ram_efficient_
  // loading means FSDP2's (rank 0 reads the weights and the others receive them) and needs no
  // fsdp_sync_module_states, which Accelerate 1.14 no longer writes. Default 1.
  int version = 1;
  // Accelerate 1.14's parallelism_config (FSDP2): ranks that hold one copy of the model sharded
  // between them (dp_shard_size) and copies (dp_replicate_size). Replicas above 1 make the strategy
  // hybrid with shard_group_size = dp_shard_size (NO_SHARD when that is 1). Default 0: not given.
  int dp_shard_size = 0;
  int dp_replicate_size = 0;
};

struct TrainConfig {
  ModelConfig model;
  DataConfig data;
  OptimConfig optim;
  TrainLoopConfig train;
  FsdpConfig fsdp;  // YAML: fsdp_config
  LoraConfig lora;

  // Accelerate's top-level keys that matter here.
  // Compute dtype of gathered parameters and gradient reduction: kFloat32 (`mixed_precision: no`,
  // the default), kBFloat16 (`bf16`) or kFloat16 (`fp16`: with dynamic loss scaling, grad_scaler
  // below; on the CPU it needs LibTorch 2.x). Master weights and optimizer state stay fp32.
  DType mixed_precision = DType::kFloat32;
  // The fp16 loss scaler's settings (`grad_scaler:`; PyTorch's GradScaler defaults). Used only
  // when mixed_precision is fp16.
  GradScalerOptions grad_scaler;
  // Ranks the run expects (all machines together); the trainer checks the launcher started that
  // many. Default 0: as many as were started.
  int num_processes = 0;
  int num_machines = 1;  // nodes the run expects. Default 1

  // The runtime's options: strategy, wrap policy (by_type with the layer classes, by_size, or
  // none), param_dtype and reduce_dtype from mixed_precision, shard_group_size.
  ShardingOptions sharding_options() const;
  // Whether parameters do not train: train.freeze, or LoRA (everything but the adapters).
  bool freezes_parameters() const { return !train.freeze.empty() || lora.enabled(); }
  // model.n_positions, or data.seq_len when that is 0.
  int64_t context_length() const {
    return model.n_positions > 0 ? model.n_positions : data.seq_len;
  }
};

bool operator==(const ModelConfig& a, const ModelConfig& b);
bool operator==(const DataConfig& a, const DataConfig& b);
bool operator==(const OptimConfig& a, const OptimConfig& b);
bool operator==(const TrainLoopConfig& a, const TrainLoopConfig& b);
bool operator==(const FsdpConfig& a, const FsdpConfig& b);
bool operator==(const LoraConfig& a, const LoraConfig& b);
bool operator==(const GradScalerOptions& a, const GradScalerOptions& b);
bool operator==(const TrainConfig& a, const TrainConfig& b);
inline bool operator!=(const TrainConfig& a, const TrainConfig& b) { return !(a == b); }

// Every configuration failure: bad YAML, an unknown key, a value of the wrong type or out of
// range, an unsupported setting. what() reads "FILE:LINE: KEY: DETAIL" for a file,
// "--KEY: DETAIL" for a command-line override, and "KEY: DETAIL" for a default.
class ConfigError : public std::runtime_error {
 public:
  ConfigError(std::string source, int line, std::string key, std::string detail);
  const std::string& source() const { return source_; }  // the file; empty otherwise
  int line() const { return line_; }                     // 1-based; 0 when not from a file
  const std::string& key() const { return key_; }        // as written: "optim.lr", "--optim.lr"
  const std::string& detail() const { return detail_; }

 private:
  std::string source_;
  int line_;
  std::string key_;
  std::string detail_;
};

// One command-line override: `--optim.lr 3e-4` is {"optim.lr", "3e-4"}. List values are
// comma-separated ("GPT2Block,GPT2MLP") or in brackets ("[GPT2Block, GPT2MLP]").
struct ConfigOverride {
  std::string key;
  std::string value;
};

// The most a config file may hold; a config file must be a regular file (not a folder or device).
inline constexpr size_t kMaxConfigFileBytes = size_t{1} << 20;

// What validating a config checks beyond the config itself: this machine.
struct MachineChecks {
  // train.device cuda needs CUDA here (a LibTorch with CUDA and a visible GPU). Default on;
  // fsdp-plan turns it off, since it plans a GPU job from any machine.
  bool device_available = true;
};

// What a model folder's own config says (model.pretrained), as our settings. The configuration
// reads YAML and flags only: a FolderReader reads the folder (the Hugging Face room's
// hf::read_folder_settings, src/hf/folder.h), and load_config applies what it returns under the
// same precedence rules (src/config/pretrained.cpp).
struct FolderSettings {
  struct Value {
    std::string text;   // as a --KEY VALUE override would give it
    std::string field;  // the folder's field it came from
  };
  std::string file;                       // the file they were read from (DIR/config.json)
  std::map<std::string, Value> settings;  // "model.n_layer" -> {"12", "num_hidden_layers"}
  std::string dtype;                      // "float32", "bfloat16", "float16"; "" when not given
  // Things the run does differently from the folder's own framework, logged when the run starts
  // (dropout: fsdp.cpp's models have none).
  std::vector<std::string> notes;
};
// Reads the folder `dir` for a run whose context is `context_length` tokens; throws ConfigError
// naming the file and the field.
// A context_length of -1 asks for DIR read as a PEFT adapter folder (model.adapter's:
// adapter_config.json as lora.* settings, and its base_model_name_or_path as model.pretrained).
using FolderReader = std::function<FolderSettings(const std::string& dir, int64_t context_length)>;

// The defaults, then the YAML file at `path` (empty: none), then `overrides` in order, then, when
// model.pretrained is set, what `read_folder` reads from that folder for the keys left unset (a
// key set to another value is an error naming both); validated. `path` must name a regular file
// of at most kMaxConfigFileBytes; the ConfigError names it. model.pretrained without a reader is a
// ConfigError.
TrainConfig load_config(const std::string& path, const std::vector<ConfigOverride>& overrides = {},
                        MachineChecks machine = {}, const FolderReader& read_folder = {});
// The same from YAML text; `source_name` stands for the file in error messages.
TrainConfig parse_config(const std::string& yaml, const std::string& source_name = "<config>",
                         const std::vector<ConfigOverride>& overrides = {});
// Checks a config built in code: ranges, relations between keys, unsupported settings.
void validate_config(const TrainConfig& config);

// The config the checkpoint step folder `dir` was trained with (its train state's YAML), its
// relative paths resolved against the folder the run started in (recorded in the train state;
// checkpoints written before it was recorded keep them as saved). Throws CheckpointError naming
// the folder when it holds none.
TrainConfig checkpoint_config(const std::string& dir);

// Makes the config's relative paths (data sets, tokenizer, cache, the bundled corpus, model files,
// checkpoint, metrics and export folders) absolute against `base`. data.dataset `sotu` names the
// bundled corpus, in data.sotu_dir.
void resolve_paths(TrainConfig& config, const std::string& base);

// The config as YAML (`--print-config`): every setting that applies to the model type, so that
// parse_config(to_yaml(c)) == c for any c that load_config returned.
std::string to_yaml(const TrainConfig& config);

// What makes the models of `a` and `b` differ, one line per setting ("model.n_head: 4 and 8", in
// to_yaml's spelling, then the context length if it differs); empty when they build the same
// architecture. Where the weights come from (model.init_from, model.pretrained) and the attention
// kernel do not count.
std::vector<std::string> architecture_differences(const TrainConfig& a, const TrainConfig& b);

// One accepted key, as --help and docs/config.md list it.
struct ConfigKey {
  enum class Kind {
    kSetting,   // a field of TrainConfig
    kAlias,     // another spelling (Accelerate's older names, TorchAcc's) of one or more settings
    kAccepted,  // accepted for compatibility; no effect (the help says why)
    kRejected,  // a section for a feature fsdp.cpp does not have; an error unless empty
  };
  std::string key;            // dotted path: "optim.lr", "fsdp_config.fsdp_sharding_strategy"
  std::string type;           // "int", "number", "bool", "string", "list" or "A|B|C"
  std::string default_value;  // as to_yaml writes it; empty unless kind is kSetting
  std::string model_type;     // "gpt2" or "llama" for type-specific model keys; else empty
  std::string help;           // one line
  Kind kind = Kind::kSetting;
};
// Every key, in the order --help lists them.
std::vector<ConfigKey> config_keys();

// --- the trainer's command line -------------------------------------------------------------

enum class TrainCommand { kTrain, kSample, kEval };

// `fsdp-train sample`: generate text from a checkpoint.
struct SampleOptions {
  // A step folder, or a checkpoint root with `latest`. Default: the model.pretrained folder when
  // that is set, else train.checkpoint_dir.
  std::string checkpoint;
  // Texts to continue (--prompt, repeatable), each on its own and encoded as transformers'
  // tokenizer(prompt) does: with the post-processor's special tokens (Llama 3's BOS). None: one
  // empty prompt, which starts a document (BOS, or GPT-2's <|endoftext|>).
  std::vector<std::string> prompts;
  // Conversations answered through the tokenizer folder's chat template, rendered with the
  // generation prompt as apply_chat_template(add_generation_prompt=True) does and encoded without
  // added special tokens; generation also stops at the template's end-of-turn token. `chats`:
  // one user message each (--chat, repeatable); `chat_file`: a JSONL file of {"messages": [...]}
  // lines (--chat-file). Prompts, chats and the file's conversations are answered in that order.
  std::vector<std::string> chats;
  std::string chat_file;
  // How to pick each token. Unset: as the model folder's generation_config.json says
  // (transformers' defaults for what it leaves out: greedy, temperature 1, top_k 50, top_p 1),
  // or, for a model without one, nanoGPT's: sampling at temperature 0.8 among the 200 likeliest.
  // A temperature given alone decides do_sample (0: greedy).
  std::optional<bool> do_sample;
  std::optional<double> temperature;  // logits divided by it before sampling
  std::optional<int64_t> top_k;       // sample among the k most likely tokens; 0: all
  std::optional<double> top_p;        // ... and among the likeliest whose mass reaches p; 1: all
  // Tokens generated per sample at most; generation stops earlier at an EOS id (the folder's
  // generation_config.json or config.json, a list allowed; else the tokenizer's EOS). Unset: the
  // folder's max_new_tokens (or max_length less the prompt), else 100.
  std::optional<int64_t> max_new_tokens;
  int64_t num_samples = 1;  // independent samples of each prompt
  int64_t seed = 1337;      // sampling RNG seed
  // --KEY VALUE flags, applied on top of a checkpoint's saved config (a model folder's config is
  // the caller's, which already has them). Keys of the model's architecture must not change it.
  std::vector<ConfigOverride> overrides;
};

// `fsdp-train eval`: loss and perplexity of a model on held-out data.
struct EvalOptions {
  // A step folder, or a checkpoint root with `latest`. Default: the model.pretrained folder when
  // that is set, else train.checkpoint_dir.
  std::string checkpoint;
  std::vector<ConfigOverride> overrides;  // as SampleOptions::overrides
};

struct ParsedArgs {
  TrainCommand command = TrainCommand::kTrain;
  std::string config_file;  // --config FILE; empty: defaults and overrides only
  bool help = false;        // --help / -h: print train_usage(command) and exit (nothing else read)
  bool print_config = false;  // --print-config: print to_yaml(config) and exit
  TrainConfig config;         // defaults < --config FILE < --KEY VALUE overrides, validated
  SampleOptions sample;       // command == kSample
  EvalOptions eval;           // command == kEval
};

// `fsdp-train [train|sample] [--config FILE] [--print-config] [--resume[=DIR]] [--KEY VALUE]...`
// plus, for `sample`, --checkpoint DIR --prompt TEXT --max-new-tokens N --temperature T --top-k K
// --num-samples N --seed S. `--KEY=VALUE` works too; a bool key alone (`--fsdp_config.fsdp_sync_
// module_states`) means true; `--resume` alone is `--train.resume auto`. Throws ConfigError.
// `read_folder` reads model.pretrained's folder (load_config).
ParsedArgs parse_train_args(int argc, const char* const* argv, MachineChecks machine = {},
                            const FolderReader& read_folder = {});
// Without the program name.
ParsedArgs parse_train_args(const std::vector<std::string>& args, MachineChecks machine = {},
                            const FolderReader& read_folder = {});

// The --help text for `command`, generated from the flag and key tables.
std::string train_usage(TrainCommand command = TrainCommand::kTrain);

}  // namespace fsdp
