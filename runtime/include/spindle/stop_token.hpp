// std::stop_token support: abort a spawned task when stop is requested, and
// let a task see that it was asked to stop.
//
//   std::stop_source stop;
//   auto h = spindle::spawn(serve(), stop.get_token());     // inside a runtime
//   auto h2 = spindle::spawn(rt, serve(), stop.get_token());  // any thread
//   stop.request_stop();   // both tasks are aborted: co_await h throws task_cancelled
//
//   while (!spindle::cancellation_requested()) crunch();  // CPU-bound loop
//
// Shape: spawn(t, token) spawns a small root task that registers a
// std::stop_callback in its own frame and then awaits `t` inline. The
// callback calls join_handle::abort() semantics on that root (any thread,
// whichever thread calls request_stop), so stop behaves exactly like abort():
// a suspended task is withdrawn and destroyed, a running one stops at its
// next suspension point, a queued one never runs, a finished one is not
// touched. The callback lives in the task's frame, so it is destroyed (and
// std::stop_callback's destructor waits for a callback running on another
// thread) before the frame and the task header can go; no allocation is
// shared with the stop_source. A stop requested before spawn, or before the
// task first runs, aborts it before any of its code runs.
//
// cancellation_requested() is the cooperative side: true inside a task that
// was aborted (by abort(), a stop request, a failing sibling in when_all or a
// task_group, or runtime shutdown) and is still running its current step.
// Such a task is destroyed at its next suspension point (co_await
// spindle::yield_now{} is one); one that returns instead completes normally
// and its value is kept.
//
// Errors: spawn(t, token) throws what spawn(t) throws
// (std::system_error with std::errc::invalid_argument for an empty task,
// std::errc::operation_not_permitted outside a runtime for the one-argument
// form), and std::bad_alloc.
// Thread-safety: request_stop() from any thread; cancellation_requested()
// from anywhere (false outside a spindle task).
// Design source: C++20 std::stop_token/std::stop_callback (P0660), Tokio's
// CancellationToken pattern (cancel a spawned task from outside),
// cppcoro's cancellation_token (cooperative check).
#pragma once

#include <coroutine>
#include <stop_token>
#include <utility>

#include "spindle/detail/task_header.hpp"
#include "spindle/join_handle.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"

namespace spindle {

/// True inside a spindle task that was asked to stop (see the file comment).
[[nodiscard]] inline bool cancellation_requested() noexcept {
  detail::task_header* self = detail::current_task();
  return self != nullptr && detail::task_is_cancelled(self);
}

namespace detail {

/// Suspends a task that is already cancelled, with nothing to wake it and a
/// suspension that withdraws: the scheduler destroys the frame at once.
struct stop_here {
  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> caller) const noexcept {
    task_header* self = suspend_current(caller, wait_kind::stop);
    if (self == nullptr) return false;
    clear_cancel_hook(self);  // nothing to withdraw from
    return true;
  }
  void await_resume() const noexcept {}
};

/// The root task spawn(t, token) runs: aborts itself on stop, runs `inner`.
template <class T>
SPINDLE_COROUTINE_TEMPLATE task<T> abort_on_stop(task<T> inner, std::stop_token token) {
  task_header* self = current_task();
  // Runs at once (here, on this thread) when stop was already requested.
  std::stop_callback on_stop{token, [self]() noexcept { task_abort(self); }};
  if (token.stop_requested()) co_await stop_here{};  // never resumes
  co_return co_await std::move(inner);
}

template <class T>
task<T> stoppable(task<T> t, std::stop_token token) {
  if (!t.valid()) {
    throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                            "spindle: spawn of an empty task");
  }
  return abort_on_stop(std::move(t), std::move(token));
}

}  // namespace detail

/// Spawns `t` on the runtime of the calling thread (as spindle::spawn(t));
/// requesting stop on `token`'s source aborts it (see the file comment).
template <class T>
join_handle<T> spawn(task<T> t, std::stop_token token,
                     spawn_location where = spawn_location::current()) {
  if (!token.stop_possible()) return spindle::spawn(std::move(t), where);
  bool stopped = token.stop_requested();
  join_handle<T> h = spindle::spawn(detail::stoppable(std::move(t), std::move(token)), where);
  if (stopped) h.abort();  // queued: it never runs
  return h;
}

/// Spawns `t` on `rt` from any thread (as rt.spawn(t)); requesting stop on
/// `token`'s source aborts it (see the file comment).
template <class T>
join_handle<T> spawn(runtime& rt, task<T> t, std::stop_token token,
                     spawn_location where = spawn_location::current()) {
  if (!token.stop_possible()) return rt.spawn(std::move(t), where);
  bool stopped = token.stop_requested();
  join_handle<T> h = rt.spawn(detail::stoppable(std::move(t), std::move(token)), where);
  if (stopped) h.abort();
  return h;
}

}  // namespace spindle
