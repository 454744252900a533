// Exception types of spindle.
//
// Shape: spindle::task_cancelled is thrown by awaiting the join handle of a
// task that was aborted or destroyed by runtime shutdown before it finished;
// spindle::timed_out by spindle::timeout when the deadline came first.
// spindle::channel_closed is thrown by sending on a closed channel (channel,
// broadcast, watch) and by receiving from a oneshot whose sender was dropped
// without sending. spindle::broadcast_lagged is thrown by a broadcast
// receiver that fell more than the capacity behind; it carries how many
// values it missed. Other errors are std::system_error with a std::errc (see
// each function).
// Design source: Tokio's JoinError::Cancelled, time::error::Elapsed,
// mpsc::error::SendError, oneshot::error::RecvError and
// broadcast::error::RecvError::Lagged.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace spindle {

/// Thrown by `co_await handle` when the task was cancelled before it finished.
class task_cancelled : public std::runtime_error {
 public:
  task_cancelled() : std::runtime_error("spindle: task was cancelled") {}
};

/// Thrown by `co_await spindle::timeout(d, work)` when `d` passed before
/// `work` finished (`work` has then been cancelled).
class timed_out : public std::runtime_error {
 public:
  timed_out() : std::runtime_error("spindle: operation timed out") {}
};

/// Thrown by a send on a closed channel, broadcast or watch, and by receiving
/// from a oneshot whose sender was dropped without sending.
class channel_closed : public std::runtime_error {
 public:
  channel_closed() : std::runtime_error("spindle: channel closed") {}
};

/// Thrown by broadcast<T>::receiver::recv() (and try_recv, blocking_recv)
/// when the receiver fell more than the broadcast's capacity behind: the
/// `missed()` oldest values were overwritten before it read them. The
/// receiver has skipped them; its next recv returns the oldest value still
/// retained.
class broadcast_lagged : public std::runtime_error {
 public:
  /// An error for a receiver that skipped `missed` values.
  explicit broadcast_lagged(std::uint64_t missed)
      : std::runtime_error("spindle: broadcast receiver lagged behind and missed " +
                           std::to_string(missed) + " values"),
        missed_(missed) {}
  /// How many values this receiver skipped (>= 1).
  [[nodiscard]] std::uint64_t missed() const noexcept { return missed_; }

 private:
  std::uint64_t missed_;
};

}  // namespace spindle
