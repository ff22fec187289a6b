// How init_comm turns the launcher's environment into a backend choice and a rank, kept apart
// from the reading of the environment itself so that tests can feed it made-up variables.
#pragma once

#include <functional>
#include <string>

namespace fsdp {
namespace comm_internal {

// Returns the variable's value, or nullptr when it is unset.
using EnvLookup = std::function<const char*(const char* name)>;

// What the environment says about this process's place in the job.
struct Launch {
  std::string backend;  // "mpi", "gloo", "nccl" or "local"
  int rank = 0;
  int size = 1;
  bool size_from_env = false;  // false: no launcher variables, a lone process
  int local_rank = 0;
  int local_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: MASTER_PORT unset
  std::string iface;    // GLOO_SOCKET_IFNAME
  // FSDP_RUN_DIR: a directory private to this job that every rank can reach, set by fsdp-run for
  // a one-host job. Gloo keeps its rendezvous store there instead of listening on a port; both
  // backends keep their progress boards (which collective each rank issued last) there.
  std::string run_dir;
};

// Throws CommError naming the variable (and its value) that is missing or malformed, or listing
// the valid backend names when `backend` is none of them.
// `cuda`: the job's tensors are on GPUs ("auto" then means NCCL outside mpirun).
Launch resolve_launch(const std::string& backend, const EnvLookup& env, bool mpi_available,
                      bool cuda = false);

}  // namespace comm_internal
}  // namespace fsdp
