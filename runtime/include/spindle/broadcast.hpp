// spindle::broadcast<T>: a multi-producer, multi-consumer broadcast channel.
//
// Shape: the broadcast<T> object is the sending side, shared by reference (or
// std::shared_ptr) by every sender, like spindle::channel; it is neither
// copyable nor movable. subscribe() returns a move-only receiver handle:
//
//   spindle::broadcast<int> b{64};       // retains the 64 newest values
//   auto sub = b.subscribe();            // sees every value sent from now on
//   b.send(1);                           // never waits
//   std::optional<int> v = co_await sub.recv();   // 1
//
// Every receiver sees every value sent after it subscribed, in send order.
// The broadcast keeps the `capacity` newest values (counted in values);
// senders never wait. A receiver that falls more than `capacity` values
// behind loses the oldest ones: its next recv throws
// spindle::broadcast_lagged, whose missed() says how many it skipped, and the
// recv after that returns the oldest value still retained (Tokio's
// RecvError::Lagged as an exception: lagging is rare and must not pass
// unnoticed, while std::optional stays the shape of the ordinary end). A
// value is destroyed once every receiver that was subscribed when it was
// sent has read (or skipped) it, or when it is overwritten.
//
// Closing: close(), or destroying the broadcast<T>, closes it. Receivers
// first drain what they have not read, then recv yields std::nullopt. send
// after close throws spindle::channel_closed. Receivers may outlive the
// broadcast object (they share its state). Dropping a receiver only
// unsubscribes it.
//
// Cancellation: a task aborted while waiting in recv has consumed nothing;
// every receiver has its own position, so no other receiver is affected.
//
// Errors: channel_closed, broadcast_lagged as above;
// std::invalid_argument for capacity 0; std::system_error with
// std::errc::invalid_argument on an empty (moved-from) receiver;
// std::system_error(operation_not_permitted) for co_await outside a spindle
// task or blocking_recv inside one. An exception thrown by T's copy
// constructor propagates from recv with the value still unread.
//
// Requirements: T is copy constructible and nothrow move constructible.
// Thread-safety: send, close and subscribe from any task or thread; one
// receiver is used by one task or thread at a time (different receivers in
// parallel). One std::mutex guards the ring and the waiters.
// Design source: Tokio's sync::broadcast (ring of `capacity` slots with a
// per-slot remaining-readers count, Lagged(n) then resume at the oldest).
#pragma once

#include <concepts>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "spindle/detail/state_waiter.hpp"
#include "spindle/detail/task_header.hpp"
#include "spindle/detail/wait_list.hpp"
#include "spindle/errors.hpp"

namespace spindle {

namespace detail {

template <class T>
struct broadcast_state {
  struct slot {
    std::optional<T> value;
    std::uint64_t seq = 0;
    std::size_t remaining = 0;  ///< receivers that still have to read it
  };

  static constexpr char const* empty_receiver = "spindle: empty broadcast receiver";

  explicit broadcast_state(std::size_t cap) : slots(cap) {}

  [[nodiscard]] std::size_t capacity() const noexcept { return slots.size(); }
  [[nodiscard]] slot& at(std::uint64_t seq) noexcept { return slots[seq % slots.size()]; }
  /// Sequence number of the oldest value still retained.
  [[nodiscard]] std::uint64_t oldest() const noexcept {
    return tail > slots.size() ? tail - slots.size() : 0;
  }

  // A receiver gives up its unread values (dropped, or skipping).
  void release(std::uint64_t from) noexcept {
    for (std::uint64_t s = from < oldest() ? oldest() : from; s < tail; ++s) {
      slot& sl = at(s);
      if (sl.remaining != 0 && --sl.remaining == 0) sl.value.reset();
    }
  }

  mutable std::mutex mutex;
  std::vector<slot> slots;
  std::uint64_t tail = 0;  ///< sequence number of the next value
  std::size_t receivers = 0;
  bool closed = false;
  wait_list waiters;
};

}  // namespace detail

/// The sending side of a broadcast channel that keeps the `capacity` newest
/// values: every receiver (subscribe()) sees every value sent after it
/// subscribed, unless it falls more than `capacity` behind (broadcast_lagged).
/// Senders never wait. Not copyable or movable; share it by reference. Any
/// thread. Full contract: the comment of spindle/broadcast.hpp.
template <class T>
class broadcast : public detail::sender_base<detail::broadcast_state<T>> {
  static_assert(std::is_copy_constructible_v<T> && std::is_nothrow_move_constructible_v<T>,
                "spindle::broadcast<T> needs a copyable, nothrow move constructible T");
  using state_type = detail::broadcast_state<T>;

 public:
  using value_type = T;  ///< the type of the values sent

  /// A broadcast retaining the `capacity` newest values. Throws
  /// std::invalid_argument when capacity is 0.
  explicit broadcast(std::size_t capacity)
      : detail::sender_base<state_type>(make_state(capacity)) {}
  broadcast(broadcast const&) = delete;
  broadcast& operator=(broadcast const&) = delete;
  /// Closes the broadcast; receivers drain, then see the end.
  ~broadcast() { this->close(); }

