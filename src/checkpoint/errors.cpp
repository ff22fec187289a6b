// Exchanging error texts between the ranks of a checkpoint save or load (see errors.h). The Comm
// carries no bytes type, so texts travel packed in int64 words, after their lengths.
#include "checkpoint/errors.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "fsdp/checkpoint/checkpoint.h"

namespace fsdp {
namespace ckpt {
namespace {

// Long enough for any path and reason we write; short enough that every rank may send one.
constexpr size_t kMaxErrorBytes = 4096;

}  // namespace

std::vector<std::string> gather_errors(Comm& world, const std::string& mine) {
  const std::string text = mine.substr(0, kMaxErrorBytes);
  const int64_t length = static_cast<int64_t>(text.size());
  std::vector<int64_t> lengths(static_cast<size_t>(world.size()));
  world.all_gather(&length, lengths.data(), 1, DType::kInt64);
  std::vector<std::string> out(lengths.size());
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  if (longest == 0) return out;
  const size_t words = static_cast<size_t>(longest + 7) / 8;
  std::vector<int64_t> send(words, 0), all(words * lengths.size());
  std::memcpy(send.data(), text.data(), text.size());
  world.all_gather(send.data(), all.data(), words, DType::kInt64);
  for (size_t r = 0; r < out.size(); ++r) {
    const auto* bytes = reinterpret_cast<const char*>(all.data() + r * words);
    out[r].assign(bytes, static_cast<size_t>(std::min<int64_t>(lengths[r], longest)));
  }
  return out;
}

std::string failure_message(const std::vector<std::string>& errors, int rank,
                            const std::string& what) {
  if (!errors.at(static_cast<size_t>(rank)).empty()) return errors[static_cast<size_t>(rank)];
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r].empty()) return what + " failed on rank " + std::to_string(r) + ": " + errors[r];
  }
  return "";
}

void agree_on_failure(Comm& world, const std::string& mine, const std::string& what) {
  const std::string failure = failure_message(gather_errors(world, mine), world.rank(), what);
  if (!failure.empty()) throw CheckpointError(failure, /*collective=*/true);
}

}  // namespace ckpt
}  // namespace fsdp
