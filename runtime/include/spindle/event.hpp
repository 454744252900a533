// spindle::event: an asynchronous manual-reset event.
//
//   spindle::event ev;
//   co_await ev.wait();   // suspends until the event is set (at once if it is)
//   ev.set();             // wakes every waiter; stays set
//   ev.reset();           // later waits suspend again
//
// Shape: an atomic `set` flag (read lock-free by is_set() and by wait()'s
// fast path) and an intrusive FIFO of waiters under a std::mutex (no
// allocation per wait). set() wakes every waiter present, outside the lock.
// A waiter woken by set() completes even if reset() follows before it runs.
//
// Cancellation: a task aborted while waiting leaves the list; nothing is
// consumed by a wait, so nothing has to be given back.
//
// Errors: co_await ev.wait() on an unset event outside a spindle task and
// blocking_wait() inside one throw std::system_error(
// std::errc::operation_not_permitted).
//
// Thread-safety: every member may be called from any thread, including
// threads outside the runtime. set() happens-before the return of every wait
// it completes. The event must outlive its waiters.
// Design source: cppcoro's async_manual_reset_event, the wait_list protocol.
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>

#include "spindle/detail/sync_awaiter.hpp"
#include "spindle/detail/wait_list.hpp"

namespace spindle {

/// A manual-reset event: wait() completes once the event is set; set() wakes
/// every waiter and the event stays set until reset(). Any thread. Full
/// contract: the comment of spindle/event.hpp.
class event : public detail::sync_waiters {
 public:
  /// The name used in this primitive's error messages.
  static constexpr char const* type_name = "event";
  class wait_awaiter;

  /// An event, set or not.
  explicit event(bool initially_set = false) noexcept : set_(initially_set) {}
  event(event const&) = delete;
  event& operator=(event const&) = delete;

  /// `co_await ev.wait()` completes once the event is set.
  [[nodiscard]] wait_awaiter wait() noexcept;
  /// Sets the event and wakes every waiter. Any thread.
  void set();
  /// Clears the event; later waits suspend until the next set().
  void reset();
  /// True while the event is set (a snapshot; acquire).
  [[nodiscard]] bool is_set() const noexcept { return set_.load(std::memory_order_acquire); }

  /// For plain threads outside the runtime: blocks until the event is set.
  void blocking_wait();

 private:
  template <class, class>
  friend class detail::sync_awaiter;

  bool take_locked(detail::sync_node& n, detail::wake_batch& wakes) noexcept;

  std::atomic<bool> set_;  ///< written under state_lock_
};

/// Awaiter of event::wait().
class event::wait_awaiter : public detail::sync_awaiter<event> {
 public:
  using sync_awaiter::sync_awaiter;
  /// Awaiter protocol: true when the event is already set (no suspension).
  bool await_ready() const noexcept { return prim_->is_set(); }
  /// Awaiter protocol: the event was set.
  void await_resume() noexcept { consumed(); }

 private:
  friend class event;
  void block() { wait_blocking("blocking_wait"); }
};

inline event::wait_awaiter event::wait() noexcept {
  return wait_awaiter{*this};
}

}  // namespace spindle