  /// One subscriber's move-only handle: recv() yields the values sent after
  /// it subscribed, in send order. One task or thread at a time uses it.
  class receiver : public detail::receiver_base<state_type> {
   public:
    /// An empty handle (moved-from state).
    receiver() noexcept = default;
    /// Takes over `other`'s subscription; `other` is left empty.
    receiver(receiver&& other) noexcept
        : detail::receiver_base<state_type>(std::move(other.state_)),
          next_(std::exchange(other.next_, 0)) {}
    /// Unsubscribes this handle, then takes over `other`'s subscription.
    receiver& operator=(receiver&& other) noexcept {
      if (this != &other) {
        drop();
        state_ = std::move(other.state_);
        next_ = std::exchange(other.next_, 0);
      }
      return *this;
    }
    receiver(receiver const&) = delete;
    receiver& operator=(receiver const&) = delete;
    ~receiver() { drop(); }

    /// Awaits the next value: std::nullopt once closed and drained. Throws
    /// broadcast_lagged.
    using recv_awaiter = detail::receiver_awaiter<receiver, state_type>;

    /// Waits for the next value (see the file comment). The receiver must
    /// outlive the wait.
    [[nodiscard]] recv_awaiter recv() noexcept { return recv_awaiter{this}; }

    /// The next value without waiting: std::nullopt when there is none yet
    /// (or closed and drained; see is_closed()). Throws broadcast_lagged.
    [[nodiscard]] std::optional<T> try_recv() {
      check_valid();
      std::lock_guard lock{state_->mutex};
      if (!ready_locked()) return std::nullopt;
      return result_locked();
    }

    /// Blocks a thread outside the runtime until the next value; nullopt once
    /// closed and drained. Throws broadcast_lagged;
    /// std::system_error(operation_not_permitted) inside a spindle task.
    [[nodiscard]] std::optional<T> blocking_recv() {
      return recv_awaiter::wait_as_thread(*this,
                                          "spindle: broadcast blocking_recv inside a spindle task");
    }

    /// Values sent but not yet read by this receiver (lagged ones included).
    [[nodiscard]] std::uint64_t pending() const {
      check_valid();
      std::lock_guard lock{state_->mutex};
      return state_->tail - next_;
    }

   private:
    friend class broadcast;
    friend class detail::receiver_awaiter<receiver, state_type>;
    using detail::receiver_base<state_type>::state_;
    using detail::receiver_base<state_type>::check_valid;
    static constexpr char const* outside_task =
        "spindle: broadcast recv awaited outside a spindle task";

    receiver(std::shared_ptr<state_type> s, std::uint64_t next) noexcept
        : detail::receiver_base<state_type>(std::move(s)), next_(next) {}

    [[nodiscard]] bool ready_locked() const noexcept {
      return next_ < state_->tail || state_->closed;
    }

    // The next value. Precondition: ready_locked().
    std::optional<T> result_locked() {
      state_type& st = *state_;
      if (next_ == st.tail) return std::nullopt;  // closed and drained
      std::uint64_t oldest = st.oldest();
      if (next_ < oldest) {
        std::uint64_t missed = oldest - next_;
        next_ = oldest;
        throw broadcast_lagged{missed};
      }
      auto& sl = st.at(next_);
      std::optional<T> out;
      if (sl.remaining == 1) {
        out.emplace(std::move(*sl.value));  // the last reader takes it
        sl.value.reset();
        sl.remaining = 0;
      } else {
        out.emplace(*sl.value);  // may throw: nothing changed yet
        --sl.remaining;
      }
      ++next_;
      return out;
    }

    void drop() noexcept {
      if (!state_) return;
      {
        std::lock_guard lock{state_->mutex};
        state_->release(next_);
        --state_->receivers;
      }
      state_.reset();
    }

    std::uint64_t next_ = 0;
  };

  /// A receiver that sees every value sent from now on.
  [[nodiscard]] receiver subscribe() {
    std::lock_guard lock{state_->mutex};
    ++state_->receivers;
    return receiver{state_, state_->tail};
  }

  /// Sends a copy of `v` to every current receiver; never waits. Returns how
  /// many receivers will see it (0: nobody subscribed, the value is dropped).
  /// Throws channel_closed after close().
  std::size_t send(T const& v) { return send(T(v)); }
  /// Sends `v` (moved in, then copied to each receiver as it reads it); as
  /// send(T const&).
  std::size_t send(T&& v) {
    detail::wake_batch wakes;
    std::lock_guard lock{state_->mutex};
    state_type& st = *state_;
    if (st.closed) throw channel_closed{};
    if (st.receivers == 0) return 0;
    auto& sl = st.at(st.tail);
    sl.value.reset();  // overwritten: laggards skip it
    sl.value.emplace(std::move(v));
    sl.seq = st.tail;
    sl.remaining = st.receivers;
    ++st.tail;
    wakes.take_all(st.waiters);
    return st.receivers;
  }

  // close() (idempotent: later sends throw channel_closed; receivers see
  // what is left, then the end), is_closed() and receiver_count() come from
  // detail::sender_base.
  /// How many values are retained for laggards.
  [[nodiscard]] std::size_t capacity() const noexcept { return state_->capacity(); }

 private:
  static std::shared_ptr<state_type> make_state(std::size_t capacity) {
    if (capacity == 0)
      throw std::invalid_argument("spindle: broadcast capacity must be at least 1");
    return std::make_shared<state_type>(capacity);
  }

  using detail::sender_base<state_type>::state_;
};

}  // namespace spindle
