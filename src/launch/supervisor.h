// The launcher's control loop. One attempt starts every rank of this node (or mpirun, which starts
// them), relays their output and waits; when a rank fails, or the launcher is told to stop, the
// others get SIGTERM and, after the grace period, SIGKILL. A failed attempt is followed by a fresh
// one while restarts remain.
#pragma once

#include "launch/options.h"

namespace fsdp {
namespace launch {

// Runs `options.program` on this node's ranks. Returns fsdp-run's exit code: 0 when every rank
// exited 0; otherwise the first failed rank's exit code (128 + N for signal N); 128 + N when the
// launcher itself was stopped by signal N. Throws std::runtime_error when it cannot start (log
// directory, pipes).
int supervise(const Options& options);

}  // namespace launch
}  // namespace fsdp
