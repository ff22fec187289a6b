// What a run reads and how a model is scored on it, shared by `fsdp-train` (train) and
// `fsdp-train eval`: the corpus and its validation part prepared from data.*, the loaders'
// options, and the validation loss averaged over ranks.
#pragma once

#include <c10/core/Device.h>

#include <memory>
#include <optional>
#include <vector>

#include "factory/model_factory.h"
#include "fsdp/comm.h"
#include "fsdp/config/config.h"
#include "fsdp/data/corpus.h"
#include "fsdp/data/examples.h"
#include "fsdp/data/loader.h"
#include "train/run_log.h"

namespace fsdp::data {
class Tokenizer;
}

namespace fsdp {

// What a run reads: a corpus (text or token files) or instruction examples (a JSONL file).
struct RunData {
  data::Corpus corpus;
  std::vector<data::TokenRange> val;
  std::optional<data::ExampleCorpus> examples;  // data.dataset is JSONL (data.format)
};

// The data data.dataset names (tokenized into data.cache_dir, or token files read in place) and
// its validation part (data.val_dataset, or the last data.val_split of it), every token checked
// against model.vocab_size; logged. Throws std::invalid_argument naming the key.
RunData prepare_data(const TrainConfig& c, RunLog& log);

// The training batches: the corpus's windows, or the examples packed into rows (logged). Throws
// std::invalid_argument naming data.dataset when there is too little for one global batch.
std::unique_ptr<data::BatchSource> train_source(const TrainConfig& c, const RunData& d,
                                                const Comm& world, RunLog& log);
// The validation batches (at most train.eval_batches of them).
std::unique_ptr<data::EvalSource> eval_source(const TrainConfig& c, const RunData& d,
                                              const Comm& world);

// Throws std::invalid_argument naming data.tokenizer_dir when `tokenizer` gives ids the model's
// embedding does not hold (its largest id against model.vocab_size).
void check_vocabulary_fits(const TrainConfig& c, const data::Tokenizer& tokenizer);

data::LoaderOptions loader_options(const TrainConfig& c, const Comm& world);

// `value` averaged over the ranks of `world` (in fp32, as every rank reports it).
double average_over_ranks(double value, Comm& world);

// The model's logits for a batch on `device`: packed rows through their layout.
at::Tensor forward_batch(const CausalLM& lm, const data::Batch& b, c10::Device device,
                         bool non_blocking = false);

// The batch's loss on `device`: the mean over its targets (`mean`) or their sum, packed rows
// through their layout; next_token_loss, fused when `fused` (train.fused_loss).
at::Tensor batch_loss(const CausalLM& lm, const data::Batch& b, c10::Device device, bool mean,
                      bool fused, bool non_blocking = false);

// The mean next-token loss of `lm` over every target of every batch of `source` on every rank.
double evaluate(const CausalLM& lm, const data::EvalSource& source, Comm& world, c10::Device device,
                bool fused = false);

}  // namespace fsdp
