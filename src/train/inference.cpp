// fsdp-train's commands that use a trained model: `sample` (continue a prompt) and `eval` (loss and
// perplexity on a dataset), from a checkpoint or from a Hugging Face model folder
// (model.pretrained), at any world size, with no optimizer state built. The trainer stays the
// training loop.
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <sstream>

#include "factory/model_factory.h"
#include "fsdp/checkpoint/checkpoint.h"
#include "fsdp/checkpoint/full_state.h"
#include "fsdp/data/chat_template.h"
#include "fsdp/data/examples.h"
#include "fsdp/data/tokenizer.h"
#include "fsdp/fully_shard.h"
#include "fsdp/train/trainer.h"
#include "hf/folder.h"
#include "hf/generation.h"
#include "hf/peft.h"
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

// How each token is picked and when generation stops: the flags on top of the model folder's
// generation_config.json (transformers' defaults for what it leaves out), or of nanoGPT's
// sampling for a model from no folder.
struct Decoding {
  bool do_sample = true;
  double temperature = 0.8, top_p = 1.0;
  int64_t top_k = 200;
  std::optional<int64_t> max_new_tokens;  // unset: max_length less the prompt, else 100
  std::optional<int64_t> max_length;      // the folder's: prompt and new tokens together
  std::vector<int64_t> eos;               // generation stops after any of these
  std::string source;                     // where the defaults came from, for the log

  int64_t new_tokens(size_t prompt) const {
    if (max_new_tokens) return *max_new_tokens;
    if (max_length) return std::max<int64_t>(0, *max_length - static_cast<int64_t>(prompt));
    return 100;
  }
};

// The next token after `logits` [V] (fp32): the argmax, or drawn from the softmax at the
// temperature over the top_k tokens, then over the likeliest whose mass reaches top_p, in the
// order transformers' logits warpers apply them.
int64_t next_token(at::Tensor logits, const Decoding& d, at::Generator& gen) {
  if (!d.do_sample || d.temperature <= 0) return logits.argmax().item<int64_t>();
  const double inf = std::numeric_limits<float>::infinity();
  // In fp64 (a temperature below fp32's range would round to 0 there, and 0 / 0 is NaN), shifted
  // by the largest first (the softmax, top_k and top_p orders unchanged): a temperature so small
  // that logits / T overflows then sends every other token to -inf and keeps the likeliest at 0,
  // the argmax it tends to, where unshifted inf - inf would be NaN.
  logits = logits.to(at::kDouble);
  logits = (logits - logits.max()) / d.temperature;
  if (d.top_k > 0 && d.top_k < logits.numel()) {
    const double kth = std::get<0>(logits.topk(d.top_k)).min().item<double>();
    logits = logits.masked_fill(logits < kth, -inf);
  }
  if (d.top_p < 1.0) {  // TopPLogitsWarper: drop the unlikeliest whose mass stays below 1 - p
    const auto sorted = logits.sort(/*dim=*/0, /*descending=*/false);
    at::Tensor drop = std::get<0>(sorted).softmax(0).cumsum(0) <= (1.0 - d.top_p);
    drop[-1] = false;  // the likeliest always stays
    logits = logits.masked_fill(at::zeros_like(drop).scatter(0, std::get<1>(sorted), drop), -inf);
  }
  return at::multinomial(logits.softmax(0), 1, false, gen).item<int64_t>();
}

