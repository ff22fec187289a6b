// RunData (run_data.h): preparing the corpus for a run, and scoring a model on held-out data.
#include "train/run_data.h"

#include <ATen/core/grad_mode.h>

#include <sstream>

#include "fsdp/data/packing.h"
#include "fsdp/data/tokenizer.h"

namespace fsdp {

namespace {

// Every token below model.vocab_size, checked before the first step rather than when a bad
// token's window is drawn (each file is scanned once; data.cache_dir remembers the result).
void check_tokens(const TrainConfig& c, const RunData& d) {
  std::vector<data::TokenRange> all = d.corpus.train;
  all.insert(all.end(), d.val.begin(), d.val.end());
  if (d.examples) {
    all.push_back({d.examples->train.tokens_path, 0, -1});
    all.push_back({d.examples->val.tokens_path, 0, -1});
  }
  try {
    data::check_vocabulary(all, c.model.vocab_size, c.data.cache_dir);
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(std::string("data: ") + e.what() +
                                " (model.vocab_size; checked before the first step)");
  }
}

}  // namespace

// A tokenizer whose ids run past the embedding would fail at the first rare token; say so first.
// Its largest id counts, not its entries: a vocabulary renumbered past the embedding has few.
void check_vocabulary_fits(const TrainConfig& c, const data::Tokenizer& tokenizer) {
  const int64_t top = tokenizer.max_id();
  if (top >= c.model.vocab_size) {
    throw std::invalid_argument(
        "data.tokenizer_dir: the tokenizer in " + c.data.tokenizer_dir + " has ids up to " +
        std::to_string(top) + " (" + std::to_string(tokenizer.vocab_size()) +
        " tokens), more than the model's embedding holds (model.vocab_size " +
        std::to_string(c.model.vocab_size) + ")");
  }
}

namespace {

std::string percent(double fraction) {
  std::ostringstream s;
  s.precision(3);
  s << 100.0 * fraction << " %";
  return s.str();
}

// A JSONL data set (data.format): its examples tokenized into the cache, and what they hold.
RunData prepare_examples(const TrainConfig& c, data::DataFormat format, RunLog& log) {
  if (!c.data.val_dataset.empty()) {
    throw std::invalid_argument("data.val_dataset: a JSONL data set (data.format " +
                                std::string(data::to_string(format)) +
                                ") holds out its last data.val_split examples; a separate "
                                "validation file is not supported for it yet");
  }
  data::ExampleOptions o;
  o.format = format;
  o.train_on = c.data.train_on;
  o.tokenizer_dir = c.data.tokenizer_dir;
  o.cache_dir = c.data.cache_dir;
  o.val_fraction = c.data.val_split;
  RunData d;
  try {
    d.examples = data::prepare_examples(c.data.dataset, o);
  } catch (const std::exception& e) {
    throw std::invalid_argument("data.dataset: " + std::string(e.what()));
  }
  check_vocabulary_fits(c, *data::load_tokenizer(c.data.tokenizer_dir));
  check_tokens(c, d);
  const data::ExampleCorpus& x = *d.examples;
  const bool everything =
      format == data::DataFormat::kJsonlText || c.data.train_on == data::TrainOn::kAll;
  log.info("data: '" + c.data.dataset + "' read as " + data::to_string(format) +
           (c.data.format == data::DataFormat::kAuto ? " (from its first line; data.format)" : "") +
           ": " + std::to_string(x.train.examples) + " training examples, " +
           std::to_string(x.train.tokens) + " tokens, " + std::to_string(x.train.targets) +
           " of them trained on (" +
           (everything ? "every token"
                       : std::string("data.train_on ") + data::to_string(c.data.train_on)) +
           "); " + std::to_string(x.val.examples) + " validation examples" +
           (x.built ? ", tokenized now" : ", from the cache"));
  if (x.boundary_mismatches > 0) {
    log.info("data: in " + std::to_string(x.boundary_mismatches) +
             " examples the answer's first tokens merge with the prompt's last ones; the "
             "prompt's own token count marks where the loss starts there, as TRL does");
  }
  if (c.train.eval_every > 0 && x.val.examples == 0) {
    throw std::invalid_argument("train.eval_every: data.dataset '" + c.data.dataset +
                                "' has no validation examples; set data.val_split, or "
                                "train.eval_every: 0");
  }
  return d;
}

}  // namespace

RunData prepare_data(const TrainConfig& c, RunLog& log) {
  data::DataFormat format;
  try {
    format = data::detect_format(c.data.dataset, c.data.format);
  } catch (const std::exception& e) {
    throw std::invalid_argument("data.dataset: " + std::string(e.what()));
  }
  if (format != data::DataFormat::kText) return prepare_examples(c, format, log);
  data::CorpusOptions options;
  options.cache_dir = c.data.cache_dir;
  options.tokenizer_dir = c.data.tokenizer_dir;
  options.sotu_dir = c.data.sotu_dir;
  options.val_fraction = c.data.val_dataset.empty() ? c.data.val_split : 0.0;
  RunData d{data::prepare_corpus(c.data.dataset, options), {}, std::nullopt};
  d.val = d.corpus.val;
  std::string validation =
      std::to_string(d.corpus.val_tokens) + " validation (" + d.corpus.split + ")";
  if (!c.data.val_dataset.empty()) {
    data::Corpus held_out = data::prepare_corpus(c.data.val_dataset, options);
    d.val = held_out.train;
    validation = std::to_string(held_out.train_tokens) + " validation from data.val_dataset '" +
                 c.data.val_dataset + "'";
  }
  if (!d.corpus.cache_entry.empty()) {
    check_vocabulary_fits(c, *data::load_tokenizer(c.data.tokenizer_dir));
  }
  check_tokens(c, d);
  // Token files are read where they lie; only text is tokenized into (or found in) the cache.
  const bool token_files = d.corpus.cache_entry.empty();
  log.info("data: " +
           (token_files ? "token file(s) '" + c.data.dataset + "'" : "'" + d.corpus.name + "'") +
           ": " + std::to_string(d.corpus.train_tokens) + " training tokens, " + validation +
           (token_files      ? ", read in place"
            : d.corpus.built ? ", tokenized now"
                             : ", from the cache"));
  if (c.train.eval_every > 0 && d.val.empty()) {
    throw std::invalid_argument("train.eval_every: data.dataset '" + c.data.dataset +
                                "' has no validation data; set data.val_split or "
                                "data.val_dataset, or train.eval_every: 0");
  }
  return d;
}

namespace {

data::PackingOptions packing_options(const TrainConfig& c) {
  data::PackingOptions p;
  p.seq_len = c.data.seq_len;
  p.pack = c.data.packing;
  p.attend_within = !c.data.cross_example_attention;
  p.truncate = c.data.truncate;
  p.vocab_size = c.model.vocab_size;
  return p;
}

}  // namespace

std::unique_ptr<data::BatchSource> train_source(const TrainConfig& c, const RunData& d,
                                                const Comm& world, RunLog& log) {
  try {
    if (!d.examples) {
      return std::make_unique<data::TrainLoader>(d.corpus.train, loader_options(c, world));
    }
    auto loader = std::make_unique<data::ExampleLoader>(d.examples->train, packing_options(c),
                                                        loader_options(c, world));
    const data::PackedExamples& rows = loader->rows();
    log.info("data: " + std::to_string(rows.examples()) + " examples " +
             (c.data.packing ? "packed first-fit into " : "one a row in ") +
             std::to_string(rows.rows()) + " rows of " + std::to_string(c.data.seq_len) +
             " tokens, " + percent(rows.padding_fraction()) + " of them padding" +
             (!c.data.packing ? ""
              : c.data.cross_example_attention
                  ? "; examples attend across their row (data.cross_example_attention)"
                  : "; each example attends within itself, its positions from 0") +
             (rows.truncated() > 0
                  ? "; " + std::to_string(rows.truncated()) + " truncated to data.seq_len"
                  : ""));
    return loader;
  } catch (const std::invalid_argument& e) {
    // The loader names the tokenized file in the cache; the user knows the name they gave.
    throw std::invalid_argument(d.examples ? std::string("data.dataset: ") + e.what()
                                           : "data.dataset '" + c.data.dataset + "': " + e.what());
  }
}

std::unique_ptr<data::EvalSource> eval_source(const TrainConfig& c, const RunData& d,
                                              const Comm& world) {
  if (!d.examples) {
    return std::make_unique<data::EvalLoader>(d.val, loader_options(c, world),
                                              c.train.eval_batches);
  }
  try {
    return std::make_unique<data::ExampleEvalLoader>(
        d.examples->val, packing_options(c), loader_options(c, world), c.train.eval_batches);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("data.val_split: the validation examples of '" + c.data.dataset +
                                "': " + e.what());
  }
}

data::LoaderOptions loader_options(const TrainConfig& c, const Comm& world) {
  data::LoaderOptions o;
  o.seq_len = c.data.seq_len;
  o.batch_size = c.train.micro_batch_size;
  o.rank = world.rank();
  o.world_size = world.size();
  o.seed = static_cast<uint64_t>(c.train.seed);
  o.vocab_size = c.model.vocab_size;
  return o;
}

double average_over_ranks(double value, Comm& world) {
  float v = static_cast<float>(value);
  world.all_reduce(&v, 1, DType::kFloat32, ReduceOp::kAvg);
  return v;
}

namespace {
at::Tensor on_device(const at::Tensor& t, c10::Device device, bool non_blocking) {
  return device.is_cpu() ? t : t.pin_memory().to(device, non_blocking);
}
}  // namespace

at::Tensor forward_batch(const CausalLM& lm, const data::Batch& b, c10::Device device,
                         bool non_blocking) {
  if (!b.positions.defined()) return lm.forward(on_device(b.inputs, device, non_blocking));
  return lm.forward_packed(on_device(b.inputs, device, non_blocking),
                           packed_layout(b.positions, device));
}

at::Tensor batch_loss(const CausalLM& lm, const data::Batch& b, c10::Device device, bool mean,
                      bool fused, bool non_blocking) {
  const SequenceLayout layout =
      b.positions.defined() ? packed_layout(b.positions, device) : SequenceLayout{};
  return next_token_loss(lm, on_device(b.inputs, device, non_blocking),
                         on_device(b.targets, device, non_blocking), fused, layout, mean);
}

// Sums of the loss and of the targets over every rank's batches; their ratio is the mean over
// all targets, as one process over the whole validation set would take it.
double evaluate(const CausalLM& lm, const data::EvalSource& source, Comm& world, c10::Device device,
                bool fused) {
  at::NoGradGuard no_grad;
  float sum = 0;
  int64_t count = 0;
  for (int64_t i = 0; i < source.num_batches(); ++i) {
    const data::Batch b = source.eval_batch(i);
    sum += batch_loss(lm, b, device, /*mean=*/false, fused).item<float>();
    count += b.targets.ne(-100).sum().item<int64_t>();
  }
  world.all_reduce(&sum, 1, DType::kFloat32, ReduceOp::kSum);
  world.all_reduce(&count, 1, DType::kInt64, ReduceOp::kSum);
  return count > 0 ? sum / static_cast<double>(count) : 0.0;
}

}  // namespace fsdp
