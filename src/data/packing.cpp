// Packing examples into rows and reading them (fsdp/data/packing.h): the examples found from
// their flags, first-fit placement through a tree of the rows' free room, and a row's tokens,
// targets and positions.
#include "fsdp/data/packing.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>

namespace fsdp::data {
namespace {

constexpr int64_t kIgnore = -100;  // a target that takes no part in the loss
constexpr int64_t kScanChunk = int64_t{1} << 20;

// The leftmost of n slots whose free room is at least `need`, in O(log n): a max-tree over the
// slots' room. Every slot starts with `room`, so an unused slot always fits what a row can hold.
class FirstFit {
 public:
  FirstFit(int64_t n, int64_t room) : size_(1) {
    while (size_ < n) size_ *= 2;
    tree_.assign(static_cast<size_t>(2 * size_), room);
  }
  // The slot chosen for `need`, its room reduced by `need`.
  int64_t place(int64_t need) {
    size_t node = 1;
    while (node < static_cast<size_t>(size_))
      node = tree_[2 * node] >= need ? 2 * node : 2 * node + 1;
    tree_[node] -= need;
    for (size_t up = node / 2; up >= 1; up /= 2)
      tree_[up] = std::max(tree_[2 * up], tree_[2 * up + 1]);
    return static_cast<int64_t>(node) - size_;
  }

