// The rendezvous store of store.h: a c10d::FileStore or TCPStore per address, shared by every
// backend of the process that rendezvouses through one, and the progress slots kept in it.
#include "comm/store.h"

#include <map>
#include <mutex>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "compat.h"

namespace fsdp {
namespace comm_internal {
namespace {

// Progress entries kept in the rendezvous store, for jobs whose ranks share no directory.
class StoreSlots : public ProgressSlots {
 public:
  explicit StoreSlots(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}
  void put(const std::string& key, const std::string& value) override {
    store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  }
  // Checks first: a get on a missing key would wait for it.
  std::string get(const std::string& key) override {
    if (!store_->check({key})) return "";
    const std::vector<uint8_t> value = store_->get(key);
    return std::string(value.begin(), value.end());
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

SharedStore& shared_store(const StoreSetup& setup) {
  static std::mutex mu;
  static std::map<std::string, SharedStore> stores;
  std::lock_guard<std::mutex> lock(mu);
  const std::string where = setup.run_dir.empty()
                                ? setup.master_addr + ":" + std::to_string(setup.master_port)
                                : setup.run_dir;
  SharedStore& entry = stores[where];
  if (entry.store) return entry;
  if (!setup.run_dir.empty()) {
    auto file = c10::make_intrusive<c10d::FileStore>(setup.run_dir + "/store", setup.size);
    file->setTimeout(setup.timeout);
    entry.store = std::move(file);
    entry.progress = directory_slots(setup.run_dir + "/progress", false);
    return entry;
  }
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(setup.master_port);
  options.isServer = setup.rank == 0;
  options.waitWorkers = false;  // the backends' own connection set-up waits for every rank
  options.timeout = setup.timeout;
  compat::use_classic_tcp_store(options);
  entry.store = c10::make_intrusive<c10d::TCPStore>(setup.master_addr, options);
  entry.progress = std::make_shared<StoreSlots>(entry.store);
  return entry;
}

}  // namespace comm_internal
}  // namespace fsdp
