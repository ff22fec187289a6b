// The window permutation, the window index over token ranges and the two loaders
// (fsdp/data/loader.h). Everything a batch contains is a function of (options, state), so the
// loaders keep no other mutable state: resuming is setting the state.
#include "fsdp/data/loader.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>

namespace fsdp::data {
namespace {

// splitmix64's finaliser: a fast, well-mixed 64-bit hash used as the Feistel round function and
// to derive round keys.
uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

void check_options(const LoaderOptions& o) {
  auto bad = [](const std::string& what) { throw std::invalid_argument("LoaderOptions: " + what); };
  if (o.seq_len < 1) bad("seq_len " + std::to_string(o.seq_len) + " must be >= 1");
  if (o.batch_size < 1) bad("batch_size " + std::to_string(o.batch_size) + " must be >= 1");
  if (o.world_size < 1) bad("world_size " + std::to_string(o.world_size) + " must be >= 1");
  if (o.rank < 0 || o.rank >= o.world_size)
    bad("rank " + std::to_string(o.rank) + " outside [0, " + std::to_string(o.world_size) + ")");
}

// The global batch in rows, checked against the stream's size. `what`: "<where> holds N windows of
// seq_len + 1 = K tokens", say.
int64_t checked_global_batch(int64_t rows, const LoaderOptions& o, const std::string& who,
                             const std::string& what, const std::string& unit = "windows") {
  const int64_t g = o.batch_size * o.world_size;
  if (rows < g)
    throw std::invalid_argument(
        who + ": " + what + "; one global batch needs batch_size x world_size = " +
        std::to_string(o.batch_size) + " x " + std::to_string(o.world_size) + " = " +
        std::to_string(g) + " " + unit + " (use a smaller batch or sequence, or more data)");
  return g;
}

std::string windows_held(const TokenWindows& w, const LoaderOptions& o) {
  return w.describe() + " holds " + std::to_string(w.size()) +
         " windows of seq_len + 1 = " + std::to_string(o.seq_len + 1) + " tokens";
}

Batch as_inputs_and_targets(const at::Tensor& b) {
  const int64_t T = b.size(1) - 1;
  return Batch{b.narrow(1, 0, T), b.narrow(1, 1, T), at::Tensor(), false};
}

at::Tensor gather(const TokenWindows& w, const std::vector<int64_t>& ids) {
  const int64_t n = w.seq_len() + 1;
  at::Tensor out = at::empty({static_cast<int64_t>(ids.size()), n}, at::kLong);
  int64_t* p = out.data_ptr<int64_t>();
  for (size_t i = 0; i < ids.size(); ++i) w.copy(ids[i], p + static_cast<int64_t>(i) * n);
  return out;
}

}  // namespace

// [Note: window permutation] A balanced Feistel network permutes [0, 4^k) for the smallest
// 4^k >= n (so 4^k < 4n); cycle walking (re-encrypting until the value falls below n) restricts
// it to a bijection of [0, n) and takes under 4 rounds of walking on average.
WindowPermutation::WindowPermutation(int64_t n, uint64_t seed, int64_t epoch) : n_(n) {
  if (n < 1 || n > (int64_t{1} << 62))
    throw std::invalid_argument("WindowPermutation: n " + std::to_string(n) + " outside [1, 2^62]");
  half_bits_ = 1;
  while ((uint64_t{1} << (2 * half_bits_)) < static_cast<uint64_t>(n)) ++half_bits_;
  uint64_t k = mix64(seed ^ mix64(static_cast<uint64_t>(epoch) + 0x5EED));
  for (uint64_t& key : keys_) key = k = mix64(k);
}

uint64_t WindowPermutation::encrypt(uint64_t x) const {
  const uint64_t mask = (uint64_t{1} << half_bits_) - 1;
  uint64_t left = x >> half_bits_, right = x & mask;
  for (uint64_t key : keys_) {
    const uint64_t next = left ^ (mix64(right ^ key) & mask);
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

int64_t WindowPermutation::operator()(int64_t i) const {
  if (i < 0 || i >= n_)
    throw std::out_of_range("WindowPermutation: index " + std::to_string(i) + " outside [0, " +
                            std::to_string(n_) + ")");
  uint64_t x = encrypt(static_cast<uint64_t>(i));
  while (x >= static_cast<uint64_t>(n_)) x = encrypt(x);
  return static_cast<int64_t>(x);
}

TokenWindows::TokenWindows(const std::vector<TokenRange>& ranges, int64_t seq_len,
                           int64_t vocab_size)
    : opened_(open_ranges(ranges)), seq_len_(seq_len), vocab_size_(vocab_size) {
  if (seq_len < 1)
    throw std::invalid_argument("TokenWindows: seq_len " + std::to_string(seq_len) +
                                " must be >= 1");
  starts_.push_back(0);
  for (const TokenRange& r : opened_.ranges) {
    const int64_t len = r.end - r.begin;
    tokens_ += len;
    starts_.push_back(starts_.back() + std::max<int64_t>(0, (len - 1) / seq_len));
  }
}

size_t TokenWindows::range_of(int64_t w) const {
  if (w < 0 || w >= size())
    throw std::out_of_range("TokenWindows: window " + std::to_string(w) + " outside [0, " +
                            std::to_string(size()) + ")");
  // The last range whose first window is <= w (empty ranges share their start with the next).
  auto it = std::upper_bound(starts_.begin(), starts_.end(), w);
  return static_cast<size_t>(it - starts_.begin()) - 1;
}

void TokenWindows::copy(int64_t w, int64_t* out) const {
  const size_t r = range_of(w);
  const int64_t begin = opened_.ranges[r].begin + (w - starts_[r]) * seq_len_;
  opened_.files[r].read(begin, seq_len_ + 1, out, vocab_size_);
}

std::pair<std::string, int64_t> TokenWindows::locate(int64_t w) const {
  const size_t r = range_of(w);
  return {opened_.ranges[r].path, opened_.ranges[r].begin + (w - starts_[r]) * seq_len_};
}

std::string TokenWindows::describe() const {
  const auto& rs = opened_.ranges;
  std::string s = rs.empty() ? "no token files" : rs.front().path;
  if (rs.size() > 1) s += " and " + std::to_string(rs.size() - 1) + " more ranges";
  return s + " (" + std::to_string(tokens_) + " tokens)";
}

RowOrder::RowOrder(int64_t rows, const LoaderOptions& options, const std::string& who,
                   const std::string& what, const std::string& unit)
    : options_((check_options(options), options)),
      rows_(rows),
      global_batch_(checked_global_batch(rows, options, who, what, unit)),
      who_(who) {}

LoaderState RowOrder::advanced() const {
  if (state_.position + global_batch_ <= rows_) return state_;
  return LoaderState{state_.epoch + 1, 0};
}

std::vector<int64_t> RowOrder::next_rows() const {
  const LoaderState s = advanced();
  const WindowPermutation order(rows_, options_.seed, s.epoch);
  const int64_t first = s.position + options_.rank * options_.batch_size;
  std::vector<int64_t> ids(static_cast<size_t>(options_.batch_size));
  for (int64_t b = 0; b < options_.batch_size; ++b) ids[b] = order(first + b);
  return ids;
}

void RowOrder::advance() {
  state_ = advanced();
  state_.position += global_batch_;
}

void RowOrder::set_state(const LoaderState& state) {
  if (state.epoch < 0 || state.position < 0 || state.position > rows_)
    throw std::invalid_argument(who_ + "::set_state: epoch " + std::to_string(state.epoch) +
                                ", position " + std::to_string(state.position) +
                                " is not a state of a stream of " + std::to_string(rows_) +
                                " rows");
  state_ = state;
}

std::vector<int64_t> eval_rows(int64_t i, const LoaderOptions& o) {
  const int64_t g = o.batch_size * o.world_size;
  std::vector<int64_t> ids(static_cast<size_t>(o.batch_size));
  for (int64_t b = 0; b < o.batch_size; ++b) ids[b] = i * g + o.rank * o.batch_size + b;
  return ids;
}

TrainLoader::TrainLoader(const std::vector<TokenRange>& ranges, const LoaderOptions& options)
    : options_((check_options(options), options)),
      windows_(ranges, options.seq_len, options.vocab_size),
      order_(windows_.size(), options, "TrainLoader", windows_held(windows_, options)) {}

at::Tensor TrainLoader::next() {
  at::Tensor batch = gather(windows_, order_.next_rows());
  order_.advance();
  return batch;
}

Batch TrainLoader::next_batch() { return as_inputs_and_targets(next()); }

EvalLoader::EvalLoader(const std::vector<TokenRange>& ranges, const LoaderOptions& options,
                       int64_t max_batches)
    : options_((check_options(options), options)),
      windows_(ranges, options.seq_len, options.vocab_size) {
  const int64_t g =
      checked_global_batch(windows_.size(), options, "EvalLoader", windows_held(windows_, options));
  num_batches_ = windows_.size() / g;
  if (max_batches > 0) num_batches_ = std::min(num_batches_, max_batches);
}

at::Tensor EvalLoader::batch(int64_t i) const {
  if (i < 0 || i >= num_batches_)
    throw std::out_of_range("EvalLoader: batch " + std::to_string(i) + " outside [0, " +
                            std::to_string(num_batches_) + ")");
  return gather(windows_, eval_rows(i, options_));
}

Batch EvalLoader::eval_batch(int64_t i) const { return as_inputs_and_targets(batch(i)); }

}  // namespace fsdp::data
