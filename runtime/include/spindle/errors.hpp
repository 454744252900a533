// Exception types of spindle.
//
// Shape: spindle::task_cancelled is thrown by awaiting the join handle of a
// task that was aborted or destroyed by runtime shutdown before it finished;
// spindle::timed_out by spindle::timeout when the deadline came first.
// Other errors are std::system_error with a std::errc (see each function).
// Design source: Tokio's JoinError::Cancelled and time::error::Elapsed.
#pragma once

#include <stdexcept>

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

}  // namespace spindle
