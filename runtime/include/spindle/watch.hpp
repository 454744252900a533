// spindle::watch<T>: a single-value channel that keeps only the latest value.
//
// Shape: the watch<T> object is the sending side and holds the current value;
// it is shared by reference (or std::shared_ptr) by every sender and is
// neither copyable nor movable. subscribe() returns a receiver handle
// (copyable: a copy shares the channel and starts from the same seen
// version):
//
//   spindle::watch<config> w{initial};
//   auto rx = w.subscribe();          // the current value counts as seen
//   w.send(next);                     // replaces the value, never waits
//   if (co_await rx.changed()) use(rx.get());
//
// Every send bumps a version. A receiver remembers the last version it saw;
// changed() completes as soon as a newer version exists and marks it seen.
// Several sends between two changed() calls coalesce into one completion
// (the receiver only ever sees the latest value). get() returns a copy of the
// latest value and marks it seen; peek() returns it without marking.
//
// With g++ 12.2, bind the result of changed() to a local before testing it
// (`bool const changed = co_await rx.changed();`): docs/compilers.md.
//
// Closing: close(), or destroying the watch<T>, closes it. changed() then
// still reports a newer value the receiver has not seen (true), and after
// that returns false instead of waiting. Receivers may outlive the watch
// object; get() keeps returning the last value. send after close throws
// spindle::channel_closed. Dropping a receiver only unsubscribes it.
//
// Cancellation: a task aborted while waiting in changed() has marked nothing
// seen; receivers are independent, so nobody else misses a change.
//
// Errors: channel_closed as above; std::system_error with
// std::errc::invalid_argument on an empty (default-constructed or moved-from)
// receiver; std::system_error(operation_not_permitted) for co_await outside a
// spindle task or blocking_changed inside one. Exceptions of T's copy
// constructor propagate from get().
//
// Requirements: T is copy constructible (get returns copies).
// Thread-safety: any member from any task or thread; one receiver object is
// used by one task or thread at a time (copies in parallel). One std::mutex
// guards the value, the version and the waiters.
// Design source: Tokio's sync::watch (version counter, changed() marks seen,
// closed reported only when nothing newer is left).
#pragma once

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <system_error>
#include <type_traits>
#include <utility>

#include "spindle/detail/state_waiter.hpp"
#include "spindle/detail/task_header.hpp"
#include "spindle/detail/wait_list.hpp"
#include "spindle/errors.hpp"

namespace spindle {

namespace detail {

template <class T>
struct watch_state {
  static constexpr char const* empty_receiver = "spindle: empty watch receiver";

  template <class... A>
  explicit watch_state(A&&... a) : value(std::forward<A>(a)...) {}

  mutable std::mutex mutex;
  T value;
  std::uint64_t version = 0;
  std::size_t receivers = 0;
  bool closed = false;
  wait_list waiters;
};

}  // namespace detail

/// The sending side of a single-value channel that keeps only the latest
/// value (send() replaces it, never waits); receivers (subscribe()) await
/// changed() and read get(). Not copyable or movable; share it by reference.
/// Any thread. Full contract: the comment of spindle/watch.hpp.
template <class T>
class watch : public detail::sender_base<detail::watch_state<T>> {
  static_assert(std::is_copy_constructible_v<T>, "spindle::watch<T> needs a copyable T");
  using state_type = detail::watch_state<T>;

 public:
  using value_type = T;  ///< the type of the value watched

  /// A watch holding `initial` (version 0).
  explicit watch(T initial)
      : detail::sender_base<state_type>(std::make_shared<state_type>(std::move(initial))) {}
  watch(watch const&) = delete;
  watch& operator=(watch const&) = delete;
  /// Closes the watch.
  ~watch() { this->close(); }

  /// A subscriber's handle: remembers the last version it saw. Copyable (a
  /// copy starts from the same seen version). One task or thread at a time
  /// uses one receiver object.
  class receiver : public detail::receiver_base<state_type> {
   public:
    /// An empty handle (moved-from state).
    receiver() noexcept = default;
    /// Another receiver of the same watch, having seen what `other` saw.
    receiver(receiver const& other)
        : detail::receiver_base<state_type>(other.state_), seen_(other.seen_) {
      attach();
    }
    /// Takes over `other`'s place; `other` is left empty.
    receiver(receiver&& other) noexcept
        : detail::receiver_base<state_type>(std::move(other.state_)),
          seen_(std::exchange(other.seen_, 0)) {}
    /// Copy or move assignment (copy and swap).
    receiver& operator=(receiver other) noexcept {
      swap(other);
      return *this;
    }
    ~receiver() { detach(); }

