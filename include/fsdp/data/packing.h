// Packing instruction examples (fsdp/data/examples.h) into rows of T tokens, and the loaders that
// read the rows.
//
// Rows. With packing, examples are placed first-fit in file order: each goes into the first row
// with room for it, a new row when none has, so no example is split. Row r's tokens are its
// examples' tokens one after another, then padding to T. Each example's positions start at 0
// (transformers' position_ids for packed sequences, from which fsdp/models/attention.h's
// packed_layout keeps attention inside each example); padding continues the last example's
// positions. Target j of a row is the row's token j + 1 where that token belongs to the same
// example and is flagged a target, else -100: no loss crosses from one example into the next, as
// transformers' DataCollatorWithFlattening labels a packed row. Without packing each example is a
// row of its own, padded. An example longer than T is refused (naming its index) unless
// `truncate`, which keeps its first T tokens.
//
// Padding is `pad_id` with target -100 after an example's last token: causal attention keeps it
// from every real token, so it changes neither the loss nor any gradient.
//
// Loaders. ExampleLoader and ExampleEvalLoader take rows exactly as TrainLoader and EvalLoader take
// windows (fsdp/data/loader.h): the same permutation, rank slices and LoaderState.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/data/examples.h"
#include "fsdp/data/loader.h"
#include "fsdp/data/token_file.h"

namespace fsdp::data {

struct PackingOptions {
  int64_t seq_len = 1024;  // T: tokens a row
  bool pack = true;        // several examples a row (first-fit); false: one example a row
  // With packing: attention stays inside each example (positions restart, a block-diagonal mask);
  // false: examples see the earlier examples of their row, positions run 0..T-1 (no mask: faster,
  // not the same model as training them apart).
  bool attend_within = true;
  bool truncate = false;   // an example longer than T keeps its first T tokens; false: refused
  int32_t pad_id = 0;      // the token id padding takes
  int64_t vocab_size = 0;  // > 0: a token id >= vocab_size is an error naming file and position
};

class PackedExamples {
 public:
  // Reads the split's flags to find its examples (checking them against its tokens) and packs
  // them. Throws std::runtime_error naming the file for malformed flags, std::invalid_argument
  // naming the example for one longer than T when !truncate.
  PackedExamples(const ExampleSplit& split, const PackingOptions& options);

  int64_t rows() const { return static_cast<int64_t>(row_begin_.size()) - 1; }
  int64_t examples() const { return static_cast<int64_t>(starts_.size()); }
  int64_t tokens() const { return tokens_; }        // placed in rows (after truncation)
  int64_t targets() const { return targets_; }      // of those, the targets
  int64_t truncated() const { return truncated_; }  // examples cut to T
  // The fraction of the rows' tokens that are padding.
  double padding_fraction() const;
  const PackingOptions& options() const { return options_; }

  // Row r's tokens, targets and positions, T of each.
  void fill(int64_t row, int64_t* tokens, int64_t* targets, int64_t* positions) const;
  // Rows `ids` as a Batch ([B, T] each; positions undefined unless packed with attend_within).
  Batch batch(const std::vector<int64_t>& ids) const;

 private:
  void find_examples();
  void pack();
  std::string describe_example(int64_t i) const;
  PackingOptions options_;
  ExampleSplit split_;
  TokenFile tokens_file_, flags_file_;
  std::vector<int64_t> starts_, lengths_;  // example i: lengths_[i] tokens from starts_[i]
  std::vector<int64_t> order_;             // examples, row by row
  std::vector<int64_t> row_begin_;         // row r: order_[row_begin_[r], row_begin_[r + 1])
  int64_t tokens_ = 0, targets_ = 0, truncated_ = 0;
};

class ExampleLoader : public BatchSource {
 public:
  // Throws std::invalid_argument for bad options or fewer rows than one global batch.
  ExampleLoader(const ExampleSplit& split, const PackingOptions& packing,
                const LoaderOptions& options);
  Batch next_batch() override;
  LoaderState state() const override { return order_.state(); }
  void set_state(const LoaderState& state) override { order_.set_state(state); }
  const PackedExamples& rows() const { return rows_; }

 private:
  PackedExamples rows_;
  RowOrder order_;
};

class ExampleEvalLoader : public EvalSource {
 public:
  // max_batches > 0 caps num_batches(); throws like ExampleLoader.
  ExampleEvalLoader(const ExampleSplit& split, const PackingOptions& packing,
                    const LoaderOptions& options, int64_t max_batches = 0);
  int64_t num_batches() const override { return num_batches_; }
  Batch eval_batch(int64_t i) const override;
  const PackedExamples& rows() const { return rows_; }

 private:
  PackedExamples rows_;
  LoaderOptions options_;
  int64_t num_batches_ = 0;
};

}  // namespace fsdp::data
