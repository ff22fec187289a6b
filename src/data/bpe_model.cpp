// BpeModel (bpe_model.h). A word is a linked list of symbols in a vector; merges come off a
// priority queue ordered by (rank, position), and an entry whose pair no longer maps to the same
// new id is stale and skipped, exactly as Word::merge_all does it.
#include "data/bpe_model.h"

#include <array>
#include <cstdio>
#include <functional>
#include <mutex>
#include <queue>
#include <stdexcept>

#include "data/utf8.h"

namespace fsdp::data {
namespace {

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct Merge {
  size_t pos;
  uint32_t rank;
  int32_t new_id;
};

// std::priority_queue pops its largest element: "larger" is the lower rank, then the lower
// position.
struct MergeOrder {
  bool operator()(const Merge& a, const Merge& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

// Pre-tokens longer than this are not cached (Hugging Face's limit too); results never depend on
// it.
constexpr size_t kMaxCachedLength = 256;

}  // namespace

struct BpeModel::Symbol {
  int32_t c;
  int64_t prev, next;
  size_t len;  // bytes of the pre-token it covers; 0 once merged into its left neighbour
};

// Pre-token -> ids, striped over a few locks so that tokenizing threads rarely wait on each
// other; each stripe is cleared when it grows past its bound.
struct BpeModel::Cache {
  static constexpr size_t kStripes = 16, kMaxPerStripe = 1 << 15;
  struct Stripe {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>> map;
  };
  std::array<Stripe, kStripes> stripes;
  Stripe& stripe(std::string_view key) {
    return stripes[std::hash<std::string_view>()(key) % kStripes];
  }
  bool get(std::string_view key, std::vector<int32_t>& out) {
    Stripe& s = stripe(key);
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.map.find(std::string(key));
    if (it == s.map.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }
  void put(std::string_view key, std::vector<int32_t> ids) {
    Stripe& s = stripe(key);
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.map.size() >= kMaxPerStripe) s.map.clear();
    s.map.emplace(std::string(key), std::move(ids));
  }
};

BpeModel::BpeModel(std::unordered_map<std::string, int32_t> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges,
                   BpeOptions options, const std::string& where)
    : vocab_(std::move(vocab)), options_(std::move(options)), cache_(std::make_unique<Cache>()) {
  for (const auto& [token, id] : vocab_) vocab_r_[id] = token;
  const size_t prefix_len =
      options_.continuing_subword_prefix ? options_.continuing_subword_prefix->size() : 0;
  auto id_of = [&](const std::string& token) {
    auto it = vocab_.find(token);
    if (it == vocab_.end())
      throw std::runtime_error(where + ": merge token \"" + token + "\" is not in the vocabulary");
    return it->second;
  };
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const int32_t a_id = id_of(a), b_id = id_of(b);
    const int32_t new_id = id_of(a + b.substr(std::min(prefix_len, b.size())));
    // A pair listed twice keeps its last rank, as Hugging Face's map of merges does.
    merges_[pair_key(a_id, b_id)] = {static_cast<uint32_t>(rank), new_id};
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto it = vocab_.find(name);
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }
}

BpeModel::BpeModel(BpeModel&&) noexcept = default;
BpeModel::~BpeModel() = default;

const std::string* BpeModel::token(int32_t id) const {
  auto it = vocab_r_.find(id);
  return it == vocab_r_.end() ? nullptr : &it->second;
}

std::optional<int32_t> BpeModel::lookup(std::string_view s) const {
  auto it = vocab_.find(std::string(s));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

// merge_word's first half: one symbol per character, or its <0xNN> bytes, or the unknown token
// (runs of unknown characters fused into one when fuse_unk).
std::vector<BpeModel::Symbol> BpeModel::initial_symbols(std::string_view piece) const {
  std::vector<Symbol> word;
  word.reserve(piece.size());
  auto add = [&word](int32_t id, size_t len) {
    const auto n = static_cast<int64_t>(word.size());
    if (!word.empty()) word.back().next = n;
    word.push_back({id, word.empty() ? -1 : n - 1, -1, len});
  };
  int32_t unk_id = -1;  // a pending unknown token (>= 0) and the bytes it covers
  size_t unk_len = 0;
  for (size_t i = 0; i < piece.size();) {
    const size_t end = decode_utf8(piece, i).end, byte_len = end - i;
    std::string s(piece.substr(i, byte_len));
    if (i > 0 && options_.continuing_subword_prefix) s = *options_.continuing_subword_prefix + s;
    if (end == piece.size() && options_.end_of_word_suffix) s += *options_.end_of_word_suffix;
    i = end;
    if (auto id = lookup(s)) {
      if (unk_id >= 0) add(unk_id, unk_len), unk_id = -1;
      add(*id, byte_len);
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (unsigned char b : s) all = all && byte_ids_[b] >= 0;
      if (all) {  // a pending unknown token stays pending, as in merge_word
        for (unsigned char b : s) add(byte_ids_[b], 1);
        continue;
      }
    }
    if (!options_.unk_token) continue;  // no unknown token: the character is dropped
    if (unk_id >= 0 && options_.fuse_unk) {
      unk_len += byte_len;
      continue;
    }
    if (unk_id >= 0) add(unk_id, unk_len);
    const auto id = lookup(*options_.unk_token);
    if (!id)
      throw std::runtime_error("BPE: unk_token \"" + *options_.unk_token +
                               "\" is not in the vocabulary");
    unk_id = *id;
    unk_len = byte_len;
  }
  if (unk_id >= 0) add(unk_id, unk_len);
  return word;
}

// Word::merge_all without dropout.
void BpeModel::merge_all(std::vector<Symbol>& s) const {
  std::priority_queue<Merge, std::vector<Merge>, MergeOrder> queue;
  auto find = [this](int32_t a, int32_t b) {
    auto it = merges_.find(pair_key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  };
  for (size_t i = 0; i + 1 < s.size(); ++i)
    if (auto m = find(s[i].c, s[i + 1].c)) queue.push({i, m->first, m->second});
  while (!queue.empty()) {
    const Merge top = queue.top();
    queue.pop();
    if (s[top.pos].len == 0 || s[top.pos].next == -1) continue;
    const auto next_pos = static_cast<size_t>(s[top.pos].next);
    const Symbol right = s[next_pos];
    auto current_pair = find(s[top.pos].c, right.c);
    if (!current_pair || current_pair->second != top.new_id) continue;  // a stale entry
    s[top.pos].c = top.new_id;
    s[top.pos].len += right.len;
    s[top.pos].next = right.next;
    s[next_pos].len = 0;
    if (right.next > -1 && static_cast<size_t>(right.next) < s.size())
      s[right.next].prev = static_cast<int64_t>(top.pos);
    const Symbol& cur = s[top.pos];
    if (cur.prev >= 0)
      if (auto m = find(s[cur.prev].c, cur.c))
        queue.push({static_cast<size_t>(cur.prev), m->first, m->second});
    if (cur.next >= 0 && static_cast<size_t>(cur.next) < s.size())
      if (auto m = find(cur.c, s[cur.next].c)) queue.push({top.pos, m->first, m->second});
  }
}

void BpeModel::tokenize(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (options_.ignore_merges) {
    if (auto id = lookup(piece)) {
      out.push_back(*id);
      return;
    }
  }
  const bool cacheable = piece.size() < kMaxCachedLength;
  if (cacheable && cache_->get(piece, out)) return;
  std::vector<Symbol> word = initial_symbols(piece);
  merge_all(word);
  std::vector<int32_t> ids;
  ids.reserve(word.size());
  for (const Symbol& sym : word)
    if (sym.len != 0) ids.push_back(sym.c);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) cache_->put(piece, std::move(ids));
}

}  // namespace fsdp::data
