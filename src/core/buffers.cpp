// The root's buffers across ranks (buffers.h): listing, the agreement check, and the two ways of
// making them alike. Broadcast packs every buffer's bytes, 8-byte aligned, into one int64 tensor
// on the buffers' device, so that any dtype (bool masks, int64 counters, bf16 statistics) goes in
// one collective that every backend carries.
#include "core/buffers.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <set>
#include <sstream>

#include "core/check.h"
#include "core/collectives.h"

namespace fsdp {
namespace {

int64_t aligned8(int64_t bytes) { return (bytes + 7) / 8 * 8; }

// A buffer's bytes as a flat uint8 tensor (a copy when it is not contiguous).
at::Tensor bytes_of(const at::Tensor& t) { return t.contiguous().reshape({-1}).view(at::kByte); }

// "name shape dtype" of every buffer, one per line: what ranks compare.
std::string describe_buffers(const std::vector<NamedBuffer>& buffers) {
  std::ostringstream os;
  for (const auto& b : buffers)
    os << b.name << " " << b.tensor.sizes() << " " << b.tensor.dtype() << "\n";
  return os.str();
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

}  // namespace

std::vector<NamedBuffer> named_buffers(const torch::nn::Module& root) {
  std::vector<NamedBuffer> out;
  std::set<const c10::TensorImpl*> seen;
  for (const auto& item : root.named_buffers(/*recurse=*/true)) {
    const at::Tensor& t = item.value();
    if (!t.defined() || !seen.insert(t.unsafeGetTensorImpl()).second) continue;
    out.push_back({item.key(), t});
  }
  return out;
}

void check_buffers_agree(Comm& world, const std::vector<NamedBuffer>& buffers) {
  if (world.size() == 1) return;
  const std::string mine = describe_buffers(buffers);
  const int64_t row[2] = {static_cast<int64_t>(buffers.size()),
                          static_cast<int64_t>(fnv1a(mine) >> 1)};
  std::vector<int64_t> all(2 * static_cast<size_t>(world.size()));
  world.all_gather(row, all.data(), 2, DType::kInt64);
  for (int r = 1; r < world.size(); ++r) {
    FSDP_CHECK(all[2 * r] == all[0] && all[2 * r + 1] == all[1], "fully_shard: rank ", r,
               "'s module has other buffers than rank 0's (", all[2 * r], " against ", all[0],
               ", or other names, shapes or dtypes): every rank must build the same model. This "
               "rank's buffers:\n",
               mine.empty() ? std::string("(none)\n") : mine);
  }
}

void broadcast_buffers(Comm& world, const std::vector<NamedBuffer>& buffers) {
  if (world.size() == 1 || buffers.empty()) return;
  at::NoGradGuard no_grad;
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (const auto& b : buffers) {
    offsets.push_back(total);
    total += aligned8(static_cast<int64_t>(b.tensor.nbytes()));
  }
  if (total == 0) return;
  const at::Tensor blob = at::zeros({total / 8}, buffers.front().tensor.options().dtype(at::kLong));
  const at::Tensor bytes = blob.view(at::kByte);
  if (world.rank() == 0) {
    for (size_t i = 0; i < buffers.size(); ++i) {
      const at::Tensor& t = buffers[i].tensor;
      if (t.numel() > 0) bytes.narrow(0, offsets[i], t.nbytes()).copy_(bytes_of(t));
    }
  }
  broadcast(world, blob, 0)->wait();
  if (world.rank() == 0) return;
  for (size_t i = 0; i < buffers.size(); ++i) {
    at::Tensor t = buffers[i].tensor;
    if (t.numel() == 0) continue;
    t.copy_(bytes.narrow(0, offsets[i], t.nbytes()).view(t.scalar_type()).view(t.sizes()));
  }
}

void average_buffers(Comm& world, const std::vector<NamedBuffer>& buffers) {
  if (world.size() == 1) return;
  at::NoGradGuard no_grad;
  std::vector<NamedBuffer> floating, others;
  for (const auto& b : buffers) {
    (at::isFloatingType(b.tensor.scalar_type()) ? floating : others).push_back(b);
  }
  if (!floating.empty()) {
    std::vector<at::Tensor> parts;
    for (const auto& b : floating) parts.push_back(b.tensor.reshape({-1}).to(at::kFloat));
    const at::Tensor sum = at::cat(parts);
    all_reduce(world, sum, ReduceOp::kAvg)->wait();
    int64_t offset = 0;
    for (const auto& b : floating) {
      at::Tensor t = b.tensor;
      t.copy_(sum.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
  broadcast_buffers(world, others);
}

}  // namespace fsdp