    /// Exchanges the watches and seen versions of two receivers.
    void swap(receiver& other) noexcept {
      std::swap(state_, other.state_);
      std::swap(seen_, other.seen_);
    }

    /// Awaits a change: true when a newer value exists (now marked seen),
    /// false when the watch is closed and this receiver has seen its last
    /// value.
    using changed_awaiter = detail::receiver_awaiter<receiver, state_type>;

    /// Waits until a value newer than the last one this receiver saw exists
    /// (see changed_awaiter). The receiver must outlive the wait.
    [[nodiscard]] changed_awaiter changed() noexcept { return changed_awaiter{this}; }

    /// Blocks a thread outside the runtime like changed(). Throws
    /// std::system_error(operation_not_permitted) inside a spindle task.
    bool blocking_changed() {
      return changed_awaiter::wait_as_thread(
          *this, "spindle: watch blocking_changed inside a spindle task");
    }

    /// True when a value newer than the last seen one exists (no waiting).
    [[nodiscard]] bool has_changed() const {
      check_valid();
      std::lock_guard lock{state_->mutex};
      return state_->version != seen_;
    }

    /// A copy of the latest value; marks it seen.
    [[nodiscard]] T get() {
      check_valid();
      std::lock_guard lock{state_->mutex};
      T copy(state_->value);
      seen_ = state_->version;
      return copy;
    }
    /// A copy of the latest value, without marking it seen.
    [[nodiscard]] T peek() const {
      check_valid();
      std::lock_guard lock{state_->mutex};
      return state_->value;
    }

   private:
    friend class watch;
    friend class detail::receiver_awaiter<receiver, state_type>;
    using detail::receiver_base<state_type>::state_;
    using detail::receiver_base<state_type>::check_valid;
    static constexpr char const* outside_task =
        "spindle: watch changed() awaited outside a spindle task";

    receiver(std::shared_ptr<state_type> s, std::uint64_t seen) noexcept
        : detail::receiver_base<state_type>(std::move(s)), seen_(seen) {}

    // changed() completes at once: something newer, or closed.
    [[nodiscard]] bool ready_locked() const noexcept {
      return state_->version != seen_ || state_->closed;
    }
    // Marks the newest value seen: false when there is none (closed).
    bool result_locked() noexcept {
      if (state_->version == seen_) return false;
      seen_ = state_->version;
      return true;
    }
    void attach() noexcept {
      if (!state_) return;
      std::lock_guard lock{state_->mutex};
      ++state_->receivers;
    }
    void detach() noexcept {
      if (!state_) return;
      {
        std::lock_guard lock{state_->mutex};
        --state_->receivers;
      }
      state_.reset();
    }

    std::uint64_t seen_ = 0;
  };

  /// A receiver for which the current value counts as seen.
  [[nodiscard]] receiver subscribe() {
    std::lock_guard lock{state_->mutex};
    ++state_->receivers;
    return receiver{state_, state_->version};
  }

  /// Replaces the value and wakes every receiver waiting in changed(); never
  /// waits. Throws channel_closed after close().
  void send(T v) {
    modify([&](T& current) { current = std::move(v); });
  }

  /// Calls fn(T&) on the value under the lock, then notifies like send.
  /// Keep fn short; an exception from fn propagates and notifies nobody
  /// (changes it made stay, unversioned).
  template <class Fn>
  void modify(Fn&& fn) {
    detail::wake_batch wakes;
    std::lock_guard lock{state_->mutex};
    if (state_->closed) throw channel_closed{};
    std::forward<Fn>(fn)(state_->value);
    ++state_->version;
    wakes.take_all(state_->waiters);
  }

  /// A copy of the current value.
  [[nodiscard]] T get() const {
    std::lock_guard lock{state_->mutex};
    return state_->value;
  }

  // close() (idempotent: later sends throw channel_closed; receivers see
  // what is left, then the end), is_closed() and receiver_count() come from
  // detail::sender_base.

 private:
  using detail::sender_base<state_type>::state_;
};

}  // namespace spindle
