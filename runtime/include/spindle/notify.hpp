// spindle::notify: wakes tasks waiting for "something changed", with Tokio's
// Notify semantics.
//
//   spindle::notify n;
//   co_await n.wait();   // suspends until notified (or takes a stored permit)
//   n.notify_one();      // wakes the oldest waiter, or stores one permit
//   n.notify_all();      // wakes the waiters present now; stores nothing
//
// Shape: a std::mutex guarding a one-permit flag and an intrusive FIFO of
// waiters (no allocation per wait), plus an atomic notify_all() generation.
// - notify_one() with no waiter stores a single permit (at most one: a
//   second notify_one() stores nothing more); the next wait() consumes it and
//   completes at once.
// - notify_all() wakes the current waiters only; it neither stores a permit
//   nor consumes one. Like Tokio's Notified future, a wait() awaitable counts
//   as registered for notify_all() from the moment it is created: an
//   awaitable created before a notify_all() completes at once when awaited
//   after it, so `auto w = n.wait(); if (!ready()) co_await w;` loses no
//   wake-up.
//
// Cancellation: a task aborted while waiting leaves the list. A task that
// notify_one() chose but that was aborted before it resumed passes the
// notification on (to the next waiter, or as the stored permit), as Tokio
// does for a dropped Notified; a notify_all() wake is not passed on.
//
// Errors: co_await outside a spindle task (unless it completes at once) and
// blocking_wait() inside one throw std::system_error(
// std::errc::operation_not_permitted).
//
// Thread-safety: every member may be called from any thread, including
// threads outside the runtime. The notify must outlive its waiters.
// Design source: Tokio's sync::Notify (permit, notify_waiters generation,
// forwarding of a dropped notify_one).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "spindle/detail/sync_awaiter.hpp"
#include "spindle/detail/wait_list.hpp"

namespace spindle {

namespace detail {
struct notify_node : sync_node {
  std::uint64_t generation = 0;  ///< notify_all() generation when the awaitable was created
  bool by_one = false;           ///< served by notify_one() (passed on if never resumed)
};
}  // namespace detail

/// Wakes tasks waiting for "something changed" (Tokio's Notify):
/// notify_one() wakes the oldest waiter or stores one permit, notify_all()
/// wakes the waiters present. Any thread. Full contract: the comment of
/// spindle/notify.hpp.
class notify : public detail::sync_waiters {
 public:
  /// The name used in this primitive's error messages.
  static constexpr char const* type_name = "notify";
  class wait_awaiter;

  notify() noexcept = default;
  notify(notify const&) = delete;
  notify& operator=(notify const&) = delete;

  /// `co_await n.wait()` completes at the next notify_one() that picks it,
  /// at a stored permit, or at a notify_all() after the awaitable's creation.
  [[nodiscard]] wait_awaiter wait() noexcept;
  /// Wakes the oldest waiter, or stores one permit if nobody waits. Any thread.
  void notify_one();
  /// Wakes every current waiter (none later). Any thread.
  void notify_all();

  /// For plain threads outside the runtime: blocks until notified.
  void blocking_wait();

 private:
  template <class, class>
  friend class detail::sync_awaiter;
  using node = detail::notify_node;

  bool take_locked(node& n, detail::wake_batch& wakes) noexcept;
  void withdrawn_locked(node& n, detail::wake_batch& wakes) noexcept;
  void give_back_locked(node& n, detail::wake_batch& wakes) noexcept;
  void notify_one_locked(detail::wake_batch& wakes) noexcept;

  bool permit_ = false;
  std::atomic<std::uint64_t> generation_{0};  ///< bumped by notify_all() under state_lock_
};

/// Awaiter of notify::wait().
class notify::wait_awaiter : public detail::sync_awaiter<notify, detail::notify_node> {
 public:
  /// A wait on `n`; a notify_all() from now on completes it.
  explicit wait_awaiter(spindle::notify& n) noexcept : sync_awaiter(n) {
    generation = n.generation_.load(std::memory_order_acquire);
  }
  /// Awaiter protocol: notified (or a stored permit was taken).
  void await_resume() noexcept { consumed(); }

 private:
  friend class notify;
  void block() { wait_blocking("blocking_wait"); }
};

inline notify::wait_awaiter notify::wait() noexcept {
  return wait_awaiter{*this};
}

}  // namespace spindle
