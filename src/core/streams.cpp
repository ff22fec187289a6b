// Side streams and the events that order them with the compute stream (streams.h).
#include "core/streams.h"

#include <c10/core/impl/VirtualGuardImpl.h>

#include <thread>

#include "fsdp/comm.h"

namespace fsdp {
namespace {
c10::Stream current_stream(c10::Device device) {
  return c10::impl::VirtualGuardImpl(device.type()).getStream(device);
}
}  // namespace

void synchronize_current_stream(c10::Device device) {
  if (!device.is_cpu()) current_stream(device).synchronize();
}

SideStreams::SideStreams(c10::Device device) : device_(device) {
  if (device.is_cpu()) return;
  // High priority, as FSDP2's: a collective's few kernels should not queue behind compute's.
  c10::impl::VirtualGuardImpl impl(device.type());
  gather_ = impl.getStreamFromGlobalPool(device, /*isHighPriority=*/true);
  reduce_ = impl.getStreamFromGlobalPool(device, /*isHighPriority=*/true);
}

void SideStreams::synchronize(std::chrono::milliseconds timeout, const std::string& what) const {
  if (!gather_) return;
  const c10::Stream compute = current_stream(device_);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!(compute.query() && gather_->query() && reduce_->query())) {
    if (std::chrono::steady_clock::now() > deadline) {
      throw CommError("fsdp: timed out after " + std::to_string(timeout.count()) +
                      " ms waiting for the device's streams (" + what +
                      "): a collective queued there has not finished (a peer rank may have "
                      "failed or be hung)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void HostCopies::wait(const std::string& what) {
  if (!pending_) return;
  pending_ = false;
  streams_.synchronize(timeout_, what);
}

OnSideStream::OnSideStream(const std::optional<c10::Stream>& side) : side_(side) {
  if (!side_) return;
  c10::Event compute_so_far(side_->device_type());
  compute_so_far.record(current_stream(side_->device()));
  compute_so_far.block(*side_);  // the event may be destroyed once the wait is queued
  guard_.emplace(*side_);
}

std::unique_ptr<c10::Event> OnSideStream::record() const {
  if (!side_) return nullptr;
  auto event = std::make_unique<c10::Event>(side_->device_type());
  event->record(*side_);
  return event;
}

void wait_for(std::unique_ptr<c10::Event>& event, c10::Device device) {
  if (!event) return;
  event->block(current_stream(device));
  event.reset();
}

}  // namespace fsdp
