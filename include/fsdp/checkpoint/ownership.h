// Who may write where in a checkpoint folder. A run owns its checkpoint root for as long as it
// lives (CheckpointRootLock), so that no second run writes into it at the same time; and no tool
// writes its output over a checkpoint (check_checkpoint_output): not into the checkpoint it reads,
// not into any step folder, not over a root's `latest` or lock. Both say no before a byte is
// written. See docs/checkpoint.md, "One owner per folder".
#pragma once

#include <string>

#include "fsdp/comm.h"

namespace fsdp {

// The lock file a run holds in its checkpoint root: "host pid" of the holder, one line.
constexpr char kCheckpointLockFile[] = ".fsdp-lock";

// An exclusive hold on a checkpoint root for the life of the object: an advisory flock on
// ROOT/.fsdp-lock, taken by rank 0 without waiting, which the kernel releases when the process
// ends in any way (a crash leaves no stale lock). On a network file system the lock covers other
// hosts only where the file system carries flock between hosts (NFS does, through its lock
// manager; docs/checkpoint.md).
class CheckpointRootLock {
 public:
  // Collective over `world`: rank 0 creates `root` if needed and takes the lock; every rank learns
  // whether it did. When another process holds it, every rank throws a CheckpointError naming the
  // folder and the holder's host and PID.
  CheckpointRootLock(const std::string& root, Comm& world);
  ~CheckpointRootLock();
  CheckpointRootLock(const CheckpointRootLock&) = delete;
  CheckpointRootLock& operator=(const CheckpointRootLock&) = delete;

 private:
  int fd_ = -1;  // rank 0's open lock file; -1 on the other ranks
};

// What a writer makes at its output path.
enum class OutputKind {
  kFile,       // one file, replaced if it exists (consolidate's OUT.safetensors)
  kNewFolder,  // a folder that must not exist yet, or be empty (reshard, export)
  kIntoFolder  // files written into an existing folder the caller made (export's staging folder)
};

// Throws a CheckpointError, before anything is written, when `out` would write over a checkpoint:
// `out` is or lies inside `input` (what the writer reads; `input_name` says what it is in the
// message), or inside any checkpoint step folder (one holding metadata.json or COMMITTED, or named
// step_N under a root), or is a checkpoint root's `latest` or lock file; also when `out` is a
// symbolic link, a folder where a file is wanted, or (kNewFolder) a non-empty folder. Symbolic
// links in the paths are followed before comparing.
void check_checkpoint_output(const std::string& out, const std::string& input,
                             const std::string& input_name, OutputKind kind);

}  // namespace fsdp
