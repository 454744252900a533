// The awaiter behind spawn_blocking: one job for the runtime's blocking pool.
//
// Shape: spawn_blocking(fn) spawns an ordinary task, run_blocking(fn), whose
// body is `co_return co_await blocking_awaiter{fn}`. The awaiter is the job:
// an intrusive record (list links, the task to wake, a type-erased `run`)
// that lives in the task's frame, so queueing a job allocates nothing beyond
// the task itself. await_suspend queues it on the pool of the task's runtime;
// a pool thread calls `run`, which invokes fn and stores its value or
// exception in the awaiter, then wakes the task (detail::wake); the task
// resumes on a worker and await_resume yields the value or rethrows, so the
// join handle (await, exceptions, detach, abort) works unchanged.
//
// Cancellation (join_handle::abort of the task, through its cancel hook): a
// job still queued is unlinked (fn never runs; the hook returns true and the
// frame is destroyed at once). A job a pool thread has taken cannot be
// interrupted: the hook returns false, fn runs to the end, and its wake
// destroys the frame instead of resuming it (the stored value or exception
// is destroyed with the awaiter). The callable itself is destroyed on the
// pool thread as soon as it returns (a withdrawn one with the frame).
//
// Errors: await_suspend throws (inside the spawned task, so the join handle
// rethrows) std::system_error with std::errc::resource_unavailable_try_again
// when the pool has no thread and cannot start one. A job submitted while
// the runtime shuts down is not taken; its task is destroyed with the other
// unfinished tasks (the handle reports task_cancelled).
//
// Thread-safety: after submit the job belongs to the pool until its wake;
// `queued` and the links are guarded by the pool's mutex. The pool thread
// writes the outcome before the wake and the task reads it after resuming
// (the wake's state transition orders the two).
// Design source: Tokio's spawn_blocking (a bounded pool of threads for calls
// that block); the in-frame intrusive job follows spindle's io_op and
// detail/wait_list.hpp.
#pragma once

#include <concepts>
#include <coroutine>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <system_error>
#include <type_traits>
#include <utility>

#include "spindle/detail/task_header.hpp"
#include "spindle/task.hpp"

namespace spindle::detail {

class blocking_pool;

/// One job for the blocking pool (the non-template part of the awaiter).
struct blocking_job {
  /// Invokes the callable and stores its outcome; never throws. Called once,
  /// on a pool thread.
  void (*run)(blocking_job* self) noexcept = nullptr;
  task_header* task = nullptr;    ///< woken when `run` returned
  blocking_pool* pool = nullptr;  ///< set by submit_blocking
  blocking_job* next = nullptr;   ///< queue links (pool mutex)
  blocking_job* prev = nullptr;
  bool queued = false;  ///< in the queue, not taken (pool mutex)
};

enum class blocking_submit : std::uint8_t {
  queued,         ///< taken: the task is woken once `run` has returned
  shutting_down,  ///< the pool has stopped: not taken, the task is never woken
  no_thread,      ///< no pool thread exists and none could be started: not taken
};

/// Queues `job` (run and task set) on the blocking pool of `sched`.
[[nodiscard]] blocking_submit submit_blocking(scheduler* sched, blocking_job& job) noexcept;
/// The cancel hook's work: true when `job` was still queued and is now
/// withdrawn, or was never taken (shutting_down); false when a pool thread
/// has it (its wake will come, or, during shutdown, the runtime destroys it).
bool cancel_blocking(blocking_job& job) noexcept;

/// What fn() returns, as the join handle's T.
template <class F>
using blocking_result_t = std::invoke_result_t<std::decay_t<F>>;

/// A callable spawn_blocking accepts: stored by value, invoked once as an
/// rvalue, returning void or an object type.
template <class F>
concept blocking_callable = std::constructible_from<std::decay_t<F>, F> &&
    std::invocable<std::decay_t<F>> &&
    (std::is_void_v<blocking_result_t<F>> ||
     (std::is_object_v<blocking_result_t<F>> && !std::is_array_v<blocking_result_t<F>> &&
      std::move_constructible<blocking_result_t<F>>));

template <class R, class F>
class blocking_awaiter final : public blocking_job, cancel_hook {
 public:
  explicit blocking_awaiter(std::optional<F>& fn) noexcept : fn_(fn) {
    run = &blocking_awaiter::run_job;
  }
  blocking_awaiter(blocking_awaiter const&) = delete;
  blocking_awaiter& operator=(blocking_awaiter const&) = delete;

  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> caller) {
    task_header* self = suspend_current(caller, wait_kind::blocking);
    if (self == nullptr) {
      throw std::system_error(std::make_error_code(std::errc::operation_not_permitted),
                              "spindle: blocking job awaited outside a spindle task");
    }
    task = self;
    // Before submit: once the pool has the job this awaiter must not touch
    // it, and the hook may run as soon as this poll returns.
    set_cancel_hook(self, this, &blocking_awaiter::on_cancel);
    blocking_submit const r = submit_blocking(scheduler_of(self), *this);
    // Queued: `this` may be gone from here on. Shutting down: the task stays
    // suspended until the runtime destroys it (its handle reports
    // task_cancelled), like every task the shutdown finds unfinished.
    if (r != blocking_submit::no_thread) return true;
    clear_cancel_hook(self);  // not suspending after all
    throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                            "spindle::spawn_blocking: cannot start a blocking-pool thread");
  }
  R await_resume() {
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    if constexpr (std::is_void_v<R>) {
      return;
    } else {
      return std::move(*value_);
    }
  }

 private:
  struct empty {};
  using value_type = std::conditional_t<std::is_void_v<R>, empty, std::remove_cv_t<R>>;

  static void run_job(blocking_job* job) noexcept {
    auto* self = static_cast<blocking_awaiter*>(job);
    try {
      if constexpr (std::is_void_v<R>) {
        std::invoke(std::move(*self->fn_));
      } else {
        self->value_.emplace(std::invoke(std::move(*self->fn_)));
      }
    } catch (...) {
      self->error_ = std::current_exception();
    }
    // Like Tokio's FnOnce: what fn captured is released as soon as it
    // returns, on this thread, not when the join handle goes.
    self->fn_.reset();
  }
  static bool on_cancel(cancel_hook* hook) noexcept {
    return cancel_blocking(*static_cast<blocking_awaiter*>(hook));
  }

  std::optional<F>& fn_;  // run_blocking's parameter (same frame); empty once run
  std::optional<value_type> value_;
  std::exception_ptr error_;
};

/// The body of a spawn_blocking task: hands `fn` to the blocking pool and
/// yields its result. `fn` is held in an optional so that the job can
/// destroy it as soon as it has run.
template <class R, class F>
task<R> run_blocking(std::optional<F> fn) {
  co_return co_await blocking_awaiter<R, F>{fn};
}

/// The task spawn_blocking spawns for `fn`.
template <class F>
task<blocking_result_t<F>> make_blocking_task(F&& fn) {
  return run_blocking<blocking_result_t<F>, std::decay_t<F>>(
      std::optional<std::decay_t<F>>(std::in_place, std::forward<F>(fn)));
}

}  // namespace spindle::detail
