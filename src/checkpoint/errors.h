// How the ranks of a save or a load agree on failure: every rank's error text is exchanged, so
// that each rank reports the first failure with the failing rank's own words (the file it could
// not read or write) instead of a bare "failed on rank N", and no rank credits its own error to
// another. Rank 0's message is the one a user sees without per-rank logs.
#pragma once

#include <string>
#include <vector>

#include "fsdp/comm.h"

namespace fsdp {
namespace ckpt {

// Every rank's `mine` ("" for success), indexed by rank; each is cut to a few KiB. Collective over
// `world`; when every rank succeeded it costs one all-gather of one integer.
std::vector<std::string> gather_errors(Comm& world, const std::string& mine);

// What rank `rank` throws after gather_errors: its own error if it had one, else
// "<what> failed on rank R: <rank R's error>" for the first rank R that failed; "" if none did.
std::string failure_message(const std::vector<std::string>& errors, int rank,
                            const std::string& what);

// gather_errors then failure_message; throws CheckpointError with it when any rank failed.
void agree_on_failure(Comm& world, const std::string& mine, const std::string& what);

}  // namespace ckpt
}  // namespace fsdp