 private:
  int64_t size_;
  std::vector<int64_t> tree_;
};

}  // namespace

PackedExamples::PackedExamples(const ExampleSplit& split, const PackingOptions& options)
    : options_(options),
      split_(split),
      tokens_file_(TokenFile::open(split.tokens_path)),
      flags_file_(TokenFile::open(split.flags_path)) {
  if (options.seq_len < 1) {
    throw std::invalid_argument("PackingOptions: seq_len " + std::to_string(options.seq_len) +
                                " must be >= 1");
  }
  if (flags_file_.size() != tokens_file_.size()) {
    throw std::runtime_error("examples: " + split.flags_path + " holds " +
                             std::to_string(flags_file_.size()) + " flags for the " +
                             std::to_string(tokens_file_.size()) + " tokens of " +
                             split.tokens_path);
  }
  find_examples();
  pack();
}

// One pass over the flags, a chunk at a time: where each example starts, its targets, and that
// every flag is one the writer gives.
void PackedExamples::find_examples() {
  const int64_t n = flags_file_.size();
  std::vector<int64_t> chunk;
  for (int64_t begin = 0; begin < n; begin += kScanChunk) {
    const int64_t count = std::min(kScanChunk, n - begin);
    chunk.resize(static_cast<size_t>(count));
    flags_file_.read(begin, count, chunk.data());
    for (int64_t i = 0; i < count; ++i) {
      const int64_t f = chunk[static_cast<size_t>(i)];
      if (f != 0 && f != kTokenTarget && f != kTokenStarts) {
        throw std::runtime_error("examples: " + split_.flags_path + ": flag " + std::to_string(f) +
                                 " at token " + std::to_string(begin + i) +
                                 " (0, 1 or 2 are written); delete the cache entry to rebuild it");
      }
      if (begin + i == 0 && f != kTokenStarts) {
        throw std::runtime_error("examples: " + split_.flags_path +
                                 ": the first token does not start an example");
      }
      if (f == kTokenStarts) starts_.push_back(begin + i);
      // Only the first seq_len tokens of an example are kept (pack() refuses or truncates the
      // rest): its targets among them are the rows' targets.
      if (f == kTokenTarget && begin + i - starts_.back() < options_.seq_len) ++targets_;
    }
  }
  lengths_.resize(starts_.size());
  for (size_t i = 0; i < starts_.size(); ++i) {
    const int64_t end = i + 1 < starts_.size() ? starts_[i + 1] : n;
    lengths_[i] = end - starts_[i];
  }
}

void PackedExamples::pack() {
  const int64_t T = options_.seq_len, n = examples();
  for (int64_t i = 0; i < n; ++i) {
    if (lengths_[i] <= T) continue;
    if (!options_.truncate) {
      throw std::invalid_argument(describe_example(i) + " has " + std::to_string(lengths_[i]) +
                                  " tokens, more than data.seq_len " + std::to_string(T) +
                                  " (set data.truncate true to keep the first " +
                                  std::to_string(T) + " of such examples, or raise data.seq_len)");
    }
    lengths_[i] = T;
    ++truncated_;
  }
  std::vector<int64_t> row_of(static_cast<size_t>(n));
  int64_t rows = 0;
  if (options_.pack) {
    FirstFit fit(std::max<int64_t>(n, 1), T);
    for (int64_t i = 0; i < n; ++i) {
      row_of[i] = fit.place(lengths_[i]);
      rows = std::max(rows, row_of[i] + 1);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) row_of[i] = i;
    rows = n;
  }
  // Examples grouped by row, in file order within a row (a counting sort).
  row_begin_.assign(static_cast<size_t>(rows + 1), 0);
  for (int64_t i = 0; i < n; ++i) ++row_begin_[row_of[i] + 1];
  for (int64_t r = 0; r < rows; ++r) row_begin_[r + 1] += row_begin_[r];
  order_.resize(static_cast<size_t>(n));
  std::vector<int64_t> next(row_begin_.begin(), row_begin_.end() - 1);
  for (int64_t i = 0; i < n; ++i) order_[next[row_of[i]]++] = i;
  for (int64_t i = 0; i < n; ++i) tokens_ += lengths_[i];
}

// "'chat.jsonl' line 17" where the split knows its lines, else the example's index.
std::string PackedExamples::describe_example(int64_t i) const {
  try {
    const TokenFile lines = TokenFile::open(split_.lines_path);
    if (lines.size() == examples()) {
      int64_t line = 0;
      lines.read(i, 1, &line);
      return "'" + split_.source + "' line " + std::to_string(line);
    }
  } catch (const std::exception&) {
    // an example set without line numbers: its index says which
  }
  return "example " + std::to_string(i + 1) + " of " + split_.tokens_path;
}

double PackedExamples::padding_fraction() const {
  const double capacity = static_cast<double>(rows()) * static_cast<double>(options_.seq_len);
  return capacity > 0 ? 1.0 - static_cast<double>(tokens_) / capacity : 0.0;
}

void PackedExamples::fill(int64_t row, int64_t* tokens, int64_t* targets,
                          int64_t* positions) const {
  if (row < 0 || row >= rows()) {
    throw std::out_of_range("PackedExamples: row " + std::to_string(row) + " outside [0, " +
                            std::to_string(rows()) + ")");
  }
  const int64_t T = options_.seq_len;
  std::vector<int64_t> flags;
  int64_t at = 0;
  for (int64_t k = row_begin_[row]; k < row_begin_[row + 1]; ++k) {
    const int64_t e = order_[k], len = lengths_[e];
    tokens_file_.read(starts_[e], len, tokens + at, options_.vocab_size);
    flags.resize(static_cast<size_t>(len));
    flags_file_.read(starts_[e], len, flags.data());
    for (int64_t j = 0; j < len; ++j) {
      positions[at + j] = j;
      targets[at + j] = j + 1 < len && (flags[j + 1] & kTokenTarget) ? tokens[at + j + 1] : kIgnore;
    }
    at += len;
  }
  const int64_t last = at > 0 ? positions[at - 1] : -1;
  for (int64_t j = at; j < T; ++j) {
    tokens[j] = options_.pad_id;
    targets[j] = kIgnore;
    positions[j] = last + 1 + (j - at);
  }
}

Batch PackedExamples::batch(const std::vector<int64_t>& ids) const {
  const int64_t B = static_cast<int64_t>(ids.size()), T = options_.seq_len;
  at::Tensor tokens = at::empty({B, T}, at::kLong), targets = at::empty({B, T}, at::kLong),
             positions = at::empty({B, T}, at::kLong);
  for (int64_t b = 0; b < B; ++b) {
    fill(ids[b], tokens.data_ptr<int64_t>() + b * T, targets.data_ptr<int64_t>() + b * T,
         positions.data_ptr<int64_t>() + b * T);
  }
  // One example a row, or attention across a row: the plain layout, positions 0..T-1.
  const bool layout = options_.pack && options_.attend_within;
  return Batch{tokens, targets, layout ? positions : at::Tensor(), true};
}

namespace {
std::string rows_held(const PackedExamples& r, const ExampleSplit& split) {
  return "'" + split.source + "': " + std::to_string(r.examples()) + " examples make " +
         std::to_string(r.rows()) + " rows of data.seq_len " + std::to_string(r.options().seq_len) +
         " tokens";
}
}  // namespace

ExampleLoader::ExampleLoader(const ExampleSplit& split, const PackingOptions& packing,
                             const LoaderOptions& options)
    : rows_(split, packing),
      order_(rows_.rows(), options, "ExampleLoader", rows_held(rows_, split), "rows") {}

Batch ExampleLoader::next_batch() {
  Batch b = rows_.batch(order_.next_rows());
  order_.advance();
  return b;
}

ExampleEvalLoader::ExampleEvalLoader(const ExampleSplit& split, const PackingOptions& packing,
                                     const LoaderOptions& options, int64_t max_batches)
    : rows_(split, packing), options_(options) {
  const RowOrder order(rows_.rows(), options, "ExampleEvalLoader", rows_held(rows_, split), "rows");
  num_batches_ = rows_.rows() / order.global_batch();
  if (max_batches > 0) num_batches_ = std::min(num_batches_, max_batches);
}

Batch ExampleEvalLoader::eval_batch(int64_t i) const {
  if (i < 0 || i >= num_batches_) {
    throw std::out_of_range("ExampleEvalLoader: batch " + std::to_string(i) + " outside [0, " +
                            std::to_string(num_batches_) + ")");
  }
  return rows_.batch(eval_rows(i, options_));
}

}  // namespace fsdp::data
