// Distributed sampling of a token stream for causal language-model training: the stream (one or
// more TokenRanges) is cut into windows of T + 1 tokens, window j of a range starting at token
// j * T (consecutive windows share one token, as in llm.c, so every token but a range's first is a
// target once). A batch is [B, T + 1] int64: inputs are batch[:, :-1], targets batch[:, 1:].
// Windows never cross a range's end; a range's last (len - 1) % T tokens are not used.
//
// Training order (TrainLoader). Epoch e visits the W windows in the order of a pseudo-random
// permutation seeded by (seed, e) alone; the global batch at each step is the next G = B * world
// windows of that order, and rank r takes the B windows [r * B, (r + 1) * B) of it. Hence:
//  - ranks see disjoint windows within an epoch, and an epoch visits floor(W / G) * G distinct
//    windows (all of them when G divides W); the other W mod G, different each epoch, wait for a
//    later one;
//  - the order does not depend on the world size: for equal B * world, the rank batches of a step
//    concatenated in rank order are exactly the one-process batch of that step (tested), which is
//    what lets a parity test compare world sizes;
//  - the position is two integers (LoaderState): a loader restored from a saved state yields
//    exactly the batches the original would have yielded next.
// The permutation is a keyed Feistel network over the window indices with cycle walking, so it
// takes O(1) memory and is computed per window; it does not depend on the C++ library's
// random-number distributions, so the order is the same with any compiler.
//
// Evaluation (EvalLoader): the same windows in stream order, the same on every run and rank
// slicing; the remainder that does not fill a global batch is left out.
//
// A stream with fewer windows than one global batch is a std::invalid_argument naming its files,
// the window count and what the batch needs. Loaders are single-threaded objects.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/data/token_file.h"

namespace fsdp::data {

struct LoaderOptions {
  int64_t seq_len = 1024;  // T: tokens of input per sequence; a window holds T + 1
  int64_t batch_size = 4;  // B: sequences per rank per batch (the micro-batch)
  int rank = 0;            // this rank, in [0, world_size)
  int world_size = 1;      // ranks that share the stream (data-parallel ranks)
  uint64_t seed = 1337;    // the training order; ignored by EvalLoader
  int64_t vocab_size = 0;  // > 0: a token id >= vocab_size is an error naming file and position
};

// Where a TrainLoader is in its stream; save it with a checkpoint. It counts windows, not steps,
// so it stays meaningful when the loader is restored with another world size or batch size.
struct LoaderState {
  int64_t epoch = 0;
  int64_t position = 0;  // windows of this epoch's order already handed out, over all ranks
  bool operator==(const LoaderState& o) const { return epoch == o.epoch && position == o.position; }
  bool operator!=(const LoaderState& o) const { return !(*this == o); }
};

// One batch for a causal language model: inputs [B, T] int64, targets [B, T] int64 (-100: no
// loss there), and positions [B, T] int64 where the rows hold packed sequences (each restarting
// at 0; fsdp/models/attention.h's packed_layout), undefined where every row is one sequence.
// `masked`: some targets may be -100, so the loss is normalised over the targets that count.
struct Batch {
  at::Tensor inputs, targets, positions;
  bool masked = false;
};

// What the training loop draws batches from: the token windows of a corpus (TrainLoader) or the
// packed examples of an instruction data set (fsdp/data/packing.h).
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual Batch next_batch() = 0;
  virtual LoaderState state() const = 0;
  virtual void set_state(const LoaderState& state) = 0;
};

// What evaluation reads, in the same order on every run: batch i of num_batches().
class EvalSource {
 public:
  virtual ~EvalSource() = default;
  virtual int64_t num_batches() const = 0;
  virtual Batch eval_batch(int64_t i) const = 0;
};

// A bijection of [0, n) drawn from (seed, epoch): the order in which one epoch visits windows.
class WindowPermutation {
 public:
  WindowPermutation(int64_t n, uint64_t seed, int64_t epoch);
  int64_t operator()(int64_t i) const;  // i in [0, n)
  int64_t size() const { return n_; }

 private:
  static constexpr int kRounds = 6;
  uint64_t encrypt(uint64_t x) const;
  int64_t n_;
  int half_bits_;
  uint64_t keys_[kRounds];
};

