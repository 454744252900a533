// Time: sleep_for, sleep_until and timeout.
//
//   co_await spindle::sleep_for(10ms);
//   co_await spindle::sleep_until(std::chrono::steady_clock::now() + 1s);
//   int v = co_await spindle::timeout(50ms, work());   // throws spindle::timed_out
//
// Shape: a sleep is one awaiter holding an intrusive detail::timer_entry (no
// allocation) armed on the hierarchical timer wheel of the worker the task
// runs on (5 levels x 64 slots, 1 ms ticks; see runtime/src/timer_wheel.hpp).
// Deadlines are rounded up to the next whole millisecond of the runtime's
// clock, so a sleep never ends early; it ends within about a millisecond
// after its deadline unless its worker is held up by a long poll (timers are
// fired at the end of every scheduler tick and when a parked worker's park
// times out, which is at its next deadline). A deadline already passed
// completes without suspending. Clock: std::chrono::steady_clock.
//
// timeout(d, work) spawns `work` as a child task and waits for whichever
// comes first, its completion or the deadline. When the deadline comes first
// the child is aborted and awaited (it stops at its next suspension point,
// its destructors run), then timed_out is thrown; if the child finished before
// the abort took hold, its own result (value or exception) is returned
// instead. When the task awaiting the timeout is itself cancelled, the child
// is aborted too.
//
// Cancellation: aborting a task suspended in a sleep removes its timer from
// the wheel; its frame is destroyed at once.
//
// Errors: awaiting outside a spindle task throws std::system_error with
// std::errc::operation_not_permitted; timeout throws spindle::timed_out.
//
// Thread-safety: the awaiters belong to the awaiting task. A timer armed on
// one worker may wake its task onto any worker.
// Design source: Volt's timer wheel and sleep, Tokio's
// time::sleep / time::timeout.
#pragma once

#include <atomic>
#include <chrono>
#include <coroutine>
#include <system_error>
#include <thread>
#include <utility>

#include "spindle/detail/task_header.hpp"
#include "spindle/detail/timer_entry.hpp"
#include "spindle/errors.hpp"
#include "spindle/join_handle.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"

namespace spindle {

namespace detail {

[[noreturn]] inline void throw_outside_task(char const* what) {
  throw std::system_error(std::make_error_code(std::errc::operation_not_permitted), what);
}

}  // namespace detail

/// The awaiter of sleep_for / sleep_until. Movable before it is awaited (so
/// that spawn(sleep_for(d)) can move it into a task), never copyable.
class [[nodiscard]] sleep_awaiter : detail::cancel_hook {
 public:
  /// An awaiter that resumes its task at `deadline` (steady_clock); one
  /// already due completes without suspending.
  explicit sleep_awaiter(std::chrono::steady_clock::time_point deadline) noexcept
      : deadline_(deadline) {}
  /// Only before it is awaited: an armed awaiter is in a timer wheel by
  /// address (and its task is suspended, so nobody can move it then).
  sleep_awaiter(sleep_awaiter&& other) noexcept : deadline_(other.deadline_) {}
  sleep_awaiter(sleep_awaiter const&) = delete;
  sleep_awaiter& operator=(sleep_awaiter const&) = delete;
  ~sleep_awaiter() {
    // Destroyed while armed: the task was cancelled or its runtime shut down.
    if (armed_) detail::timer_disarm(entry_);
  }

  /// When the sleep ends (steady_clock).
  [[nodiscard]] std::chrono::steady_clock::time_point deadline() const noexcept {
    return deadline_;
  }

  /// this_fiber::await may run await_suspend on the fiber's own stack:
  /// the task is woken only through detail::wake, never resumed here.
  using wakes_through_scheduler = void;
  /// Awaiter protocol: true once the deadline has passed (no suspension).
  bool await_ready() const noexcept { return deadline_ <= std::chrono::steady_clock::now(); }
  /// Awaiter protocol: arms the timer of the calling task. Throws
  /// std::system_error(std::errc::operation_not_permitted) outside a spindle
  /// task.
  bool await_suspend(std::coroutine_handle<> caller) {
    detail::task_header* self = detail::suspend_current(caller, wait_kind::timer);
    if (self == nullptr)
      detail::throw_outside_task("spindle: sleep awaited outside a spindle task");
    entry_.task = self;
    detail::set_cancel_hook(self, this, &sleep_awaiter::on_cancel);
    if (!detail::timer_arm(entry_, deadline_)) {
      detail::clear_cancel_hook(self);
      return false;  // already due
    }
    armed_ = true;
    return true;
  }
  /// Awaiter protocol: the timer fired (it is out of the wheel).
  void await_resume() noexcept { armed_ = false; }

 private:
  static bool on_cancel(detail::cancel_hook* hook) noexcept {
    auto* a = static_cast<sleep_awaiter*>(hook);
    if (!detail::timer_disarm(a->entry_)) return false;  // fired: its wake is coming
    a->armed_ = false;
    return true;
  }

