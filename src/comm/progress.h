// Which collective each rank of a group issued last, posted where the other ranks can read it
// while they wait: so that a rank whose collective times out can say which ranks reached it and
// where the others stopped. Each rank also posts where its process runs, so that a peer on the
// same host can say when it is stopped (kill -STOP) or gone, even inside a collective it issued.
// The board is the same for every backend; where its entries live (the Gloo rendezvous store, or
// files in a directory the ranks of one host share) is a ProgressSlots behind it. One small write
// per collective: microseconds against collectives of milliseconds.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace fsdp {
namespace comm_internal {

// A key-value place every rank of the job can read and write. Diagnostics only: the board swallows
// what these throw, because a broken side channel must not fail a healthy collective.
class ProgressSlots {
 public:
  virtual ~ProgressSlots() = default;
  virtual void put(const std::string& key, const std::string& value) = 0;
  // "" when the key was never written.
  virtual std::string get(const std::string& key) = 0;
};

// Slots as files in `dir` (created if missing), one per key, each replaced by a rename so that a
// reader never sees half an entry. With `owner`, the directory and its files are removed when the
// slots are destroyed.
std::shared_ptr<ProgressSlots> directory_slots(const std::string& dir, bool owner);

class ProgressBoard {
 public:
  // `group` names the group among those sharing `slots` (the world, a split's subgroups); `rank`
  // and `size` are this rank's place in it.
  ProgressBoard(std::shared_ptr<ProgressSlots> slots, std::string group, int rank, int size);

  // Posts this rank's next collective; returns its sequence number in this group.
  uint64_t post(const std::string& what);

  // What a rank waiting for collective `seq` says about its peers:
  // "; ranks that issued this collective (#57): 0, 1; rank 2 last issued #41 all_gather of ...",
  // then, for peers on this host that cannot run: "; rank 1 (pid 4242) is stopped (SIGSTOP or
  // SIGTSTP)" or "... has exited".
  std::string report(uint64_t seq) const;

  // Posts `what` (as post) and returns what a timeout of that collective adds to its message.
  static std::function<std::string()> post_and_diagnose(const std::shared_ptr<ProgressBoard>& board,
                                                        const std::string& what);

  // The board of a subgroup made by a split: same slots, another group name.
  std::shared_ptr<ProgressBoard> subgroup(const std::string& name, int rank, int size) const;

 private:
  std::string read(const char* what, int rank) const;
  std::string process_of(int rank) const;

  std::shared_ptr<ProgressSlots> slots_;
  std::string group_;
  int rank_, size_;
  uint64_t seq_ = 0;
  mutable std::vector<std::string> processes_;  // where each rank's process runs, once read
};

}  // namespace comm_internal
}  // namespace fsdp
