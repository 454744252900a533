// spindle::make_oneshot<T>(): a single-value channel between two handles.
//
// Shape: `auto [tx, rx] = spindle::make_oneshot<T>();` gives a move-only
// oneshot_sender<T> and a move-only oneshot_receiver<T> sharing one state
// block (one allocation per oneshot, from the frame pools). tx.send(v) stores the value and wakes
// the receiver; `T v = co_await rx;` waits for it. Each side is used once:
// send() consumes the sender, receiving the value consumes the receiver.
//
// Dropping: dropping the sender without sending closes the oneshot: the
// receiver's wait throws spindle::channel_closed. Dropping the receiver makes
// a later send return false (the value is dropped); tx.is_closed() tells in
// advance. The state lives until both handles are gone.
//
// Cancellation: a task aborted while waiting on the receiver leaves the value
// (if one arrives) in the state: the receiver object, if it outlives the
// task, still yields it, so nothing is lost.
//
// Errors: channel_closed as above. std::system_error with
// std::errc::invalid_argument when a handle is empty (moved from, or already
// used: send twice, receive twice). co_await outside a spindle task throws
// std::system_error(std::errc::operation_not_permitted), as does
// blocking_recv inside one. std::bad_alloc from make_oneshot.
//
// Requirements: T is nothrow move constructible.
// Thread-safety: the two handles may be used from different threads and
// tasks at once; one handle is used by one task or thread at a time.
// Design source: Tokio's sync::oneshot (sender consumed by send, RecvError on
// a dropped sender, is_closed), with the wait node inside the awaiter.
#pragma once

#include <coroutine>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>
#include <type_traits>
#include <utility>

#include "spindle/detail/frame_pool.hpp"
#include "spindle/detail/task_header.hpp"
#include "spindle/detail/wait_list.hpp"
#include "spindle/errors.hpp"

namespace spindle {

template <class T>
class oneshot_sender;
template <class T>
class oneshot_receiver;

namespace detail {

template <class T>
struct oneshot_state {
  std::mutex mutex;
  std::optional<T> value;
  bool sender_done = false;     ///< sent, or the sender was dropped
  bool receiver_gone = false;   ///< the receiver was dropped or took the value
  wait_node* waiter = nullptr;  ///< the receiver's waiting task or thread

  // Wakes the receiver's waiter, if any. Caller holds the lock; the returned
  // node is notified after the unlock.
  wait_node* take_waiter() noexcept {
    wait_node* w = waiter;
    waiter = nullptr;
    if (w != nullptr) w->linked = false;
    return w;
  }
};

inline void throw_empty_handle(char const* what) {
  throw std::system_error(std::make_error_code(std::errc::invalid_argument), what);
}

}  // namespace detail

/// The sending half of a oneshot. Move-only.
template <class T>
class oneshot_sender {
  static_assert(std::is_nothrow_move_constructible_v<T>,
                "spindle::oneshot needs a nothrow move constructible T");

 public:
  oneshot_sender() noexcept = default;
  /// Takes over `other`'s oneshot; `other` is left empty.
  oneshot_sender(oneshot_sender&&) noexcept = default;
  /// Drops this sender (closing its oneshot if it did not send), then takes
  /// over `other`'s.
  oneshot_sender& operator=(oneshot_sender&& other) noexcept {
    if (this != &other) {
      drop();
      state_ = std::move(other.state_);
    }
    return *this;
  }
  ~oneshot_sender() { drop(); }

  /// Sends the value and gives up the sender (it becomes empty). Returns
  /// false when the receiver is gone (the value is dropped). Throws
  /// std::system_error(invalid_argument) on an empty sender.
  bool send(T v) {
    if (!state_) detail::throw_empty_handle("spindle: send on an empty oneshot_sender");
    auto state = std::move(state_);
    detail::wait_node* w = nullptr;
    {
      std::lock_guard lock{state->mutex};
      state->sender_done = true;
      if (state->receiver_gone) return false;
      state->value.emplace(std::move(v));
      w = state->take_waiter();
    }
    if (w != nullptr) w->notify();
    return true;
  }

  /// True when the receiver is gone, or the sender is empty.
  [[nodiscard]] bool is_closed() const noexcept {
    if (!state_) return true;
    std::lock_guard lock{state_->mutex};
    return state_->receiver_gone;
  }

  /// True while the sender can still send.
  [[nodiscard]] bool valid() const noexcept { return state_ != nullptr; }

 private:
  template <class U>
  friend std::pair<oneshot_sender<U>, oneshot_receiver<U>> make_oneshot();
  explicit oneshot_sender(std::shared_ptr<detail::oneshot_state<T>> s) noexcept
      : state_(std::move(s)) {}

  void drop() noexcept {
    if (!state_) return;
    auto state = std::move(state_);
    detail::wait_node* w = nullptr;
    {
      std::lock_guard lock{state->mutex};
      state->sender_done = true;
      w = state->take_waiter();
    }
    if (w != nullptr) w->notify();
  }

  std::shared_ptr<detail::oneshot_state<T>> state_;
};

/// The receiving half of a oneshot. Move-only.
template <class T>
class oneshot_receiver {
 public:
  oneshot_receiver() noexcept = default;
  /// Takes over `other`'s oneshot; `other` is left empty.
  oneshot_receiver(oneshot_receiver&&) noexcept = default;
  /// Drops this receiver (a later send of its oneshot returns false), then
  /// takes over `other`'s.
  oneshot_receiver& operator=(oneshot_receiver&& other) noexcept {
    if (this != &other) {
      drop();
      state_ = std::move(other.state_);
    }
    return *this;
  }
  ~oneshot_receiver() { drop(); }