// The windows of a token stream: opens the ranges' files (checking them) and copies windows out.
class TokenWindows {
 public:
  TokenWindows(const std::vector<TokenRange>& ranges, int64_t seq_len, int64_t vocab_size = 0);
  int64_t size() const { return starts_.empty() ? 0 : starts_.back(); }  // W
  int64_t seq_len() const { return seq_len_; }
  int64_t num_tokens() const { return tokens_; }  // in all ranges
  // Copies window w's T + 1 tokens to out.
  void copy(int64_t w, int64_t* out) const;
  // The file and token offset where window w starts.
  std::pair<std::string, int64_t> locate(int64_t w) const;
  // "<first file> and N more ranges (<tokens> tokens)", for messages.
  std::string describe() const;

 private:
  size_t range_of(int64_t w) const;
  OpenedRanges opened_;
  std::vector<int64_t> starts_;  // starts_[i]: first window of range i; back(): W
  int64_t seq_len_;
  int64_t vocab_size_;
  int64_t tokens_ = 0;
};

// The training order over n rows (windows, or packed rows of examples), as described above: epoch
// e visits the rows in WindowPermutation(n, seed, e)'s order, G = B * world at a step, rank r the
// B rows [r * B, (r + 1) * B) of them. Throws std::invalid_argument (naming `who`, `what` the
// stream holds, and G in `unit`s) when n < G.
class RowOrder {
 public:
  RowOrder(int64_t rows, const LoaderOptions& options, const std::string& who,
           const std::string& what, const std::string& unit = "windows");
  std::vector<int64_t> next_rows() const;  // this rank's rows of the next batch
  void advance();                          // past the next batch
  LoaderState state() const { return state_; }
  void set_state(const LoaderState& state);
  int64_t rows() const { return rows_; }
  int64_t global_batch() const { return global_batch_; }

 private:
  LoaderState advanced() const;  // the state after rolling into a new epoch if needed
  LoaderOptions options_;
  int64_t rows_, global_batch_;
  std::string who_;
  LoaderState state_;
};

// The rows [i * G + rank * B, i * G + (rank + 1) * B) of an evaluation's batch i.
std::vector<int64_t> eval_rows(int64_t i, const LoaderOptions& options);

class TrainLoader : public BatchSource {
 public:
  // Throws std::invalid_argument for bad options or a stream smaller than one global batch, and
  // std::runtime_error for a malformed token file.
  TrainLoader(const std::vector<TokenRange>& ranges, const LoaderOptions& options);

  // This rank's next batch, [B, T + 1] int64; starts the next epoch when the current one has
  // fewer than B * world windows left.
  at::Tensor next();
  // next() as inputs batch[:, :-1] and targets batch[:, 1:].
  Batch next_batch() override;
  // The global window indices next() will return, row by row (for tests and logs).
  std::vector<int64_t> next_windows() const { return order_.next_rows(); }

  LoaderState state() const override { return order_.state(); }
  // Restores a saved state; throws std::invalid_argument for a negative epoch or a position
  // outside [0, num_windows()].
  void set_state(const LoaderState& state) override { order_.set_state(state); }

  int64_t num_windows() const { return windows_.size(); }         // W
  int64_t global_batch() const { return order_.global_batch(); }  // G = B * world
  int64_t steps_per_epoch() const { return windows_.size() / global_batch(); }
  const TokenWindows& windows() const { return windows_; }
  const LoaderOptions& options() const { return options_; }

 private:
  LoaderOptions options_;
  TokenWindows windows_;
  RowOrder order_;
};

class EvalLoader : public EvalSource {
 public:
  // max_batches > 0 caps num_batches(); throws like TrainLoader's constructor.
  EvalLoader(const std::vector<TokenRange>& ranges, const LoaderOptions& options,
             int64_t max_batches = 0);

  int64_t num_batches() const override { return num_batches_; }
  // This rank's part of global batch i in [0, num_batches()): windows i * G + rank * B + b.
  at::Tensor batch(int64_t i) const;
  Batch eval_batch(int64_t i) const override;  // batch(i) as inputs and targets
  const TokenWindows& windows() const { return windows_; }

 private:
  LoaderOptions options_;
  TokenWindows windows_;
  int64_t num_batches_;
};

}  // namespace fsdp::data
