// The root module's buffers as the runtime keeps them: listed once by qualified name (a buffer
// registered under two names listed under the first), checked to be the same list on every rank,
// and made alike across ranks by broadcasting rank 0's bytes or averaging the floating ones
// (ShardingOptions::buffer_sync). One collective for all of them, whatever their dtypes.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "fsdp/comm.h"
#include "fsdp/fully_shard.h"

namespace fsdp {

// Defined buffers of `root` and its descendants, in registration order, each tensor once.
std::vector<NamedBuffer> named_buffers(const torch::nn::Module& root);

// Throws naming the first rank whose buffers (count, names, shapes, dtypes) differ from rank 0's,
// on every rank: what would otherwise be collectives of different sizes.
void check_buffers_agree(Comm& world, const std::vector<NamedBuffer>& buffers);

// Every rank's buffers become rank 0's, bit for bit.
void broadcast_buffers(Comm& world, const std::vector<NamedBuffer>& buffers);

// Floating-point buffers become their mean over ranks (summed in fp32), the others rank 0's.
void average_buffers(Comm& world, const std::vector<NamedBuffer>& buffers);

}  // namespace fsdp
