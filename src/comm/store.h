// The rendezvous store the c10d-based backends (Gloo, NCCL) meet through, and the progress board's
// slots kept in it: one store per rendezvous address and process, so that a second init_comm in
// the same processes (a group with another timeout, a Gloo world beside an NCCL one) shares it
// instead of starting a second server on the port.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <memory>
#include <string>

#include "comm/progress.h"

namespace c10d {
class Store;
}

namespace fsdp {
namespace comm_internal {

// Where the ranks of a job meet: a FileStore in fsdp-run's private run directory for a one-host
// job (nothing listens on a port), else a TCPStore that rank 0 serves at master_addr:master_port.
struct StoreSetup {
  int rank = 0;
  int size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: none given (allowed only for size 1)
  std::string run_dir;  // FSDP_RUN_DIR: a one-host job's private directory, holding the store
  std::chrono::milliseconds timeout{300000};
};

struct SharedStore {
  c10::intrusive_ptr<c10d::Store> store;  // c10d's process groups take it so
  // The progress board's entries: files in the run directory, or keys in the store.
  std::shared_ptr<ProgressSlots> progress;
  // init_comm calls that used this store so far: each gets its own key prefix from the count,
  // which agrees across ranks because every rank calls init_comm the same number of times.
  int inits = 0;
};

// The process's store for `setup`'s address, made on first use. Throws what c10d throws.
SharedStore& shared_store(const StoreSetup& setup);

// True when the job runs on this host only (loopback rendezvous address).
bool is_loopback(const std::string& addr);

}  // namespace comm_internal
}  // namespace fsdp