std::vector<int64_t> generate(const CausalLM& lm, std::vector<int64_t> ids, const Decoding& d,
                              uint64_t seed, Comm& world, c10::Device device) {
  at::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const int64_t new_tokens = d.new_tokens(ids.size());
  for (int64_t i = 0; i < new_tokens; ++i) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(ids.size()), lm.context_length);
    at::Tensor idx = at::tensor(std::vector<int64_t>(ids.end() - n, ids.end()), at::kLong);
    at::Tensor logits = lm.forward(idx.unsqueeze(0).to(device)).select(0, 0).select(0, n - 1);
    int64_t token = next_token(logits.to(at::kFloat).to(at::kCPU), d, gen);  // a CPU generator
    // Rank 0 decides, so that every rank feeds the same sequence to the next (collective) forward
    // and stops at the same EOS.
    world.broadcast(&token, 1, DType::kInt64, 0);
    ids.push_back(token);
    if (std::find(d.eos.begin(), d.eos.end(), token) != d.eos.end()) break;
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
  // The overrides together, as the command line gives them (one alone may not validate against
  // the saved config: a warmup longer than its steps until the steps' override comes too).
  TrainConfig c = parse_config(yaml, source, overrides);
  const auto differences = architecture_differences(saved, c);
  if (!differences.empty()) {
    std::string key = overrides.front().key;  // differences need an override
    for (const ConfigOverride& o : overrides) {
      try {
        if (!architecture_differences(saved, parse_config(yaml, source, {o})).empty()) {
          key = o.key;
          break;
        }
      } catch (const ConfigError&) {  // invalid alone: not the one to name
      }
    }
    throw ConfigError("", 0, "--" + key,
                      "the checkpoint '" + dir + "' holds a model this override would change (" +
                          differences.front() +
                          "); sample and eval take the model as it was trained (drop --" + key +
                          ")");
  }
  c.train.device = here.train.device;
  c.train.num_threads = here.train.num_threads;
  for (const ConfigOverride& o : overrides) {
    notes->push_back("on the checkpoint's config: " + o.key + " = " + o.value);
  }
  return c;
}

