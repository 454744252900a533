// The suspend / withdraw half of an awaiter that waits for a condition on a
// shared state whose waiters are all woken together (broadcast recv, watch
// changed).
//
// Shape: state_waiter<State> is a base of the awaiter and its own wait node
// (no allocation per wait). State has `std::mutex mutex` guarding the
// condition and `wait_list waiters`; the waker takes every node of `waiters`
// under the mutex and notifies them after unlocking (detail::wake_batch). A
// woken node carries nothing, so an aborted or destroyed waiter has nothing
// to give back: it only unlinks itself if it is still linked. The awaiter
// supplies the condition and what await_resume reads:
//
//   bool await_suspend(std::coroutine_handle<> h) {
//     return this->suspend_unless(h, state, "... outside a spindle task",
//                                 [&] { return ready_locked(); });
//   }
//   R await_resume() {
//     std::lock_guard lock{this->resumed()};
//     return take_locked();
//   }
//
// Threads outside the runtime wait with wait_as_thread_unless (same
// condition, same list). receiver_base and receiver_awaiter are what the
// broadcast and watch receivers share on top of it: the shared state and its
// checks, and the awaiter of their one wait.
//
// Errors: suspend_unless throws std::system_error(operation_not_permitted)
// with the given message outside a spindle task.
// Thread-safety: one awaiter is awaited once, by one task.
// Design source: the await / cancel-hook protocol of detail/wait_list.hpp.
#pragma once

#include <coroutine>
#include <cstddef>
#include <memory>
#include <mutex>
#include <system_error>

#include "spindle/detail/task_header.hpp"
#include "spindle/detail/wait_list.hpp"

namespace spindle::detail {

template <class State>
class state_waiter : wait_node, cancel_hook {
 public:
  state_waiter(state_waiter const&) = delete;
  state_waiter& operator=(state_waiter const&) = delete;

 protected:
  state_waiter() noexcept = default;
  ~state_waiter() {
    if (suspended_) {
      std::lock_guard lock{state_->mutex};
      state_->waiters.remove(this);  // still linked only at shutdown
    }
  }

  /// For await_suspend: completes at once (returns false) when ready() holds
  /// under the state's mutex, else links this node and suspends.
  template <class Ready>
  bool suspend_unless(std::coroutine_handle<> caller, State* state, char const* outside_task,
                      Ready ready) {
    task_header* self = suspend_current(caller, wait_kind::sync);
    require_task(self, outside_task);
    state_ = state;
    std::lock_guard lock{state_->mutex};
    if (ready()) {
      clear_cancel_hook(self);
      return false;
    }
    this->task = self;
    state_->waiters.push_back(this);
    suspended_ = true;
    set_cancel_hook(self, this, &state_waiter::on_cancel);
    return true;
  }

  /// For await_resume: the wait is over; returns the state's mutex, to be
  /// locked while reading the result.
  std::mutex& resumed() noexcept {
    suspended_ = false;
    return state_->mutex;
  }

 private:
  static bool on_cancel(cancel_hook* hook) noexcept {
    auto* self = static_cast<state_waiter*>(hook);
    std::lock_guard lock{self->state_->mutex};
    return self->state_->waiters.remove(self);
  }

  State* state_ = nullptr;
  bool suspended_ = false;
};

/// The same wait for a thread outside the runtime (blocking_ calls): returns
/// take() under the state's mutex once ready() holds, blocking the thread
/// until the next wake of `waiters` when it does not hold yet (no
/// cancellation). Call without the mutex.
template <class State, class Ready, class Take>
auto wait_as_thread_unless(State& state, Ready ready, Take take) {
  wait_node node;
  {
    std::lock_guard lock{state.mutex};
    if (ready()) return take();
    state.waiters.push_back(&node);
  }
  node.wait_as_thread();
  std::lock_guard lock{state.mutex};
  return take();
}

/// What a receiver of a state_waiter state holds and checks (broadcast and
/// watch receivers). State names its empty-receiver error message
/// (State::empty_receiver).
template <class State>
class receiver_base {
 public:
  [[nodiscard]] bool valid() const noexcept { return state_ != nullptr; }
  /// True once the sender side closed (values may still be unread). Throws
  /// std::system_error(invalid_argument) on an empty receiver.
  [[nodiscard]] bool is_closed() const {
    check_valid();
    std::lock_guard lock{state_->mutex};
    return state_->closed;
  }

 protected:
  receiver_base() noexcept = default;
  explicit receiver_base(std::shared_ptr<State> s) noexcept : state_(std::move(s)) {}

  /// Throws std::system_error(invalid_argument) on an empty (moved-from or
  /// default-constructed) receiver.
  void check_valid() const {
    if (!state_) {
      throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                              State::empty_receiver);
    }
  }

  std::shared_ptr<State> state_;
};

/// The awaiter of a receiver's wait: completes when Rx::ready_locked()
/// holds and returns Rx::result_locked(), both under the state's mutex. Rx
/// names the message for an await outside a task (Rx::outside_task) and
/// befriends this class.
template <class Rx, class State>
class receiver_awaiter : state_waiter<State> {
 public:
  explicit receiver_awaiter(Rx* rx) noexcept : rx_(rx) {}

  /// this_fiber::await may run await_suspend on the fiber's own stack:
  /// the task is woken only through detail::wake, never resumed here.
  using wakes_through_scheduler = void;
  bool await_ready() const {
    rx_->check_valid();
    return false;
  }
  bool await_suspend(std::coroutine_handle<> caller) {
    return this->suspend_unless(caller, rx_->state_.get(), Rx::outside_task,
                                [this] { return rx_->ready_locked(); });
  }
  decltype(auto) await_resume() noexcept(noexcept(std::declval<Rx&>().result_locked())) {
    std::lock_guard lock{this->resumed()};
    return rx_->result_locked();
  }

  /// The same wait for a thread outside the runtime (blocking_ calls).
  /// Throws std::system_error(operation_not_permitted) with `inside_task`
  /// inside a spindle task.
  static auto wait_as_thread(Rx& rx, char const* inside_task) {
    rx.check_valid();
    require_no_task(inside_task);
    return wait_as_thread_unless(
        *rx.state_, [&rx] { return rx.ready_locked(); }, [&rx] { return rx.result_locked(); });
  }

 private:
  Rx* rx_;
};

/// What the sending side of a state_waiter state shares (broadcast, watch):
/// the state, closing, and the snapshots.
template <class State>
class sender_base {
 public:
  sender_base(sender_base const&) = delete;
  sender_base& operator=(sender_base const&) = delete;

  /// Closes (idempotent) and wakes every waiting receiver.
  void close() noexcept {
    wake_batch wakes;
    std::lock_guard lock{state_->mutex};
    state_->closed = true;
    wakes.take_all(state_->waiters);
  }
  [[nodiscard]] bool is_closed() const noexcept {
    std::lock_guard lock{state_->mutex};
    return state_->closed;
  }
  /// Live receivers (a snapshot).
  [[nodiscard]] std::size_t receiver_count() const noexcept {
    std::lock_guard lock{state_->mutex};
    return state_->receivers;
  }

 protected:
  explicit sender_base(std::shared_ptr<State> s) noexcept : state_(std::move(s)) {}
  ~sender_base() = default;

  std::shared_ptr<State> state_;
};

}  // namespace spindle::detail
