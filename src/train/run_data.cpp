// RunData (run_data.h): preparing the corpus for a run, and scoring a model on held-out data.
#include "train/run_data.h"

#include <ATen/core/grad_mode.h>

#include "fsdp/data/tokenizer.h"
#include "fsdp/models/gpt2.h"

namespace fsdp {

namespace {

// Every token below model.vocab_size, checked before the first step rather than when a bad
// token's window is drawn (each file is scanned once; data.cache_dir remembers the result).
void check_tokens(const TrainConfig& c, const RunData& d) {
  std::vector<data::TokenRange> all = d.corpus.train;
  all.insert(all.end(), d.val.begin(), d.val.end());
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

RunData prepare_data(const TrainConfig& c, RunLog& log) {
  data::CorpusOptions options;
  options.cache_dir = c.data.cache_dir;
  options.tokenizer_dir = c.data.tokenizer_dir;
  options.sotu_dir = c.data.sotu_dir;
  options.val_fraction = c.data.val_dataset.empty() ? c.data.val_split : 0.0;
  RunData d{data::prepare_corpus(c.data.dataset, options), {}};
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

double evaluate(const CausalLM& lm, const data::EvalLoader& loader, Comm& world,
                c10::Device device) {
  at::NoGradGuard no_grad;
  const int64_t T = loader.windows().seq_len();
  double sum = 0;
  for (int64_t i = 0; i < loader.num_batches(); ++i) {
    at::Tensor b = loader.batch(i).to(device);
    sum += gpt2_loss(lm.forward(b.narrow(1, 0, T)), b.narrow(1, 1, T)).item<double>();
  }
  return average_over_ranks(sum / static_cast<double>(loader.num_batches()), world);
}

}  // namespace fsdp
