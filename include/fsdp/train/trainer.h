// The trainer: what `fsdp-train` runs. train() reads top to bottom as the steps of a run: check the
// world against the config, prepare the corpus, build the model, shard it, build the optimizer,
// resume from a checkpoint, then loop (accumulate micro-batches, clip, step, log, evaluate, save).
// sample() loads a checkpoint into a model and generates text from a prompt.
//
// Both are collectives over `world`: every rank calls them with the same config. Rank 0 alone
// writes to `out` (progress, log lines, samples) and to the metrics file; errors are exceptions
// (ConfigError, CheckpointError, std::invalid_argument, std::runtime_error) that name the key,
// file or rank at fault, thrown on every rank where a collective decision is involved.
//
// What a checkpoint holds besides the tensors (the train state, JSON): the step, the data loader's
// position, and the whole config as YAML, so that `sample` rebuilds the model from the checkpoint
// alone and a resumed run can refuse a checkpoint of another model.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "fsdp/comm.h"
#include "fsdp/config/config.h"

namespace fsdp {

// One logged point of a run; also a line of the metrics file (JSONL).
struct StepMetrics {
  int64_t step = 0;            // optimizer steps done (1-based: the first step logs 1)
  double loss = 0;             // training loss of this step, averaged over ranks and micro-batches
  double lr = 0;               // learning rate the step used
  double grad_norm = 0;        // global gradient norm before clipping
  double tokens_per_s = 0;     // all ranks together, since the previous log line
  double elapsed_s = 0;        // since the loop began (this process)
  int64_t peak_rss_bytes = 0;  // the largest peak resident set size over the ranks
  // On GPUs: the largest peak over the ranks of the bytes in tensors on the GPU (PyTorch's
  // torch.cuda.max_memory_allocated); -1 when training on the CPU.
  int64_t peak_gpu_bytes = -1;
  double val_loss = -1;  // set (>= 0) on steps that evaluated
  // fp16 (mixed_precision: fp16): the loss scale this step used, and whether the step was skipped
  // because a rank's gradients held an inf or NaN at that scale; -1 and false otherwise.
  double loss_scale = -1;
  bool skipped = false;
};

// What a finished run reports.
struct TrainSummary {
  int64_t start_step = 0;                          // 0, or the step a resumed run started from
  int64_t steps = 0;                               // the step the run ended at
  double first_val_loss = -1, last_val_loss = -1;  // -1: never evaluated
  double last_loss = -1;
  // fp16: steps skipped by the loss scaler (a rank's gradients held an inf or NaN); else 0.
  int64_t skipped_steps = 0;
  float loss_scale = -1;             // fp16: the scale the next step would use; else -1
  std::string last_checkpoint;       // empty when none was written
  std::vector<StepMetrics> history;  // every logged step, in order
};

// Test seam: called on every rank after each optimizer step (1-based step number).
using StepCallback = std::function<void(int64_t step)>;

TrainSummary train(const TrainConfig& config, CommPtr world, std::ostream& out,
                   const StepCallback& after_step = {});

// Generates options.num_samples continuations of options.prompt from the checkpoint at
// options.checkpoint (a step folder, or a root with `latest`; empty: the model.pretrained folder
// when that is set, else config.train.checkpoint_dir), with the model the checkpoint's own config
// (or the folder's config.json) describes. A checkpoint's config has its relative paths resolved
// against the folder its run started in and options.overrides on top (each printed; one that
// changes the model is a ConfigError); device and threads are config's. Returns the texts (prompt
// included), also printed to `out` on rank 0. (src/train/inference.cpp)
std::vector<std::string> sample(const TrainConfig& config, const SampleOptions& options,
                                CommPtr world, std::ostream& out);

struct EvalResult {
  double loss = 0;        // mean next-token cross entropy over the evaluated tokens
  double perplexity = 0;  // exp(loss)
  int64_t tokens = 0;     // predictions scored, over every rank
  std::string source;     // the checkpoint step or folder evaluated
};

// The loss and perplexity of the model from options.checkpoint (or model.pretrained, as sample
// takes it) on held-out data (data.val_dataset, or the last data.val_split of data.dataset; at
// most train.eval_batches batches of train.micro_batch_size sequences per rank), read with the
// model's tokenizer. The settings are the checkpoint's saved config with options.overrides on top
// (config's own for a model folder). No optimizer state is built. Printed on rank 0.
EvalResult evaluate_model(const TrainConfig& config, const EvalOptions& options, CommPtr world,
                          std::ostream& out);

}  // namespace fsdp