// A checkpoint of a run with frozen parameters holds what trained only: the rest comes from the
// weights the run started from (its model.init_from, else model.pretrained), read first whole.
void load_frozen_weights(const std::string& dir, LoadedModel& m) {
  if (read_checkpoint_metadata(dir).frozen.empty()) return;
  const ModelConfig& model = m.config.model;
  const std::string& weights = model.start_weights();
  if (weights.empty()) {
    throw CheckpointError("checkpoint '" + dir +
                          "' holds the parameters its run trained, not the frozen ones "
                          "(train.freeze), and its config names no model.pretrained or "
                          "model.init_from to read them from");
  }
  load_full_safetensors(*m.sharded, weights, hf::start_weights_options(m.config));
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
    load_full_safetensors(*m.sharded, m.config.model.pretrained,
                          hf::start_weights_options(m.config));
    if (!m.config.model.adapter.empty()) {
      load_full_safetensors(*m.sharded, hf::adapter_weights(m.config.model.adapter),
                            hf::adapter_load_options(m.config));
      m.source += " with the adapter " + m.config.model.adapter;
    }
  } else {
    load_frozen_weights(dir, m);
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

// The decoding the flags and the model's folder (model.pretrained, also for a checkpoint of a run
// that started from one) ask for; `notes` gets what the folder asks that we do not do.
Decoding resolve_decoding(const SampleOptions& o, const TrainConfig& model,
                          const data::Tokenizer& tokenizer, std::vector<std::string>& notes) {
  Decoding d;
  d.source = "fsdp.cpp's defaults";
  if (const auto eos = tokenizer.eos_id()) d.eos = {*eos};
  std::error_code ec;
  if (!model.model.pretrained.empty() &&
      std::filesystem::is_directory(model.model.pretrained, ec)) {
    const hf::GenerationDefaults g = hf::read_generation_defaults(model.model.pretrained);
    // transformers' GenerationConfig defaults where the file is silent (or absent).
    d.do_sample = g.do_sample.value_or(false);
    d.temperature = g.temperature.value_or(1.0);
    d.top_p = g.top_p.value_or(1.0);
    d.top_k = g.top_k.value_or(50);
    d.max_new_tokens = g.max_new_tokens;
    d.max_length = g.max_length;
    if (!g.eos_ids.empty()) d.eos = g.eos_ids;
    d.source = g.file.empty() ? "transformers' defaults: " + model.model.pretrained +
                                    " has no generation_config.json"
                              : g.file;
    for (const std::string& field : g.not_applied) {
      notes.push_back(g.file + "'s " + field +
                      " is not applied (sample does temperature, top_k and top_p)");
    }
  }
  if (o.temperature) {
    d.temperature = *o.temperature;
    if (!o.do_sample) d.do_sample = *o.temperature > 0;
  }
  if (o.do_sample) d.do_sample = *o.do_sample;
  if (o.top_k) d.top_k = *o.top_k;
  if (o.top_p) d.top_p = *o.top_p;
  if (o.max_new_tokens) d.max_new_tokens = o.max_new_tokens;
  return d;
}

std::string describe(const Decoding& d) {
  std::ostringstream s;
  if (d.do_sample && d.temperature > 0) {
    s << "sampling at temperature " << d.temperature << ", top_k " << d.top_k << ", top_p "
      << d.top_p;
  } else {
    s << "greedy";
  }
  s << "; at most ";
  if (d.max_new_tokens || !d.max_length) {
    s << d.new_tokens(0) << " new tokens";
  } else {
    s << *d.max_length << " tokens with the prompt";
  }
  if (d.eos.empty()) s << ", no EOS";
  for (size_t i = 0; i < d.eos.size(); ++i) s << (i ? ", " : ", stopping at EOS ") << d.eos[i];
  s << " (" << d.source << ")";
  return s.str();
}

// tokenizer(prompt): with the post-processor's special tokens; an empty prompt that gets none
// starts a document with BOS, or GPT-2's <|endoftext|>.
std::vector<int64_t> encode_prompt(const data::Tokenizer& tokenizer, const std::string& prompt,
                                   const std::string& tokenizer_dir) {
  std::vector<int64_t> ids;
  for (int32_t id : tokenizer.encode_with_special_tokens(prompt)) ids.push_back(id);
  if (ids.empty()) {
    const std::optional<int32_t> start =
        tokenizer.bos_id() ? tokenizer.bos_id() : tokenizer.eos_id();
    if (!start) {
      throw std::invalid_argument("sample: --prompt is empty and the tokenizer in " +
                                  tokenizer_dir +
                                  " has no BOS or EOS token to start from; give a prompt");
    }
    ids.push_back(*start);
  }
  return ids;
}

// decode(ids) as transformers' decode does it: ids beyond the tokenizer's (embedding rows a
// tokenizer does not use, as Qwen2.5's 271 and padded vocabularies have) are skipped.
std::string decode_known(const data::Tokenizer& tokenizer, const std::vector<int64_t>& ids) {
  std::vector<int32_t> known;
  for (int64_t id : ids) {
    if (id >= 0 && id <= tokenizer.max_id()) known.push_back(static_cast<int32_t>(id));
  }
  return tokenizer.decode(known);
}

// What sample continues: a label for the output and the ids.
struct SampleInput {
  std::string label;
  std::vector<int64_t> ids;
};

// The special token a chat template puts right after an assistant's content (Llama 3's
// <|eot_id|>, ChatML's <|im_end|>, Gemma's <end_of_turn>, Phi's <|end|>, Mistral's </s>), found by
// rendering a one-turn conversation; none when the template puts none there.
std::optional<std::pair<std::string, int32_t>> end_of_turn(const data::ChatTemplate& chat,
                                                           const data::Tokenizer& tokenizer) {
  const std::string mark = "fsdp-answer-7f3a";
  std::string text;
  try {
    text = chat.render({{"user", "Hello"}, {"assistant", mark}}, false);
  } catch (const std::runtime_error&) {
    return std::nullopt;
  }
  const size_t at = text.find(mark);
  if (at == std::string::npos) return std::nullopt;
  const std::string_view rest = std::string_view(text).substr(at + mark.size());
  std::optional<std::pair<std::string, int32_t>> best;
  for (const auto& [content, id] : tokenizer.special_tokens()) {
    if (!content.empty() && rest.substr(0, content.size()) == content &&
        (!best || content.size() > best->first.size())) {
      best = {content, id};
    }
  }
  return best;
}

std::vector<int64_t> widened(const std::vector<int32_t>& ids) {
  return std::vector<int64_t>(ids.begin(), ids.end());
}

// --prompt texts, then --chat messages and --chat-file conversations through the template (the
// decoding then also stops at its end of turn, noted); one empty prompt when none is given.
std::vector<SampleInput> sample_inputs(const SampleOptions& o, const TrainConfig& c,
                                       const data::Tokenizer& tokenizer, Decoding& decoding,
                                       std::vector<std::string>& notes) {
  std::vector<SampleInput> in;
  for (const std::string& p : o.prompts) {
    in.push_back({"prompt", encode_prompt(tokenizer, p, c.data.tokenizer_dir)});
  }
  std::vector<data::Conversation> chats;
  for (const std::string& text : o.chats) chats.push_back({{{"user", text}}, {}});
  if (!o.chat_file.empty()) {
    try {
      for (auto& conversation : data::read_conversations(o.chat_file)) {
        chats.push_back(std::move(conversation));
      }
    } catch (const std::runtime_error& e) {
      throw std::invalid_argument(std::string("sample: --chat-file ") + e.what());
    }
  }
  if (!chats.empty()) {
    const data::ChatTemplate chat = data::ChatTemplate::from_folder(c.data.tokenizer_dir);
    for (size_t i = 0; i < chats.size(); ++i) {
      // apply_chat_template(tokenize=True): the template writes its own BOS.
      const data::Conversation& conv = chats[i];
      const std::string text =
          chat.render(conv.messages, /*add_generation_prompt=*/true, conv.variables);
      try {
        chat.check_rendering(conv.messages, text, /*add_generation_prompt=*/true, conv.variables);
      } catch (const data::ChatTemplateError& e) {
        throw std::invalid_argument("sample: --chat-file " + o.chat_file + ", conversation " +
                                    std::to_string(i + 1 - o.chats.size()) + ": " + e.what());
      }
      in.push_back({"chat", widened(tokenizer.encode(text))});
    }
    if (const auto eot = end_of_turn(chat, tokenizer)) {
      if (std::find(decoding.eos.begin(), decoding.eos.end(), eot->second) == decoding.eos.end()) {
        decoding.eos.push_back(eot->second);
        notes.push_back("stopping at the chat template's end of turn " + eot->first + " (" +
                        std::to_string(eot->second) + ") too");
      }
    }
  }
  if (in.empty()) in.push_back({"prompt", encode_prompt(tokenizer, "", c.data.tokenizer_dir)});
  return in;
}

}  // namespace