  /// The awaiter of `co_await rx`: yields the value once it is sent.
  class [[nodiscard]] awaiter : detail::wait_node, detail::cancel_hook {
   public:
    /// An awaiter of `*rx`.
    explicit awaiter(oneshot_receiver* rx) noexcept : rx_(rx) {}
    awaiter(awaiter const&) = delete;
    awaiter& operator=(awaiter const&) = delete;
    ~awaiter() {
      if (suspended_) {
        // Destroyed without being resumed (abort, shutdown): withdraw. A
        // value sent meanwhile stays in the state for the receiver.
        std::lock_guard lock{state_->mutex};
        if (state_->waiter == this) state_->waiter = nullptr;
      }
    }

    /// this_fiber::await may run await_suspend on the fiber's own stack:
    /// the task is woken only through detail::wake, never resumed here.
    using wakes_through_scheduler = void;
    /// Awaiter protocol: always suspends. Throws
    /// std::system_error(std::errc::invalid_argument) on an empty or already
    /// used receiver.
    bool await_ready() const {
      rx_->check_valid();
      return false;
    }
    /// Awaiter protocol: completes at once when the value is there (or the
    /// sender is gone), else waits. Throws
    /// std::system_error(std::errc::operation_not_permitted) outside a
    /// spindle task.
    bool await_suspend(std::coroutine_handle<> caller) {
      detail::task_header* self = detail::suspend_current(caller, wait_kind::oneshot);
      detail::require_task(self, "spindle: oneshot_receiver awaited outside a spindle task");
      state_ = rx_->state_.get();
      std::lock_guard lock{state_->mutex};
      if (state_->value || state_->sender_done) {
        detail::clear_cancel_hook(self);
        return false;
      }
      this->task = self;
      this->linked = true;
      state_->waiter = this;
      suspended_ = true;
      detail::set_cancel_hook(self, this, &awaiter::on_cancel);
      return true;
    }
    /// Awaiter protocol: the value (consuming the receiver); throws
    /// channel_closed if the sender was dropped without sending.
    T await_resume() {
      suspended_ = false;
      return rx_->take_ready();
    }

   private:
    static bool on_cancel(detail::cancel_hook* hook) noexcept {
      auto* self = static_cast<awaiter*>(hook);
      std::lock_guard lock{self->state_->mutex};
      if (self->state_->waiter != self) return false;  // a wake is on its way
      self->state_->waiter = nullptr;
      self->linked = false;
      return true;
    }

    oneshot_receiver* rx_;
    detail::oneshot_state<T>* state_ = nullptr;
    bool suspended_ = false;
  };

  /// Waits for the value. Throws channel_closed if the sender was dropped
  /// without sending; std::system_error(invalid_argument) on an empty or
  /// already used receiver. The receiver must outlive the wait.
  awaiter operator co_await() & noexcept { return awaiter{this}; }
  /// Waits for the value, as `co_await rx` on an lvalue.
  awaiter operator co_await() && noexcept { return awaiter{this}; }

  /// The value if it was sent (consuming the receiver), std::nullopt if not
  /// yet; throws channel_closed if the sender was dropped without sending.
  [[nodiscard]] std::optional<T> try_recv() {
    check_valid();
    {
      std::lock_guard lock{state_->mutex};
      if (!state_->value && !state_->sender_done) return std::nullopt;
    }
    return take_ready();
  }

  /// Blocks a thread outside the runtime until the value arrives. Throws as
  /// co_await does; std::system_error(operation_not_permitted) inside a
  /// spindle task.
  T blocking_recv() {
    check_valid();
    detail::require_no_task("spindle: oneshot_receiver::blocking_recv inside a spindle task");
    detail::wait_node node;
    bool ready = false;
    {
      std::lock_guard lock{state_->mutex};
      ready = state_->value || state_->sender_done;
      if (!ready) {
        node.linked = true;
        state_->waiter = &node;
      }
    }
    if (!ready) node.wait_as_thread();
    return take_ready();
  }

  /// True while the value has not been received and the receiver is not
  /// empty.
  [[nodiscard]] bool valid() const noexcept { return state_ != nullptr; }

 private:
  template <class U>
  friend std::pair<oneshot_sender<U>, oneshot_receiver<U>> make_oneshot();
  explicit oneshot_receiver(std::shared_ptr<detail::oneshot_state<T>> s) noexcept
      : state_(std::move(s)) {}

  void check_valid() const {
    if (!state_) detail::throw_empty_handle("spindle: empty or already received oneshot_receiver");
  }

  // The sender has sent or is gone: take the value (consuming the receiver)
  // or throw channel_closed.
  T take_ready() {
    std::optional<T> v;
    {
      std::lock_guard lock{state_->mutex};
      if (state_->value) {
        v.emplace(std::move(*state_->value));
        state_->value.reset();
        state_->receiver_gone = true;
      }
    }
    if (!v) throw channel_closed{};
    state_.reset();
    return std::move(*v);
  }

  void drop() noexcept {
    if (!state_) return;
    std::lock_guard lock{state_->mutex};
    state_->receiver_gone = true;
    state_->value.reset();
    state_->waiter = nullptr;
  }

  std::shared_ptr<detail::oneshot_state<T>> state_;
};

/// Creates a connected oneshot sender/receiver pair.
template <class T>
[[nodiscard]] std::pair<oneshot_sender<T>, oneshot_receiver<T>> make_oneshot() {
  // The state block comes from the frame pools (no malloc in steady state);
  // the receiver takes the creating reference (one count update fewer).
  auto state = std::allocate_shared<detail::oneshot_state<T>>(
      detail::pool_allocator<detail::oneshot_state<T>>{});
  return {oneshot_sender<T>{state}, oneshot_receiver<T>{std::move(state)}};
}

}  // namespace spindle
