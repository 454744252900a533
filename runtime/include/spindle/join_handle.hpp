// spindle::join_handle<T>: the owner's view of a spawned task.
//
// Shape: a move-only reference (one pointer) to a task header. `co_await h`
// suspends the awaiting task until the spawned task completes, then yields its
// T or rethrows its exception; the result can be taken once. Dropping the
// handle detaches the task: it keeps running, and an exception it ends with
// is counted in runtime_stats::detached_exceptions and reported on stderr.
// A handle dropped after completion with an exception nobody took reports it
// on stderr too, so no exception is lost silently. A handle can also be
// handed over (moved) to when_all, when_any or task_group::spawn, which adopt
// the task as a child: they take its result, and abort it with their other
// children.
//
// Errors: awaiting throws spindle::task_cancelled if the task was aborted or
// destroyed by runtime shutdown before it finished; std::system_error with
// std::errc::invalid_argument when the handle is empty or its result was
// already taken; std::system_error with std::errc::operation_not_permitted
// when awaited outside a spindle task (use runtime::block_on there).
//
// Thread-safety: one handle is used by one thread at a time; is_finished() and
// abort() may race with the task running on any worker.
// Design source: Tokio's JoinHandle (detach on drop, abort), the scanner executor
// (exceptions stored in the handle and rethrown at join).
#pragma once

#include <system_error>
#include <utility>

#include "spindle/detail/task_header.hpp"
#include "spindle/errors.hpp"

namespace spindle {

/// The owner's move-only handle of a spawned task: `co_await h` yields the
/// task's T or rethrows its exception (once); abort() cancels it; dropping
/// the handle detaches the task. Errors, cancellation and thread-safety: the
/// comment of spindle/join_handle.hpp.
template <class T>
class [[nodiscard]] join_handle {
 public:
  /// A handle of no task (valid() is false).
  join_handle() noexcept = default;
  /// Internal (spawn): the handle of the spawned task `task`.
  explicit join_handle(detail::task_header* task) noexcept : task_(task) {}
  /// Takes over `other`'s task; `other` refers to none afterwards.
  join_handle(join_handle&& other) noexcept
      : task_(std::exchange(other.task_, nullptr)), taken_(std::exchange(other.taken_, false)) {}
  /// Detaches this handle's task (as the destructor does), then takes over
  /// `other`'s.
  join_handle& operator=(join_handle&& other) noexcept {
    if (this != &other) {
      reset();
      task_ = std::exchange(other.task_, nullptr);
      taken_ = std::exchange(other.taken_, false);
    }
    return *this;
  }
  join_handle(join_handle const&) = delete;
  join_handle& operator=(join_handle const&) = delete;
  ~join_handle() { reset(); }

  /// True once the task has completed (normally, with an exception, or cancelled).
  [[nodiscard]] bool is_finished() const noexcept {
    return task_ != nullptr && detail::task_is_complete(task_);
  }

  /// Requests cancellation: a task that has not finished never resumes again;
  /// its frame is destroyed (destructors run) at once when it is queued or
  /// suspended in an awaiter that can withdraw (join handles, awaitables
  /// unknown to spindle), else as soon as the pending operation completes
  /// (in-flight I/O is cancelled first). Awaiting the handle then throws
  /// task_cancelled. A no-op on a finished task. Any thread.
  void abort() noexcept {
    if (task_ != nullptr) detail::task_abort(task_);
  }

  /// True when the handle refers to a task.
  [[nodiscard]] bool valid() const noexcept { return task_ != nullptr; }

  /// True once take() (or awaiting the handle) took the result.
  [[nodiscard]] bool result_taken() const noexcept { return taken_; }

  /// The awaiter of `co_await h`: runs a task that is queued but not started
  /// inline, else suspends until it completes.
  struct awaiter : detail::join_waiter, detail::cancel_hook {
    join_handle* handle;                  ///< the handle awaited
    detail::task_header* self = nullptr;  ///< the awaiting task, once suspended

    /// An awaiter of `*h`.
    explicit awaiter(join_handle* h) noexcept : handle(h) {}
    /// Awaiter protocol: true when the task has completed. Throws
    /// std::system_error(std::errc::invalid_argument) for an empty handle or
    /// a result already taken.
    bool await_ready() const {
      handle->check_awaitable();
      return detail::task_is_complete(handle->task_);
    }
    /// Awaiter protocol: waits for the task. Throws
    /// std::system_error(std::errc::operation_not_permitted) outside a
    /// spindle task.
    bool await_suspend(std::coroutine_handle<> caller) {
      self = detail::suspend_current(caller, wait_kind::join);
      if (self == nullptr) {
        throw std::system_error(std::make_error_code(std::errc::operation_not_permitted),
                                "spindle: join_handle awaited outside a spindle task");
      }
      // Not started yet and queued here: run it now, nested in this poll.
      if (detail::run_inline(handle->task_)) {
        detail::clear_cancel_hook(self);
        return false;
      }
      notify = &awaiter::on_complete;
      if (!detail::join_register(handle->task_, this)) {
        detail::clear_cancel_hook(self);  // not suspending after all
        return false;
      }
      detail::set_cancel_hook(self, this, &awaiter::on_cancel);
      return true;
    }
    /// Awaiter protocol: take().
    T await_resume() { return handle->take(); }

    /// Internal: the task completed; wakes the awaiting task.
    static void on_complete(detail::join_waiter* w) noexcept {
      detail::wake(static_cast<awaiter*>(w)->self);
    }
    /// Internal: the awaiting task is aborted; withdraws the registration
    /// unless the completion is already notifying it.
    static bool on_cancel(detail::cancel_hook* hook) noexcept {
      return detail::join_unregister(static_cast<awaiter*>(hook)->handle->task_);
    }
  };

  /// Waits for the task; yields its value or rethrows its exception.
  awaiter operator co_await() & noexcept { return awaiter{this}; }
  /// Waits for the task; yields its value or rethrows its exception.
  awaiter operator co_await() && noexcept { return awaiter{this}; }

  /// Takes the result of a finished task (used by block_on and awaiters).
  /// Precondition: is_finished().
  T take() {
    check_awaitable();
    taken_ = true;
    if (task_->cancelled_before_finish) throw task_cancelled{};
    return static_cast<detail::promise<T>*>(task_->root_promise())->take_result();
  }

  /// The header (for the runtime and tests).
  [[nodiscard]] detail::task_header* header() const noexcept { return task_; }

 private:
  void check_awaitable() const {
    if (task_ == nullptr || taken_) {
      throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                              task_ == nullptr ? "spindle: empty join_handle"
                                               : "spindle: join_handle result already taken");
    }
  }
  void reset() noexcept {
    if (task_ != nullptr) detail::join_detach(std::exchange(task_, nullptr));
    taken_ = false;
  }

  detail::task_header* task_ = nullptr;
  bool taken_ = false;
};

}  // namespace spindle
