// Validation of a merged config: ranges, relations between keys, and the values this build cannot
// honour. Runs once after every source is applied, so that a command-line override can repair a
// file's value; each error points, through Origins, at where the offending value came from.
#include <ATen/Context.h>
#include <torch/version.h>

#include <cmath>
#include <sstream>

#include "compat.h"
#include "config/schema.h"
#include "fsdp/models/lora.h"

namespace fsdp {
namespace config {
namespace {

std::string num(double x) { return format_number(x); }

// train.process_group_timeout, in seconds: a millisecond (the comm layer's unit) to a week.
constexpr double kMinTimeout = 0.001, kMaxTimeout = 604800;
std::string num(int64_t x) { return std::to_string(x); }

class Checks {
 public:
  explicit Checks(const Origins& origins) : origins_(origins) {}

  void require(bool ok, const std::vector<std::string>& keys, const std::string& detail) const {
    if (!ok) throw error_at(origins_, keys, detail);
  }
  void at_least(const std::string& key, int64_t value, int64_t lo) const {
    require(value >= lo, {key}, "must be at least " + num(lo) + ", got " + num(value));
  }
  void positive(const std::string& key, double value) const {
    require(value > 0, {key}, "must be > 0, got " + num(value));
  }
  void non_negative(const std::string& key, double value) const {
    require(value >= 0, {key}, "must be >= 0, got " + num(value));
  }
  void fraction(const std::string& key, double value) const {
    require(value >= 0 && value < 1, {key}, "must be in [0, 1), got " + num(value));
  }
  void not_empty(const std::string& key, const std::string& value) const {
    require(!value.empty(), {key}, "must not be empty");
  }

