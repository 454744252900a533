// spindle::latch: a single-use countdown; waiters complete when it reaches 0.
//
//   spindle::latch done{3};
//   done.count_down();          // from tasks or any thread
//   co_await done.wait();       // suspends until the count is 0
//
// Shape: an atomic count (read lock-free by try_wait() and wait()'s fast
// path) and an intrusive list of waiters under a std::mutex (no allocation
// per wait). The count_down() that reaches 0 wakes every waiter, outside the
// lock; later waits complete at once. Like std::latch, it cannot be reset.
//
// Cancellation: a task aborted while waiting leaves the list; a wait
// consumes nothing, so nothing has to be given back.
//
// Errors: a negative initial count, and count_down(n) with n < 0 or n larger
// than the remaining count, throw std::system_error(std::errc::invalid_argument)
// (the count is left unchanged). co_await wait() outside a spindle task
// (unless the count is 0) and blocking_wait() inside one throw
// std::system_error(std::errc::operation_not_permitted).
//
// Thread-safety: every member may be called from any thread, including
// threads outside the runtime. Each count_down() happens-before the return of
// every wait it completes. The latch must outlive its waiters.
// Design source: std::latch (C++20), the wait_list protocol.
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>

#include "spindle/detail/sync_awaiter.hpp"
#include "spindle/detail/wait_list.hpp"

namespace spindle {

/// A single-use countdown: wait() completes once count_down() has brought the
/// count to 0. Any thread. Full contract: the comment of spindle/latch.hpp.
class latch : public detail::sync_waiters {
 public:
  /// The name used in this primitive's error messages.
  static constexpr char const* type_name = "latch";
  class wait_awaiter;

  /// Throws std::system_error(invalid_argument) when `count` < 0.
  explicit latch(std::ptrdiff_t count);
  latch(latch const&) = delete;
  latch& operator=(latch const&) = delete;

  /// Decrements the count by `n`; reaching 0 wakes every waiter. Any thread.
  void count_down(std::ptrdiff_t n = 1);
  /// True once the count is 0.
  [[nodiscard]] bool try_wait() const noexcept {
    return count_.load(std::memory_order_acquire) == 0;
  }
  /// `co_await l.wait()` completes once the count is 0.
  [[nodiscard]] wait_awaiter wait() noexcept;
  /// count_down(n) now, then the awaitable of wait().
  [[nodiscard]] wait_awaiter arrive_and_wait(std::ptrdiff_t n = 1);

  /// For plain threads outside the runtime: blocks until the count is 0.
  void blocking_wait();

 private:
  template <class, class>
  friend class detail::sync_awaiter;

  bool take_locked(detail::sync_node& n, detail::wake_batch& wakes) noexcept;

  std::atomic<std::ptrdiff_t> count_;  ///< written under state_lock_
};

/// Awaiter of latch::wait().
class latch::wait_awaiter : public detail::sync_awaiter<latch> {
 public:
  using sync_awaiter::sync_awaiter;
  /// Awaiter protocol: true when the count is already 0 (no suspension).
  bool await_ready() const noexcept { return prim_->try_wait(); }
  /// Awaiter protocol: the count reached 0.
  void await_resume() noexcept { consumed(); }

 private:
  friend class latch;
  void block() { wait_blocking("blocking_wait"); }
};

inline latch::wait_awaiter latch::wait() noexcept {
  return wait_awaiter{*this};
}

}  // namespace spindle