  std::chrono::steady_clock::time_point deadline_;
  detail::timer_entry entry_;
  bool armed_ = false;
};

/// Suspends the calling task until `deadline` (steady_clock).
[[nodiscard]] inline sleep_awaiter sleep_until(std::chrono::steady_clock::time_point deadline) {
  return sleep_awaiter{deadline};
}

/// Suspends the calling task for at least `d` (whole ms, rounded up).
/// Negative or zero durations complete without suspending.
template <class Rep, class Period>
[[nodiscard]] sleep_awaiter sleep_for(std::chrono::duration<Rep, Period> d) {
  auto now = std::chrono::steady_clock::now();
  if (d <= d.zero()) return sleep_awaiter{now};
  // Saturate instead of overflowing time_point for huge durations.
  auto limit = std::chrono::steady_clock::time_point::max() - now;
  if (d >= limit) return sleep_awaiter{std::chrono::steady_clock::time_point::max()};
  return sleep_awaiter{now + std::chrono::ceil<std::chrono::steady_clock::duration>(d)};
}

namespace detail {

/// Waits for the first of: `child` completes, or `deadline`. Resumes with
/// true when the child is complete. Both wake sources bump `claim_`; the
/// first to bump it from 0 wakes the task. Intrusive: no allocation.
class join_or_deadline : join_waiter, cancel_hook {
 public:
  join_or_deadline(task_header* child, std::chrono::steady_clock::time_point deadline) noexcept
      : child_(child), deadline_(deadline) {
    notify = &join_or_deadline::on_join;
  }
  join_or_deadline(join_or_deadline const&) = delete;
  join_or_deadline& operator=(join_or_deadline const&) = delete;
  ~join_or_deadline() {
    // Destroyed while waiting (the task was cancelled, or shutdown).
    withdraw();
    wait_quiet();
  }

  bool await_ready() const noexcept { return task_is_complete(child_); }
  bool await_suspend(std::coroutine_handle<> caller) {
    task_header* self = suspend_current(caller, wait_kind::join);
    if (self == nullptr) throw_outside_task("spindle: timeout awaited outside a spindle task");
    self_ = self;
    entry_.task = self;
    entry_.claim = &claim_;
    set_cancel_hook(self, this, &join_or_deadline::on_cancel);
    if (!join_register(child_, this)) {
      clear_cancel_hook(self);
      return false;  // completed meanwhile
    }
    join_registered_ = true;
    if (timer_arm(entry_, deadline_)) {
      timer_armed_ = true;
      return true;
    }
    // The deadline has passed: take the join registration back, unless the
    // completion is notifying us right now (then it wakes us).
    if (join_unregister(child_)) {
      join_registered_ = false;
      clear_cancel_hook(self);
      return false;
    }
    return true;
  }
  /// True when the child completed.
  bool await_resume() noexcept {
    withdraw();
    wait_quiet();
    return task_is_complete(child_);
  }

 private:
  // Takes back the sources still registered, counting those that fired
  // (each bumps claim_ exactly once). Idempotent.
  void withdraw() noexcept {
    if (timer_armed_) {
      timer_armed_ = false;
      if (!timer_disarm(entry_)) ++fired_;  // it fired: claim_ was bumped under its lock
    }
    if (join_registered_) {
      join_registered_ = false;
      if (!join_unregister(child_)) ++fired_;  // the completion notifies (or did)
    }
  }
  // A notify in progress is between its fetch_add and its return: wait until
  // every source that fired has bumped claim_ and let go of this object.
  void wait_quiet() const noexcept {
    while (claim_.load(std::memory_order_acquire) < fired_)
      std::this_thread::yield();
  }

  static void on_join(join_waiter* w) noexcept {
    auto* self = static_cast<join_or_deadline*>(w);
    task_header* task = self->self_;
    if (self->claim_.fetch_add(1, std::memory_order_acq_rel) == 0) wake(task);
  }

  static bool on_cancel(cancel_hook* hook) noexcept {
    auto* self = static_cast<join_or_deadline*>(hook);
    self->withdraw();
    // Nothing fired: nothing will wake the task, destroy it now. Otherwise
    // the first source to fire wakes it and the frame is destroyed then.
    return self->fired_ == 0;
  }

  task_header* child_;
  std::chrono::steady_clock::time_point deadline_;
  task_header* self_ = nullptr;
  timer_entry entry_;
  std::atomic<std::uint32_t> claim_{0};
  std::uint32_t fired_ = 0;
  bool timer_armed_ = false;
  bool join_registered_ = false;
};

/// Aborts the child when the timeout's frame goes away before it finished
/// (the task awaiting the timeout was cancelled).
template <class T>
struct abort_unfinished {
  join_handle<T>& handle;
  ~abort_unfinished() {
    if (handle.valid() && !handle.is_finished()) handle.abort();
  }
};

template <class T>
SPINDLE_COROUTINE_TEMPLATE task<T> timeout_at(std::chrono::steady_clock::time_point deadline,
                                              task<T> work) {
  join_handle<T> child = spawn(std::move(work));
  abort_unfinished<T> guard{child};
  if (!co_await join_or_deadline{child.header(), deadline}) {
    child.abort();
    try {
      co_return co_await child;
    } catch (task_cancelled const&) {
      throw timed_out{};
    }
  }
  co_return co_await child;
}

}  // namespace detail

/// Runs `work` as a child task; returns its result, or throws timed_out
/// (after cancelling and awaiting it) when `d`, counted from this call,
/// passes first.
template <class T, class Rep, class Period>
[[nodiscard]] task<T> timeout(std::chrono::duration<Rep, Period> d, task<T> work) {
  auto now = std::chrono::steady_clock::now();
  auto limit = std::chrono::steady_clock::time_point::max() - now;
  auto deadline = d >= limit ? std::chrono::steady_clock::time_point::max()
                             : now + std::chrono::ceil<std::chrono::steady_clock::duration>(d);
  return detail::timeout_at(deadline, std::move(work));
}

/// As timeout, with an absolute steady_clock deadline.
template <class T>
[[nodiscard]] task<T> timeout_at(std::chrono::steady_clock::time_point deadline, task<T> work) {
  return detail::timeout_at(deadline, std::move(work));
}

}  // namespace spindle
