// fsdp-train's commands that use a trained model: `sample` (continue a prompt) and `eval` (loss and
// perplexity on a dataset), from a checkpoint or from a Hugging Face model folder
// (model.pretrained), at any world size, with no optimizer state built. The trainer stays the
// training loop.
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "factory/model_factory.h"
#include "fsdp/checkpoint/checkpoint.h"
#include "fsdp/checkpoint/full_state.h"
#include "fsdp/data/tokenizer.h"
#include "fsdp/fully_shard.h"
#include "fsdp/train/trainer.h"
#include "hf/folder.h"
#include "train/preflight.h"
#include "train/run_data.h"
#include "train/run_log.h"

namespace fsdp {

namespace {

// A step folder, or the newest checkpoint under a root.
std::string checkpoint_folder(const std::string& path) {
  if (auto latest = latest_checkpoint(path)) return *latest;
  return path;
}

// The next token after `logits` [V] (fp32): greedy when temperature is 0, else drawn from the
// top-k tokens' softmax at that temperature.
int64_t next_token(at::Tensor logits, const SampleOptions& o, at::Generator& gen) {
  if (o.temperature <= 0) return logits.argmax().item<int64_t>();
  logits = logits / o.temperature;
  if (o.top_k > 0 && o.top_k < logits.numel()) {
    const double kth = std::get<0>(logits.topk(o.top_k)).min().item<double>();
    logits = logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
  }
  return at::multinomial(logits.softmax(0), 1, false, gen).item<int64_t>();
}

std::vector<int64_t> generate(const CausalLM& lm, std::vector<int64_t> ids, const SampleOptions& o,
                              uint64_t seed, Comm& world, c10::Device device) {
  at::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (int64_t i = 0; i < o.max_new_tokens; ++i) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(ids.size()), lm.context_length);
    at::Tensor idx = at::tensor(std::vector<int64_t>(ids.end() - n, ids.end()), at::kLong);
    at::Tensor logits = lm.forward(idx.unsqueeze(0).to(device)).select(0, 0).select(0, n - 1);
    int64_t token = next_token(logits.to(at::kFloat).to(at::kCPU), o, gen);  // a CPU generator
    // Rank 0 decides, so that every rank feeds the same sequence to the next (collective) forward.
    world.broadcast(&token, 1, DType::kInt64, 0);
    ids.push_back(token);
  }
  return ids;
}

// A model ready to run: its config (a checkpoint's own, or the caller's with model.pretrained),
// the module, and its shards over every rank started, loaded.
struct LoadedModel {
  TrainConfig config;
  CausalLM lm;
  std::shared_ptr<FullyShardedModel> sharded;
  std::string source;              // what was loaded, for the output
  std::vector<std::string> notes;  // the overrides applied to a checkpoint's config
};

// A checkpoint's config for sample and eval: the saved one (its paths resolved against the folder
// its run started in), with the command line's --KEY VALUE on top, each noted; the device and
// threads are this machine's. An override that changes the model's architecture is refused: the
// weights are the checkpoint's (a data.seq_len that sizes the position table counts).
TrainConfig config_for_checkpoint(const std::string& dir, const TrainConfig& here,
                                  const std::vector<ConfigOverride>& overrides,
                                  std::vector<std::string>* notes) {
  const TrainConfig saved = checkpoint_config(dir);
  const std::string yaml = to_yaml(saved), source = dir + " (saved config)";
  for (const ConfigOverride& o : overrides) {
    const auto differences = architecture_differences(saved, parse_config(yaml, source, {o}));
    if (!differences.empty()) {
      throw ConfigError("", 0, "--" + o.key,
                        "the checkpoint '" + dir + "' holds a model this override would change (" +
                            differences.front() +
                            "); sample and eval take the model as it was trained (drop --" + o.key +
                            ")");
    }
  }
  TrainConfig c = parse_config(yaml, source, overrides);
  c.train.device = here.train.device;
  c.train.num_threads = here.train.num_threads;
  for (const ConfigOverride& o : overrides) {
    notes->push_back("on the checkpoint's config: " + o.key + " = " + o.value);
  }
  return c;
}

