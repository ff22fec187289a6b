// Hugging Face's BPE model (tokenizers/src/models/bpe): a vocabulary, ranked merges, and the
// options tokenizer.json gives it (unk_token, fuse_unk, byte_fallback, ignore_merges,
// continuing_subword_prefix, end_of_word_suffix). tokenize() is a port of its merge_word and
// Word::merge_all, so that ties, stale queue entries and unknown characters come out as there.
// Pre-tokens are cached (bounded; the result never depends on the cache). Thread-safe once built.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fsdp::data {

struct BpeOptions {
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool byte_fallback = false;  // characters missing from the vocabulary as <0xNN> tokens
  bool ignore_merges = false;  // a whole pre-token found in the vocabulary is one token
  std::optional<std::string> continuing_subword_prefix, end_of_word_suffix;
};

class BpeModel {
 public:
  // Builds the merge table; throws std::runtime_error naming `where` and the token when a merge
  // uses a token the vocabulary lacks. As in Hugging Face, an unk_token missing from the
  // vocabulary is an error only when a pre-token needs it (tokenize() throws then).
  BpeModel(std::unordered_map<std::string, int32_t> vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
           const std::string& where);
  BpeModel(BpeModel&&) noexcept;
  ~BpeModel();

  // Appends the ids of one pre-token (its characters as UTF-8; a stray byte is a character).
  void tokenize(std::string_view piece, std::vector<int32_t>& out) const;

  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }
  const BpeOptions& options() const { return options_; }
  // The token's string, or nullptr for an id the vocabulary lacks.
  const std::string* token(int32_t id) const;

 private:
  struct Cache;
  struct Symbol;
  std::vector<Symbol> initial_symbols(std::string_view piece) const;
  void merge_all(std::vector<Symbol>& symbols) const;
  std::optional<int32_t> lookup(std::string_view s) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<int32_t, std::string> vocab_r_;
  std::unordered_map<uint64_t, std::pair<uint32_t, int32_t>> merges_;  // pair -> (rank, new id)
  BpeOptions options_;
  int32_t byte_ids_[256];  // <0xNN>, or -1
  std::unique_ptr<Cache> cache_;
};

}  // namespace fsdp::data