 private:
  const Origins& origins_;
};

void check_llama(const Checks& k, const ModelConfig& m) {
  k.at_least("model.n_kv_head", m.n_kv_head, 0);
  k.require(m.kv_heads() <= m.n_head && m.n_head % m.kv_heads() == 0,
            {"model.n_kv_head", "model.n_head"},
            "model.n_head (" + num(m.n_head) + ") must be divisible by model.n_kv_head (" +
                num(m.kv_heads()) + "): each key/value head serves the same number of query heads");
  k.at_least("model.head_dim", m.head_dim, 0);
  const int64_t head = m.head_dim > 0 ? m.head_dim : m.dim / m.n_head;
  k.require(m.partial_rotary_factor > 0 && m.partial_rotary_factor <= 1,
            {"model.partial_rotary_factor"}, "must be above 0 and at most 1");
  const auto rotated = static_cast<int64_t>(static_cast<double>(head) * m.partial_rotary_factor);
  k.require(rotated % 2 == 0 && rotated > 0,
            {"model.dim", "model.n_head", "model.head_dim", "model.partial_rotary_factor"},
            "the head size (model.head_dim, or model.dim / model.n_head) = " + num(head) +
                (m.partial_rotary_factor < 1 ? " times model.partial_rotary_factor" : "") +
                " must be even for rotary embeddings");
  k.at_least("model.intermediate_size", m.intermediate_size, 1);
  k.positive("model.rope_theta", m.rope_theta);
  k.at_least("model.sliding_window", m.sliding_window, 0);
  k.require(m.sliding_layers.empty() == (m.sliding_window == 0),
            {"model.sliding_layers", "model.sliding_window"},
            "model.sliding_layers and a positive model.sliding_window go together");
  for (int64_t layer : m.sliding_layers) {
    k.require(layer >= 0 && layer < m.n_layer, {"model.sliding_layers", "model.n_layer"},
              "model.sliding_layers names layer " + num(layer) + ", but the layers are 0 to " +
                  num(m.n_layer - 1));
  }
  k.positive("model.local_rope_theta", m.local_rope_theta);
  k.non_negative("model.embedding_scale", m.embedding_scale);
  k.non_negative("model.attention_scale", m.attention_scale);
  for (int64_t layer : m.nope_layers) {
    k.require(layer >= 0 && layer < m.n_layer, {"model.nope_layers", "model.n_layer"},
              "model.nope_layers names layer " + num(layer) + ", but the layers are 0 to " +
                  num(m.n_layer - 1));
  }
  if (m.rope_scaling == "none") return;
  k.positive("model.rope_factor", m.rope_factor);
  if (m.rope_scaling == "longrope") {
    const size_t pairs = static_cast<size_t>(rotated / 2);
    k.require(m.rope_short_factor.size() == pairs && m.rope_long_factor.size() == pairs,
              {"model.rope_short_factor", "model.rope_long_factor"},
              "longrope needs " + num(static_cast<int64_t>(pairs)) +
                  " factors each (one per rotated channel pair), got " +
                  num(static_cast<int64_t>(m.rope_short_factor.size())) + " and " +
                  num(static_cast<int64_t>(m.rope_long_factor.size())));
    k.at_least("model.rope_original_max_positions", m.rope_original_max_positions, 1);
    return;
  }
  if (m.rope_scaling != "llama3") return;
  k.positive("model.rope_low_freq_factor", m.rope_low_freq_factor);
  k.require(m.rope_high_freq_factor > m.rope_low_freq_factor,
            {"model.rope_high_freq_factor", "model.rope_low_freq_factor"},
            "model.rope_high_freq_factor must exceed model.rope_low_freq_factor");
  k.at_least("model.rope_original_max_positions", m.rope_original_max_positions, 1);
}

void check_model(const Checks& k, const ModelConfig& m, const DataConfig& d) {
  k.at_least("model.vocab_size", m.vocab_size, 1);
  k.at_least("model.n_layer", m.n_layer, 1);
  k.at_least("model.n_head", m.n_head, 1);
  k.at_least("model.n_positions", m.n_positions, 0);
  k.positive("model.norm_eps", m.norm_eps);
  k.require(attention_kernel_available(m.attention), {"model.attention"},
            "fused needs LibTorch 2.0 or later (this build's is " TORCH_VERSION
            "); use auto or explicit");
  const std::string width = m.type == ModelType::kGPT2 ? "model.n_embd" : "model.dim";
  k.at_least(width, m.width(), 1);
  k.require(m.width() % m.n_head == 0 || m.head_dim > 0, {width, "model.n_head"},
            width + " (" + num(m.width()) + ") must be divisible by model.n_head (" +
                num(m.n_head) + ")");
  k.require(m.n_positions == 0 || m.n_positions >= d.seq_len, {"data.seq_len", "model.n_positions"},
            "data.seq_len (" + num(d.seq_len) + ") exceeds model.n_positions (" +
                num(m.n_positions) + "), the longest sequence the model accepts");
  if (m.type == ModelType::kLlama) check_llama(k, m);
}

void check_data(const Checks& k, const DataConfig& d) {
  k.not_empty("data.dataset", d.dataset);
  k.fraction("data.val_split", d.val_split);
  // The bundled corpus holds out whole addresses by year (data::CorpusOptions); a fraction set for
  // it would be ignored.
  k.require(d.dataset != "sotu" || d.val_split == DataConfig{}.val_split,
            {"data.val_split", "data.dataset"},
            "data.val_split (" + num(d.val_split) +
                ") does not apply to the bundled corpus 'sotu', which holds out the addresses "
                "from 2000 on; it applies to your own data.dataset");
  k.at_least("data.seq_len", d.seq_len, 1);
  k.not_empty("data.tokenizer_dir", d.tokenizer_dir);
  k.not_empty("data.cache_dir", d.cache_dir);
  k.not_empty("data.sotu_dir", d.sotu_dir);
}

void check_optim(const Checks& k, const OptimConfig& o) {
  k.positive("optim.lr", o.lr);
  k.non_negative("optim.min_lr", o.min_lr);
  k.require(o.min_lr <= o.lr, {"optim.min_lr", "optim.lr"},
            "optim.min_lr (" + num(o.min_lr) + ") must not exceed optim.lr (" + num(o.lr) + ")");
  k.at_least("optim.max_steps", o.max_steps, 1);
  k.at_least("optim.warmup_steps", o.warmup_steps, 0);
  k.require(o.warmup_steps <= o.max_steps, {"optim.warmup_steps", "optim.max_steps"},
            "optim.warmup_steps (" + num(o.warmup_steps) + ") must not exceed optim.max_steps (" +
                num(o.max_steps) + ")");
  k.non_negative("optim.weight_decay", o.weight_decay);
  k.fraction("optim.beta1", o.beta1);
  k.fraction("optim.beta2", o.beta2);
  k.positive("optim.eps", o.eps);
  k.non_negative("optim.grad_clip", o.grad_clip);
}

void check_grad_scaler(const Checks& k, const GradScalerOptions& g) {
  k.positive("grad_scaler.init_scale", g.init_scale);
  k.require(g.init_scale <= 3.4e38, {"grad_scaler.init_scale"},
            "must be an fp32 value (at most 3.4e38), got " + num(g.init_scale));
  k.require(g.growth_factor > 1, {"grad_scaler.growth_factor"},
            "must be > 1, got " + num(g.growth_factor));
  k.require(g.backoff_factor > 0 && g.backoff_factor < 1, {"grad_scaler.backoff_factor"},
            "must be in (0, 1), got " + num(g.backoff_factor));
  k.at_least("grad_scaler.growth_interval", g.growth_interval, 1);
  k.positive("grad_scaler.min_scale", g.min_scale);
  k.require(g.min_scale <= g.init_scale, {"grad_scaler.min_scale", "grad_scaler.init_scale"},
            "grad_scaler.min_scale (" + num(g.min_scale) + ") must not exceed init_scale (" +
                num(g.init_scale) + ")");
}

void check_train(const Checks& k, const TrainLoopConfig& t, const DataConfig& d,
                 MachineChecks machine) {
  k.at_least("train.micro_batch_size", t.micro_batch_size, 1);
  k.at_least("train.gradient_accumulation_steps", t.gradient_accumulation_steps, 1);
  k.at_least("train.seed", t.seed, 0);
  k.at_least("train.eval_every", t.eval_every, 0);
  k.at_least("train.eval_batches", t.eval_batches, 1);
  k.at_least("train.log_every", t.log_every, 1);
  k.at_least("train.checkpoint_every", t.checkpoint_every, 0);
  k.at_least("train.checkpoint_keep_last", t.checkpoint_keep_last, 0);
  k.at_least("train.num_threads", t.num_threads, 0);
  k.require(t.process_group_timeout >= kMinTimeout && t.process_group_timeout <= kMaxTimeout,
            {"train.process_group_timeout"},
            "must be in [" + num(kMinTimeout) + ", " + num(kMaxTimeout) + "] seconds, got " +
                num(t.process_group_timeout));
  k.require(
      t.device != TrainDevice::kCuda || !machine.device_available || at::globalContext().hasCUDA(),
      {"train.device"},
      "is cuda, but CUDA is not available here (this LibTorch has no CUDA, or no GPU is "
      "visible)");
  k.require(!t.checkpoint_dir.empty() || (t.checkpoint_every == 0 && t.resume != "auto"),
            {"train.checkpoint_dir", "train.checkpoint_every", "train.resume"},
            "train.checkpoint_dir is empty, but train.checkpoint_every or train.resume: auto "
            "needs it");
  k.require(t.eval_every == 0 || d.val_split > 0 || !d.val_dataset.empty(),
            {"train.eval_every", "data.val_split", "data.val_dataset"},
            "evaluation needs held-out data: set data.val_split above 0 or data.val_dataset, or "
            "train.eval_every to 0");
}

void check_fsdp(const Checks& k, const TrainConfig& c) {
  const FsdpConfig& f = c.fsdp;
  k.at_least("fsdp_config.fsdp_min_num_params", f.min_num_params, 1);
  k.at_least("fsdp_config.shard_group_size", f.shard_group_size, 0);
  k.at_least("fsdp_config.prefetch_depth", f.prefetch_depth, 1);
  k.at_least("fsdp_config.root_reduction_chunks", f.root_reduction_chunks, 0);
  k.at_least("fsdp_config.limit_all_gathers", f.limit_all_gathers, 0);
  k.at_least("fsdp_config.activation_checkpointing_every", f.activation_checkpointing_every, 1);
  k.require(
      f.activation_checkpointing_every == 1 || f.activation_checkpointing,
      {"fsdp_config.activation_checkpointing_every", "fsdp_config.fsdp_activation_checkpointing"},
      "activation_checkpointing_every picks the units that recompute, and activation "
      "checkpointing is off");
  k.require(!f.activation_checkpointing || f.auto_wrap_policy != AutoWrapPolicy::kNoWrap,
            {"fsdp_config.fsdp_activation_checkpointing", "fsdp_config.fsdp_auto_wrap_policy"},
            "activation checkpointing recomputes wrapped units, and NO_WRAP wraps none");
  k.require(f.root_reduction_chunks == 0 || f.split_root_reduction,
            {"fsdp_config.root_reduction_chunks", "fsdp_config.split_root_reduction"},
            "root_reduction_chunks sets the pieces of the split root reduction, which "
            "split_root_reduction: false turns off");
  k.require(f.shard_group_size == 0 || is_hybrid(f.sharding_strategy),
            {"fsdp_config.shard_group_size", "fsdp_config.fsdp_sharding_strategy"},
            "shard_group_size applies to HYBRID_SHARD and HYBRID_SHARD_ZERO2 only, and the "
            "strategy is " +
                std::string(to_string(f.sharding_strategy)));
  k.require(
      f.shard_group_size == 0 || c.num_processes == 0 || c.num_processes % f.shard_group_size == 0,
      {"fsdp_config.shard_group_size", "num_processes"},
      "shard_group_size (" + num(int64_t{f.shard_group_size}) + ") must divide num_processes (" +
          num(int64_t{c.num_processes}) + ")");
  k.require(!f.cpu_ram_efficient_loading || f.sync_module_states || f.version == 2,
            {"fsdp_config.fsdp_cpu_ram_efficient_loading", "fsdp_config.fsdp_sync_module_states"},
            "fsdp_cpu_ram_efficient_loading needs fsdp_sync_module_states: true under "
            "fsdp_version 1 (the other ranks receive rank 0's parameters through it; FSDP2, "
            "fsdp_version: 2, does without)");
  k.at_least("parallelism_config.parallelism_config_dp_shard_size", f.dp_shard_size, 0);
  k.at_least("parallelism_config.parallelism_config_dp_replicate_size", f.dp_replicate_size, 0);
  const int dp = std::max(f.dp_shard_size, 1) * std::max(f.dp_replicate_size, 1);
  k.require(
      f.dp_shard_size + f.dp_replicate_size == 0 || c.num_processes == 0 || dp == c.num_processes,
      {"parallelism_config.parallelism_config_dp_shard_size",
       "parallelism_config.parallelism_config_dp_replicate_size", "num_processes"},
      "dp_shard_size x dp_replicate_size (" + num(int64_t{dp}) + ") must equal num_processes (" +
          num(int64_t{c.num_processes}) + ")");
}

void check_export(const Checks& k, const TrainLoopConfig& t) {
  k.require(t.export_dir.empty() || t.checkpoint_every > 0,
            {"train.export_dir", "train.checkpoint_every"},
            "train.export_dir writes the last checkpoint as a model folder: set "
            "train.checkpoint_every above 0");
}

// A frozen parameter keeps the value it starts from, and a checkpoint does not hold it (it is
// read again from the weights on resume, export, eval and sample): freezing random values is
// nothing a run can mean.
void check_freeze(const Checks& k, const TrainConfig& c) {
  k.require(c.train.freeze.empty() || !c.model.pretrained.empty() || !c.model.init_from.empty(),
            {"train.freeze", "model.pretrained", "model.init_from"},
            "frozen parameters keep the weights the run starts from: set model.pretrained or "
            "model.init_from (without them they would stay random)");
}

// LoRA as PEFT's LoraConfig allows it (r at least 1, dropout a probability), on a base: the
// frozen weights come from somewhere (as train.freeze's).
void check_lora(const Checks& k, const TrainConfig& c) {
  const LoraConfig& l = c.lora;
  k.require(l.modules_to_save.empty() || l.enabled(),
            {"lora.modules_to_save", "lora.target_modules"},
            "modules_to_save are trained beside LoRA adapters: set lora.target_modules too");
  if (!l.enabled()) return;
  k.require(l.r >= 1, {"lora.r"}, "the adapters' rank must be at least 1, got " + num(l.r));
  k.require(l.dropout >= 0 && l.dropout < 1, {"lora.dropout"},
            "must be in [0, 1), got " + num(l.dropout));
  k.require(std::isfinite(l.alpha) && l.alpha > 0, {"lora.alpha"},
            "must be a positive number, got " + num(l.alpha));
  k.require(!c.model.pretrained.empty() || !c.model.init_from.empty(),
            {"lora.target_modules", "model.pretrained", "model.init_from"},
            "LoRA adapts a base model: set model.pretrained (or model.init_from) to it");
  // PEFT trains a copy of a module to save; of a token table tied to the head that unties them
  // (the head keeps the base's weights), which a tied model here cannot hold.
  const bool tied = c.model.type == ModelType::kGPT2 || c.model.tie_embeddings;
  const std::string table =
      c.model.type == ModelType::kGPT2 ? "transformer.wte" : "model.embed_tokens";
  for (const std::string& m : l.modules_to_save) {
    k.require(!tied || !saves_module(table, m), {"lora.modules_to_save"},
              "'" + m +
                  "' is the token table, which this model ties to its output head: PEFT "
                  "trains an untied copy of it (the head keeps the base's weights), which a tied "
                  "model cannot hold");
  }
}

void check_launch(const Checks& k, const TrainConfig& c) {
  k.require(c.mixed_precision != DType::kInt64, {"mixed_precision"}, "must be a floating type");
  k.require(c.mixed_precision != DType::kFloat16 || c.train.device != TrainDevice::kCpu ||
                compat::kHasCpuHalfKernels,
            {"mixed_precision", "train.device"},
            "fp16 on the CPU needs LibTorch 2.x (this build's LibTorch " TORCH_VERSION
            " has no fp16 CPU kernels for matmul and layer norm); use bf16, or train.device cuda");
  k.at_least("num_processes", c.num_processes, 0);
  k.at_least("num_machines", c.num_machines, 1);
  k.require(c.num_processes % c.num_machines == 0, {"num_processes", "num_machines"},
            "num_processes (" + num(int64_t{c.num_processes}) +
                ", all machines together) must be a multiple of num_machines (" +
                num(int64_t{c.num_machines}) + ")");
}

// Model keys of one type, set (by a file or a flag) while model.type names the other.
void check_type_specific(const TrainConfig& c, const Origins& origins) {
  for (const auto& o : options()) {
    if (!o.type_specific || o.model_type == c.model.type || !origins.count(o.key)) continue;
    throw error_at(origins, {o.key},
                   "applies to model.type " + std::string(to_string(o.model_type)) +
                       " only, and model.type is " + to_string(c.model.type));
  }
}

}  // namespace

ConfigError error_at(const Origins& origins, const std::vector<std::string>& keys,
                     const std::string& detail) {
  const Origin* latest = nullptr;
  for (const auto& key : keys) {
    const auto it = origins.find(key);
    if (it != origins.end() && (!latest || it->second.order > latest->order)) latest = &it->second;
  }
  if (!latest) return ConfigError("", 0, keys.front(), detail);
  return ConfigError(latest->source, latest->line, latest->written, detail);
}

void validate(const TrainConfig& config, const Origins& origins, MachineChecks machine) {
  const Checks k(origins);
  check_type_specific(config, origins);
  check_model(k, config.model, config.data);
  check_data(k, config.data);
  check_optim(k, config.optim);
  check_grad_scaler(k, config.grad_scaler);
  check_train(k, config.train, config.data, machine);
  check_fsdp(k, config);
  check_launch(k, config);
  check_export(k, config.train);
  check_freeze(k, config);
  check_lora(k, config);
}

}  // namespace config
}  // namespace fsdp
