// Exception types of spindle.
//
// Shape: spindle::task_cancelled is thrown by awaiting the join handle of a
// task that was aborted or destroyed by runtime shutdown before it finished.
// Other errors are std::system_error with a std::errc (see each function).
// Design source: Tokio's JoinError::Cancelled.
#pragma once

#include <stdexcept>

namespace spindle {

/// Thrown by `co_await handle` when the task was cancelled before it finished.
class task_cancelled : public std::runtime_error {
 public:
  task_cancelled() : std::runtime_error("spindle: task was cancelled") {}
};

}  // namespace spindle
