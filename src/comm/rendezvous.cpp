// init_comm: the one place in fsdp.cpp that reads environment variables. It recognises two
// launchers: torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
// and fsdp-run's FSDP_RUN_DIR) and OpenMPI's mpirun (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK,
// _LOCAL_SIZE), picks a backend ("auto": MPI under mpirun, Gloo under torchrun, local otherwise)
// and hands the backend what it needs. Everything is validated here so that a bad launch fails with
// the variable's name.
#include "comm/rendezvous.h"

#include <cerrno>
#include <cstdlib>

#include "comm/internal.h"

namespace fsdp {
namespace comm_internal {
namespace {

struct Var {
  const char* name;
  const char* value;  // nullptr when unset
  bool set() const { return value != nullptr; }
};

[[noreturn]] void bad(const Var& var, const std::string& why) {
  throw CommError(std::string("fsdp: environment variable ") + var.name + "='" +
                  (var.value ? var.value : "") + "' " + why);
}

int parse_int(const Var& var, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(var.value, &end, 10);
  if (end == var.value || *end != '\0' || errno == ERANGE) bad(var, "is not an integer");
  if (v < lo || v > hi) {
    bad(var, "is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return static_cast<int>(v);
}

// A (rank, size) pair of variables: both or neither, 0 <= rank < size.
bool read_pair(const Var& rank, const Var& size, int* r, int* s) {
  if (!rank.set() && !size.set()) return false;
  if (!rank.set() || !size.set()) {
    const Var& missing = rank.set() ? size : rank;
    const Var& present = rank.set() ? rank : size;
    throw CommError(std::string("fsdp: environment variable ") + present.name + "='" +
                    present.value + "' is set but " + missing.name + " is not");
  }
  *s = parse_int(size, 1, 1 << 24);
  *r = parse_int(rank, 0, *s - 1);
  return true;
}

void read_world(const EnvLookup& env, Launch* launch) {
  const Var rank{"RANK", env("RANK")}, size{"WORLD_SIZE", env("WORLD_SIZE")};
  const Var orank{"OMPI_COMM_WORLD_RANK", env("OMPI_COMM_WORLD_RANK")};
  const Var osize{"OMPI_COMM_WORLD_SIZE", env("OMPI_COMM_WORLD_SIZE")};
  // torchrun's variables win: someone who set them by hand under mpirun meant them.
  launch->size_from_env = read_pair(rank, size, &launch->rank, &launch->size) ||
                          read_pair(orank, osize, &launch->rank, &launch->size);
}

// Which rank on this host: only validated here, the backends do not need it.
void read_local(const EnvLookup& env, Launch* launch) {
  Var rank{"LOCAL_RANK", env("LOCAL_RANK")}, size{"LOCAL_WORLD_SIZE", env("LOCAL_WORLD_SIZE")};
  if (!rank.set() && !size.set()) {
    rank = {"OMPI_COMM_WORLD_LOCAL_RANK", env("OMPI_COMM_WORLD_LOCAL_RANK")};
    size = {"OMPI_COMM_WORLD_LOCAL_SIZE", env("OMPI_COMM_WORLD_LOCAL_SIZE")};
  }
  if (!rank.set()) return;
  launch->local_size = size.set() ? parse_int(size, 1, launch->size) : launch->size;
  launch->local_rank = parse_int(rank, 0, launch->local_size - 1);
}

void read_run_dir(const EnvLookup& env, Launch* launch) {
  const Var dir{"FSDP_RUN_DIR", env("FSDP_RUN_DIR")};
  if (!dir.set()) return;
  if (dir.value[0] != '/') bad(dir, "is not an absolute path");
  launch->run_dir = dir.value;
}

void check_backend_name(const std::string& name) {
  if (name != "auto" && name != "mpi" && name != "gloo" && name != "nccl" && name != "local") {
    throw CommError("fsdp: unknown comm backend '" + name +
                    "' (valid: \"auto\", \"mpi\", \"gloo\", \"nccl\", \"local\")");
  }
}

// Under mpirun, MPI even for CUDA jobs: its ranks may share one GPU, which NCCL refuses.
std::string choose_backend(const std::string& requested, const EnvLookup& env, bool mpi_available,
                           bool in_job, bool cuda) {
  if (requested != "auto") return requested;
  if (env("OMPI_COMM_WORLD_SIZE") && mpi_available) return "mpi";
  if (cuda) return "nccl";
  return in_job ? "gloo" : "local";
}

// The rendezvous of the store-based backends (Gloo, NCCL).
void read_store_address(const EnvLookup& env, Launch* launch) {
  const Var addr{"MASTER_ADDR", env("MASTER_ADDR")}, port{"MASTER_PORT", env("MASTER_PORT")};
  if (addr.set()) {
    if (*addr.value == '\0') bad(addr, "is empty");
    launch->master_addr = addr.value;
  }
  if (port.set()) {
    launch->master_port = parse_int(port, 1, 65535);
  } else if (launch->size > 1 && launch->run_dir.empty()) {
    throw CommError("fsdp: the " + launch->backend + " backend with " +
                    std::to_string(launch->size) +
                    " ranks needs MASTER_PORT (and MASTER_ADDR unless rank 0 is on this host) "
                    "for its rendezvous store; MASTER_PORT is not set");
  }
  if (const char* iface = env("GLOO_SOCKET_IFNAME")) launch->iface = iface;
}

}  // namespace

Launch resolve_launch(const std::string& backend, const EnvLookup& env, bool mpi_available,
                      bool cuda) {
  check_backend_name(backend);
  Launch launch;
  read_world(env, &launch);
  read_local(env, &launch);
  read_run_dir(env, &launch);
  launch.backend = choose_backend(backend, env, mpi_available, launch.size_from_env, cuda);
  if (launch.backend == "gloo" || launch.backend == "nccl") read_store_address(env, &launch);
  if (launch.backend == "local" && launch.size > 1) {
    throw CommError("fsdp: backend 'local' is a one-rank group, but the environment describes " +
                    std::to_string(launch.size) + " ranks (WORLD_SIZE or OMPI_COMM_WORLD_SIZE)");
  }
  return launch;
}

}  // namespace comm_internal

namespace {
// Starts the chosen backend.
CommPtr join(const comm_internal::Launch& launch, const CommOptions& options) {
  using namespace comm_internal;
  if (launch.backend == "mpi") {
    MpiSetup setup;
    setup.expected_size = launch.size_from_env ? launch.size : -1;
    setup.run_dir = launch.run_dir;
    setup.timeout = options.timeout;
    return make_mpi_comm(setup);
  }
  StoreSetup store;
  store.rank = launch.rank;
  store.size = launch.size;
  store.master_addr = launch.master_addr;
  store.master_port = launch.master_port;
  store.run_dir = launch.run_dir;
  store.timeout = options.timeout;
  if (launch.backend == "gloo") {
    GlooSetup setup;
    static_cast<StoreSetup&>(setup) = store;
    setup.iface = launch.iface;
    return make_gloo_comm(setup);
  }
  if (launch.backend == "nccl") {
    NcclSetup setup;
    static_cast<StoreSetup&>(setup) = store;
    setup.device = launch.local_rank;
    return make_nccl_comm(setup);
  }
  CommPtr comm = make_local_comm();
  comm->set_timeout(options.timeout);
  return comm;
}
}  // namespace

CommPtr init_comm(const CommOptions& options) {
  using namespace comm_internal;
  if (options.timeout.count() <= 0) {
    throw CommError("fsdp: CommOptions::timeout must be positive, got " +
                    std::to_string(options.timeout.count()) + " ms");
  }
  if (options.device != "cpu" && options.device != "cuda") {
    throw CommError("fsdp: CommOptions::device must be \"cpu\" or \"cuda\", got '" +
                    options.device + "'");
  }
  const Launch launch = resolve_launch(
      options.backend, [](const char* name) { return std::getenv(name); }, mpi_built(),
      options.device == "cuda");
  CommPtr comm = join(launch, options);
  comm->set_local_size(launch.size_from_env ? launch.local_size : 1);
  return comm;
}

}  // namespace fsdp
