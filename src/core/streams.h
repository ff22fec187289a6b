// Side streams, on devices that have them (CUDA), after PyTorch FSDP2: a unit's gather work (an
// offloaded shard's copy to the device, the cast to param_dtype, the all-gather's issue) runs on
// a gather stream, and the end of an offloaded gradient's reduction (its scaling and its copy to
// the host) on a reduce stream, so that they overlap compute instead of queueing behind it.
//
// Order comes from events, never from record_stream: a side stream first waits for the work
// queued so far on the compute (current) stream; the compute stream waits for a side stream's
// event only where it uses what the side stream produced. Buffers are taken from the compute
// stream's pool before the side stream writes them and released only after the compute stream has
// waited for their last use, so the caching allocator never hands out a block a side stream still
// touches. On the CPU there are no streams: nothing here does anything, and work runs in program
// order. See docs/design.md, [Note: streams].
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace fsdp {

// Waits until the work queued on `device`'s current stream has run, so that a clock read after
// it times the work, not its queueing. Nothing to wait for on the CPU.
void synchronize_current_stream(c10::Device device);

// The runtime's side streams on one device: none on the CPU.
class SideStreams {
 public:
  explicit SideStreams(c10::Device device = c10::Device(c10::kCPU));
  const std::optional<c10::Stream>& gather() const { return gather_; }
  const std::optional<c10::Stream>& reduce() const { return reduce_; }
  // Blocks the host until the compute stream and both side streams have run all they were given;
  // throws CommError naming `what` after `timeout` (their work includes collectives, which a
  // hung peer never lets finish).
  void synchronize(std::chrono::milliseconds timeout, const std::string& what) const;

 private:
  c10::Device device_;
  std::optional<c10::Stream> gather_, reduce_;
};

// Copies queued on a device's streams that read or write host memory (CPU offload's shards and
// gradient chunks): noted when queued, waited for before the host writes that memory again. Shared
// between the runtime and the handles an optimizer keeps (UnitShard::wait_writable), which may
// outlive it. On the CPU copies are done when queued: nothing is ever pending.
class HostCopies {
 public:
  explicit HostCopies(SideStreams streams) : streams_(std::move(streams)) {}
  // `timeout`: the deadline for the wait, the group's at the time (its work includes collectives).
  void note(std::chrono::milliseconds timeout) {
    pending_ = true;
    timeout_ = timeout;
  }
  // Blocks until every stream of the device has run what it was given, if a copy was noted since
  // the last wait; throws CommError naming `what` after the deadline.
  void wait(const std::string& what);

 private:
  SideStreams streams_;
  bool pending_ = false;
  std::chrono::milliseconds timeout_{0};
};

// In its scope work is issued on `side`, after the work queued so far on the current stream;
// record() gives the event the compute stream waits on to use what that work produced. Without a
// side stream (the CPU, or a caller that keeps its work on the compute stream) it does nothing
// and record() gives none.
class OnSideStream {
 public:
  explicit OnSideStream(const std::optional<c10::Stream>& side);
  OnSideStream(const OnSideStream&) = delete;
  OnSideStream& operator=(const OnSideStream&) = delete;
  std::unique_ptr<c10::Event> record() const;

 private:
  std::optional<c10::Stream> side_;
  std::optional<c10::StreamGuard> guard_;  // last: restores the current stream first
};

// Makes `device`'s current stream wait for `event`, then drops it; nothing when there is none.
void wait_for(std::unique_ptr<c10::Event>& event, c10::Device device);

}  // namespace fsdp