// From `checkpoint` (a step folder or a root) when given or when no model.pretrained is set
// (train.checkpoint_dir then), else from the model.pretrained folder. `seed` draws nothing the
// load does not overwrite; it is the config's train.seed.
LoadedModel load_model(const TrainConfig& config, const std::string& checkpoint,
                       const std::vector<ConfigOverride>& overrides, int64_t seed,
                       const CommPtr& world) {
  const bool from_folder = checkpoint.empty() && !config.model.pretrained.empty();
  LoadedModel m;
  std::string dir;
  if (from_folder) {
    m.config = config;
    m.source = config.model.pretrained;
  } else {
    dir = checkpoint_folder(checkpoint.empty() ? config.train.checkpoint_dir : checkpoint);
    m.config = config_for_checkpoint(dir, config, overrides, &m.notes);
    m.source = dir + ", step " + std::to_string(read_checkpoint_metadata(dir).step);
  }
  m.config.train.seed = seed;
  preflight(m.config, *world, /*training=*/false, from_folder);
  building("the model", [&] { m.lm = build_model(m.config); });
  // Any world size: one shard group over every rank started, on this run's device.
  ShardingOptions sharding = m.config.sharding_options().param_init(m.lm.param_init);
  sharding.strategy(ShardingStrategy::kFullShard)
      .shard_group_size(0)
      .device(to_string(config.train.device));
  building("this rank's shards of the model",
           [&] { m.sharded = fully_shard(m.lm.module, world, sharding); });
  if (from_folder) {
    FullStateLoadOptions load;
    load.name_map(hf::weight_name_map(m.config.model.type));
    load_full_safetensors(*m.sharded, m.config.model.pretrained, load);
  } else {
    try {
      load_checkpoint(dir, *m.sharded, nullptr);
    } catch (const CheckpointError&) {
      // A run saving into the root with train.keep_last may have removed the step `latest` named
      // while the model was built: say so, instead of "not a checkpoint folder".
      std::error_code ec;
      if (std::filesystem::exists(dir, ec)) throw;
      throw CheckpointError("checkpoint '" + dir +
                            "' was removed before it could be read (the run saving into its "
                            "folder keeps only its newest steps); run again to read the newest");
    }
  }
  return m;
}

}  // namespace

std::vector<std::string> sample(const TrainConfig& config, const SampleOptions& options,
                                CommPtr world, std::ostream& out) {
  if (config.train.num_threads > 0) at::set_num_threads(config.train.num_threads);
  const LoadedModel m =
      load_model(config, options.checkpoint, options.overrides, options.seed, world);
  if (world->rank() == 0) {
    for (const auto& note : m.notes) out << "sample: " << note << "\n";
  }
  const CausalLM& lm = m.lm;
  const auto tokenizer = data::load_tokenizer(m.config.data.tokenizer_dir);
  check_vocabulary_fits(m.config, *tokenizer);
  std::vector<int64_t> prompt;
  for (int32_t id : tokenizer->encode(options.prompt)) prompt.push_back(id);
  if (prompt.empty()) {  // an empty prompt starts a document: BOS, or GPT-2's <|endoftext|>
    const std::optional<int32_t> start =
        tokenizer->bos_id() ? tokenizer->bos_id() : tokenizer->eos_id();
    if (!start) {
      throw std::invalid_argument("sample: --prompt is empty and the tokenizer in " +
                                  m.config.data.tokenizer_dir +
                                  " has no BOS or EOS token to start from; give a prompt");
    }
    prompt.push_back(*start);
  }

  std::vector<std::string> texts;
  for (int64_t s = 0; s < options.num_samples; ++s) {
    const auto ids = generate(lm, prompt, options, static_cast<uint64_t>(options.seed + s), *world,
                              m.sharded->device());
    std::vector<int32_t> narrow(ids.begin(), ids.end());
    texts.push_back(tokenizer->decode(narrow));
    if (world->rank() == 0) {
      out << "--- sample " << s + 1 << " of " << options.num_samples << " (" << m.source << ")\n"
          << texts.back() << "\n";
    }
  }
  return texts;
}

EvalResult evaluate_model(const TrainConfig& config, const EvalOptions& options, CommPtr world,
                          std::ostream& out) {
  if (config.train.num_threads > 0) at::set_num_threads(config.train.num_threads);
  const LoadedModel m =
      load_model(config, options.checkpoint, options.overrides, config.train.seed, world);
  // The held-out data of the checkpoint's run (or of this config, for a model folder), read with
  // the model's tokenizer and checked against its vocabulary.
  TrainConfig c = m.config;
  RunLog log(out, world->rank() == 0, /*progress_bar=*/false, /*metrics_file=*/"", 0);
  for (const auto& note : m.notes) log.info("eval: " + note);
  if (c.data.seq_len > m.config.context_length()) {
    log.info("eval: data.seq_len " + std::to_string(c.data.seq_len) +
             " is longer than the model's context; windows of " +
             std::to_string(m.config.context_length()) + " tokens");
    c.data.seq_len = m.config.context_length();
  }
  const RunData d = prepare_data(c, log);
  if (d.val.empty()) {
    throw std::invalid_argument("data: '" + c.data.dataset +
                                "' has no held-out data to evaluate on; set data.val_split above "
                                "0 or data.val_dataset");
  }
  const data::EvalLoader loader(d.val, loader_options(c, *world), c.train.eval_batches);
  EvalResult r;
  r.loss = evaluate(m.lm, loader, *world, m.sharded->device());
  r.perplexity = std::exp(r.loss);
  r.tokens = loader.num_batches() * c.train.micro_batch_size * world->size() * c.data.seq_len;
  r.source = m.source;
  if (world->rank() == 0) {
    char line[256];
    std::snprintf(line, sizeof line, "eval: loss %.6f, perplexity %.3f over %lld tokens", r.loss,
                  r.perplexity, static_cast<long long>(r.tokens));
    out << line << " (" << r.source << ")\n";
  }
  return r;
}

}  // namespace fsdp