std::vector<std::string> sample(const TrainConfig& config, const SampleOptions& options,
                                CommPtr world, std::ostream& out) {
  if (config.train.num_threads > 0) at::set_num_threads(config.train.num_threads);
  LoadedModel m = load_model(config, options.checkpoint, options.overrides, options.seed, world);
  const CausalLM& lm = m.lm;
  const auto tokenizer = data::load_tokenizer(m.config.data.tokenizer_dir);
  check_vocabulary_fits(m.config, *tokenizer);
  Decoding decoding = resolve_decoding(options, m.config, *tokenizer, m.notes);
  const std::vector<SampleInput> inputs =
      sample_inputs(options, m.config, *tokenizer, decoding, m.notes);
  for (size_t p = 0; p < inputs.size(); ++p) {
    const size_t n = inputs[p].ids.size();
    if (static_cast<int64_t>(n) + decoding.new_tokens(n) > lm.context_length) {
      // Said, not done silently: transformers' generate() reads past the positions the model was
      // made for (RoPE extrapolates), which a model of learned positions (GPT-2) cannot.
      m.notes.push_back(inputs[p].label + " " + std::to_string(p + 1) + ": its " +
                        std::to_string(n) +
                        " tokens and the new ones pass the model's context of " +
                        std::to_string(lm.context_length) + " tokens; each step reads the last " +
                        std::to_string(lm.context_length) +
                        " (transformers' generate() reads them all, so its text may differ; "
                        "--model.n_positions sets the context)");
    }
  }
  if (world->rank() == 0) {
    for (const auto& note : m.notes) out << "sample: " << note << "\n";
    out << "sample: " << describe(decoding) << "\n";
  }
  std::vector<std::string> texts;
  for (size_t p = 0; p < inputs.size(); ++p) {
    for (int64_t s = 0; s < options.num_samples; ++s) {
      const auto ids =
          generate(lm, inputs[p].ids, decoding, static_cast<uint64_t>(options.seed + s), *world,
                   m.sharded->device());
      texts.push_back(decode_known(*tokenizer, ids));
      if (world->rank() == 0) {
        out << "--- "
            << (inputs.size() > 1 ? inputs[p].label + " " + std::to_string(p + 1) + ", " : "")
            << "sample " << s + 1 << " of " << options.num_samples << " (" << m.source << ")\n"
            << texts.back() << "\n";
      }
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
  if (d.examples ? d.examples->val.examples == 0 : d.val.empty()) {
    throw std::invalid_argument("data: '" + c.data.dataset +
                                "' has no held-out data to evaluate on; set data.val_split above "
                                "0 or data.val_dataset");
  }
  const std::unique_ptr<data::EvalSource> loader = eval_source(c, d, *world);
  EvalResult r;
  r.loss = evaluate(m.lm, *loader, *world, m.sharded->device());
  r.perplexity = std::exp(r.loss);
  r.tokens = loader->num_batches() * c.train.micro_batch_size * world->size() * c.data.seq_len;
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
