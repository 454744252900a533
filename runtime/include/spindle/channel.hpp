// spindle::channel<T>: a multi-producer multi-consumer FIFO channel.
//
// Shape: one object, shared by reference (or through std::shared_ptr) by
// every sending and receiving task and thread, like std::mutex. There are no
// sender/receiver handles and nothing closes implicitly: close() is explicit
// (the Go/cppcoro shape; the Tokio handle shape is what oneshot, broadcast
// and watch offer). The object is neither copyable nor movable.
//
//   spindle::channel<int> ch{16};                  // bounded: 16 buffered values
//   auto ub = spindle::channel<int>::unbounded();  // never applies back-pressure
//   co_await ch.send(1);                           // suspends while the buffer is full
//   std::optional<int> v = co_await ch.recv();     // nullopt once closed and drained
//
// Capacity is counted in values. A bounded send suspends while `capacity`
// values are buffered (back-pressure); capacity 0 is a rendezvous channel (a
// send completes only when a receiver takes the value). A value sent while a
// receiver waits is handed to that receiver directly. Values are received in
// FIFO order of completed sends (so per sender, in the order it sent them);
// waiting senders and receivers are served first come, first served.
//
// Closing: close() makes every later send fail (co_await send throws
// spindle::channel_closed, try_send returns false, blocking_send throws) and
// wakes every waiting sender with channel_closed; their values are dropped.
// Receivers first drain what is buffered, then get std::nullopt (a value
// handed to a receiving task that is then aborted counts as buffered until
// it has come back: the end is reported only after it). Closing twice is
// harmless.
//
// Cancellation: a task waiting in send or recv may be aborted
// (join_handle::abort) or destroyed by runtime shutdown. A waiting sender
// that is withdrawn sent nothing; one whose value was already taken has sent
// it (the value is in the channel). A value already handed to an aborted
// receiver goes to the next waiting receiver, or else back to the front of
// the buffer (possibly over the capacity for a moment), so no value is lost,
// duplicated or reordered past values that were buffered after it.
//
// Errors: spindle::channel_closed as above. co_await send/recv outside a
// spindle task throws std::system_error(std::errc::operation_not_permitted);
// blocking_send/blocking_recv inside a spindle task throw the same (they
// would block a worker thread; use co_await there). std::bad_alloc when the
// buffer cannot grow (an unbounded channel grows as needed; a bounded one up
// to `capacity`); a send that throws has not sent its value. (Giving a value
// back from an aborted receiver may grow the buffer past `capacity`; if that
// allocation fails the process terminates, as it happens in a destructor.)
//
// Requirements: T is nothrow move constructible (values move under the lock);
// try_send(T const&) and the copying send need a copyable T.
//
// Allocation: waits are intrusive (the wait node lives in the awaiter, or on
// the stack of a blocked thread); only the ring buffer allocates, when it
// grows. A bounded channel stops allocating once it has held `capacity`
// values.
//
// Thread-safety: every member function may be called from any task or thread
// at once, except the destructor: no task or thread may wait on the channel
// when it is destroyed. One lock (std::mutex) guards the buffer and the wait
// lists; wakes are issued after it is released.
//
// Handles: make_channel<T>(capacity) returns {sender<T>, receiver<T>} over
// one channel<T> they share (std::shared_ptr), with Tokio mpsc's implicit
// closing: senders are copyable and the channel closes for the receiver when
// the last sender is destroyed (the receiver drains what is buffered, then
// gets std::nullopt); the receiver is move-only and its destruction closes
// the channel for the senders (sends throw channel_closed; buffered values
// are destroyed with the last handle). capacity 0 means unbounded here, as
// Tokio's unbounded_channel (channel<T>{0} is a rendezvous channel). A
// sender passed to a coroutine lives in its frame, which a spawned task
// keeps until its join handle is destroyed (a detached task: until it
// finishes): drop the handles of finished producers to end the receiver.
//
// Design source: Tokio's mpsc (bounded back-pressure, close/drain
// semantics), Go's hchan (direct hand-off to a waiting receiver, rendezvous
// at capacity 0), cppcoro's awaiter-as-wait-node.
#pragma once

#include <atomic>
#include <concepts>
#include <coroutine>
#include <cstddef>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <system_error>
#include <type_traits>
#include <utility>

#include "spindle/detail/ring_buffer.hpp"
#include "spindle/detail/task_header.hpp"
#include "spindle/detail/wait_list.hpp"
#include "spindle/errors.hpp"

namespace spindle {

namespace detail {

/// How a wait ended. Written by the waker under the primitive's lock.
enum class channel_wait_status : unsigned char { waiting, done, closed };

}  // namespace detail

/// A multi-producer multi-consumer FIFO channel of `capacity` values (0:
/// rendezvous; unbounded()). One object shared by reference, closed
/// explicitly with close(); make_channel() gives Tokio-style handles over one
/// instead. Any task or thread; the full contract (closing, cancellation,
/// errors) is the comment of spindle/channel.hpp.
template <class T>
class channel {
  static_assert(std::is_nothrow_move_constructible_v<T>,
                "spindle::channel<T> needs a nothrow move constructible T");
  static_assert(!std::is_reference_v<T> && !std::is_const_v<T>,
                "spindle::channel<T> holds values: use a non-const object type");

  // A waiting sender: its value stays in the waiter until a receiver (or the
  // buffer) takes it.
  struct send_node : detail::wait_node {
    T* value = nullptr;
    detail::channel_wait_status status = detail::channel_wait_status::waiting;
  };
  // A waiting receiver: a sender hands it a value directly.
  struct recv_node : detail::wait_node {
    std::optional<T> slot;
    detail::channel_wait_status status = detail::channel_wait_status::waiting;
  };

 public:
  using value_type = T;  ///< the type of the values sent
  /// The capacity of an unbounded channel.
  static constexpr std::size_t unbounded_capacity = std::numeric_limits<std::size_t>::max();

  /// A channel that buffers up to `capacity` values (0: rendezvous;
  /// unbounded_capacity: no limit).
  explicit channel(std::size_t capacity) : capacity_(capacity) {
    buffer_.reserve(capacity < initial_reserve ? capacity : initial_reserve);
  }
  /// A channel without back-pressure: sends never wait.
  [[nodiscard]] static channel unbounded() { return channel{unbounded_capacity}; }

  channel(channel const&) = delete;
  channel& operator=(channel const&) = delete;
  /// Destroys the buffered values. Precondition: nobody waits on the channel.
  ~channel() = default;

  // ----------------------------------------------------------------- send

  /// The awaiter of send(): completes when the value is buffered or handed
  /// to a receiver; throws channel_closed when the channel is closed first.
  class [[nodiscard]] send_awaiter : send_node, detail::cancel_hook {
   public:
    /// An awaiter that sends `v` (moved in) on `ch` when awaited.
    send_awaiter(channel& ch, T&& v) noexcept : ch_(&ch), value_(std::move(v)) {
      this->value = &value_;
    }
    send_awaiter(send_awaiter const&) = delete;
    send_awaiter& operator=(send_awaiter const&) = delete;
    ~send_awaiter() {
      if (suspended_) ch_->abandon_send(this);
    }

    /// this_fiber::await may run await_suspend on the fiber's own stack:
    /// the task is woken only through detail::wake, never resumed here.
    using wakes_through_scheduler = void;
    /// Awaiter protocol: always suspends (the attempt is made under the lock).
    bool await_ready() const noexcept { return false; }
    /// Awaiter protocol: sends at once if there is room or a waiting
    /// receiver, else queues the calling task (std::errc::operation_not_permitted outside one).
    bool await_suspend(std::coroutine_handle<> caller) {
      detail::task_header* self = detail::suspend_current(caller, wait_kind::channel);
      detail::require_task(self, "spindle: channel send awaited outside a spindle task");
      detail::wake_batch wakes;
      std::lock_guard lock{ch_->mutex_};
      if (ch_->closed_) {
        this->status = detail::channel_wait_status::closed;
      } else if (ch_->try_send_locked(value_, wakes)) {
        this->status = detail::channel_wait_status::done;
      } else {
        this->task = self;
        ch_->senders_.push_back(this);
        suspended_ = true;
        detail::set_cancel_hook(self, this, &send_awaiter::on_cancel);
        return true;
      }
      detail::clear_cancel_hook(self);
      return false;
    }
    /// Awaiter protocol: throws channel_closed if the value was not sent.
    void await_resume() {
      suspended_ = false;
      if (this->status == detail::channel_wait_status::closed) throw channel_closed{};
    }

   private:
    static bool on_cancel(detail::cancel_hook* hook) noexcept {
      auto* self = static_cast<send_awaiter*>(hook);
      std::lock_guard lock{self->ch_->mutex_};
      return self->ch_->senders_.remove(self);
    }

    channel* ch_;
    T value_;
    bool suspended_ = false;
  };

  /// Sends `v`, suspending while the channel is full. Throws channel_closed
  /// (the value is dropped) if the channel is or gets closed first.
  [[nodiscard]] send_awaiter send(T v) noexcept(std::is_nothrow_move_constructible_v<T>) {
    return send_awaiter{*this, std::move(v)};
  }

  /// Sends without waiting. Returns false, leaving `v` untouched, when the
  /// channel is full or closed.
  [[nodiscard]] bool try_send(T&& v) {
    detail::wake_batch wakes;
    std::lock_guard lock{mutex_};
    return !closed_ && try_send_locked(v, wakes);
  }
  /// Sends a copy of `v` without waiting; false when full or closed.
  [[nodiscard]] bool try_send(T const& v) requires std::copy_constructible<T> {
    detail::wake_batch wakes;
    std::lock_guard lock{mutex_};
    if (closed_ || !has_room_locked()) return false;
    T copy(v);
    return try_send_locked(copy, wakes);
  }

  /// Sends from a thread outside the runtime, blocking it while the channel
  /// is full. Throws channel_closed (the value is dropped) if the channel is
  /// or gets closed first; std::system_error(operation_not_permitted) when
  /// called inside a spindle task.
  void blocking_send(T v) {
    detail::require_no_task("spindle: channel::blocking_send inside a spindle task");
    send_node node;
    {
      detail::wake_batch wakes;
      std::lock_guard lock{mutex_};
      if (closed_) throw channel_closed{};
      if (try_send_locked(v, wakes)) return;
      node.value = &v;
      senders_.push_back(&node);
    }
    node.wait_as_thread();
    if (node.status == detail::channel_wait_status::closed) throw channel_closed{};
  }

  // ----------------------------------------------------------------- recv

  /// The awaiter of recv(): yields the next value, or std::nullopt once the
  /// channel is closed and drained.
  class [[nodiscard]] recv_awaiter : recv_node, detail::cancel_hook {
   public:
    /// An awaiter that receives from `ch` when awaited.
    explicit recv_awaiter(channel& ch) noexcept : ch_(&ch) {}
    recv_awaiter(recv_awaiter const&) = delete;
    recv_awaiter& operator=(recv_awaiter const&) = delete;
    ~recv_awaiter() {
      if (suspended_) ch_->abandon_recv(this);
    }

    /// this_fiber::await may run await_suspend on the fiber's own stack:
    /// the task is woken only through detail::wake, never resumed here.
    using wakes_through_scheduler = void;
    /// Awaiter protocol: always suspends (the attempt is made under the lock).
    bool await_ready() const noexcept { return false; }
    /// Awaiter protocol: takes a value at once if one is buffered (or the
    /// channel is closed and drained), else queues the calling task
    /// (std::errc::operation_not_permitted outside one).
    bool await_suspend(std::coroutine_handle<> caller) {
      detail::task_header* self = detail::suspend_current(caller, wait_kind::channel);
      detail::require_task(self, "spindle: channel recv awaited outside a spindle task");
      detail::wake_batch wakes;
      std::lock_guard lock{ch_->mutex_};
      if (!ch_->try_recv_locked(this->slot, wakes) && !ch_->drained_locked()) {
        this->task = self;
        ch_->receivers_.push_back(this);
        suspended_ = true;
        detail::set_cancel_hook(self, this, &recv_awaiter::on_cancel);
        return true;
      }
      detail::clear_cancel_hook(self);
      return false;
    }
    /// The value, or std::nullopt when the channel is closed and drained.
    std::optional<T> await_resume() noexcept {
      if (std::exchange(suspended_, false) && this->slot) ch_->confirm_handed();
      return std::move(this->slot);
    }

   private:
    static bool on_cancel(detail::cancel_hook* hook) noexcept {
      auto* self = static_cast<recv_awaiter*>(hook);
      std::lock_guard lock{self->ch_->mutex_};
      return self->ch_->receivers_.remove(self);
    }

    channel* ch_;
    bool suspended_ = false;
  };

  /// Receives the oldest value, suspending while the channel is empty;
  /// std::nullopt once the channel is closed and drained.
  [[nodiscard]] recv_awaiter recv() noexcept { return recv_awaiter{*this}; }

  /// Receives without waiting: std::nullopt when empty (or closed and
  /// drained; see is_closed()).
  [[nodiscard]] std::optional<T> try_recv() {
    std::optional<T> out;
    detail::wake_batch wakes;
    std::lock_guard lock{mutex_};
    try_recv_locked(out, wakes);
    return out;
  }

  /// Receives from a thread outside the runtime, blocking it while the
  /// channel is empty; std::nullopt once closed and drained. Throws
  /// std::system_error(operation_not_permitted) inside a spindle task.
  [[nodiscard]] std::optional<T> blocking_recv() {
    detail::require_no_task("spindle: channel::blocking_recv inside a spindle task");
    recv_node node;
    {
      detail::wake_batch wakes;
      std::lock_guard lock{mutex_};
      if (try_recv_locked(node.slot, wakes) || drained_locked()) return std::move(node.slot);
      receivers_.push_back(&node);
    }
    node.wait_as_thread();
    return std::move(node.slot);
  }

  // ---------------------------------------------------------------- state

  /// Closes the channel (see the file comment). Idempotent.
  void close() noexcept {
    detail::wake_batch wakes;
    std::lock_guard lock{mutex_};
    if (closed_) return;
    closed_ = true;
    // Receivers wait only while the buffer is empty: they see the end, unless
    // a value handed to a receiver may still come back.
    end_receivers_if_drained(wakes);
    while (detail::wait_node* n = senders_.pop_front()) {
      static_cast<send_node*>(n)->status = detail::channel_wait_status::closed;
      wakes.push(n);
    }
  }

  /// True once close() was called (a snapshot).
  [[nodiscard]] bool is_closed() const noexcept {
    std::lock_guard lock{mutex_};
    return closed_;
  }
  /// Number of buffered values (a snapshot).
  [[nodiscard]] std::size_t size() const noexcept {
    std::lock_guard lock{mutex_};
    return buffer_.size();
  }
  /// The capacity given at construction (unbounded_capacity when unbounded).
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

  /// Tasks and threads waiting to send / receive (a snapshot, for tests and
  /// diagnostics).
  [[nodiscard]] std::size_t waiting_senders() const noexcept {
    std::lock_guard lock{mutex_};
    return senders_.size();
  }
  /// Tasks and threads waiting to receive (a snapshot).
  [[nodiscard]] std::size_t waiting_receivers() const noexcept {
    std::lock_guard lock{mutex_};
    return receivers_.size();
  }

 private:
  static constexpr std::size_t initial_reserve = 16;

  [[nodiscard]] bool has_room_locked() const noexcept {
    return !receivers_.empty() || buffer_.size() < capacity_;
  }

  // Closed, empty, and no value handed to a task that may still give it
  // back: receivers see the end. Caller holds the lock.
  [[nodiscard]] bool drained_locked() const noexcept {
    return closed_ && buffer_.empty() && in_flight_ == 0;
  }

  // Wakes every waiting receiver with the end once drained_locked().
  void end_receivers_if_drained(detail::wake_batch& wakes) noexcept {
    if (!drained_locked()) return;
    while (detail::wait_node* n = receivers_.pop_front()) {
      static_cast<recv_node*>(n)->status = detail::channel_wait_status::closed;
      wakes.push(n);
    }
  }

  // Hands `v` to the first waiting receiver. Caller holds the lock.
  void hand_to_receiver(detail::wait_node* n, T&& v, detail::wake_batch& wakes) noexcept {
    auto* r = static_cast<recv_node*>(n);
    r->slot.emplace(std::move(v));
    r->status = detail::channel_wait_status::done;
    // A task may be aborted before it resumes and give the value back.
    if (r->task != nullptr) ++in_flight_;
    wakes.push(r);
  }

  // A receiving task resumed with a handed value: it can no longer give it
  // back.
  void confirm_handed() noexcept {
    detail::wake_batch wakes;
    std::lock_guard lock{mutex_};
    --in_flight_;
    end_receivers_if_drained(wakes);
  }

  // Hands `v` to a waiting receiver or buffers it. Moves from `v` only when
  // it returns true. Caller holds the lock and checked closed_.
  bool try_send_locked(T& v, detail::wake_batch& wakes) {
    if (detail::wait_node* n = receivers_.pop_front()) {
      hand_to_receiver(n, std::move(v), wakes);
      return true;
    }
    if (buffer_.size() < capacity_) {
      buffer_.push_back(std::move(v));
      return true;
    }
    return false;
  }

  // Takes the oldest value into `out` (buffer first, then a waiting
  // sender's), admitting one waiting sender into the freed slot. Caller holds
  // the lock.
  bool try_recv_locked(std::optional<T>& out, detail::wake_batch& wakes) noexcept {
    if (!buffer_.empty()) {
      out.emplace(buffer_.pop_front());
      // A slot was freed: the ring has room, push_back cannot allocate.
      if (!senders_.empty() && buffer_.size() < capacity_) {
        auto* s = static_cast<send_node*>(senders_.pop_front());
        buffer_.push_back(std::move(*s->value));
        s->status = detail::channel_wait_status::done;
        wakes.push(s);
      }
      return true;
    }
    if (detail::wait_node* n = senders_.pop_front()) {  // rendezvous
      auto* s = static_cast<send_node*>(n);
      out.emplace(std::move(*s->value));
      s->status = detail::channel_wait_status::done;
      wakes.push(s);
      return true;
    }
    return false;
  }

  // A send awaiter is destroyed after suspending without being resumed: the
  // task was aborted, or its frame destroyed at shutdown.
  void abandon_send(send_node* node) noexcept {
    std::lock_guard lock{mutex_};
    senders_.remove(node);  // still linked only at shutdown
  }

  // A recv awaiter is destroyed after suspending without being resumed. A
  // value already handed to it goes to the next waiting receiver or back to
  // the front of the buffer.
  void abandon_recv(recv_node* node) noexcept {
    detail::wake_batch wakes;
    std::lock_guard lock{mutex_};
    if (receivers_.remove(node)) return;
    if (node->status != detail::channel_wait_status::done || !node->slot) return;
    --in_flight_;
    if (detail::wait_node* n = receivers_.pop_front()) {
      hand_to_receiver(n, std::move(*node->slot), wakes);
    } else {
      buffer_.push_front(std::move(*node->slot));  // std::bad_alloc here terminates
    }
    node->slot.reset();
  }

  mutable std::mutex mutex_;
  detail::ring_buffer<T> buffer_;
  detail::wait_list senders_;
  detail::wait_list receivers_;
  std::size_t const capacity_;
  std::size_t in_flight_ = 0;  ///< values handed to tasks that have not resumed yet
  bool closed_ = false;
};

// ------------------------------------------------------------ handles

namespace detail {
/// What a sender/receiver pair shares: the channel and the sender count.
template <class T>
struct channel_handles_state {
  explicit channel_handles_state(std::size_t capacity)
      : ch(capacity == 0 ? channel<T>::unbounded_capacity : capacity) {}
  channel<T> ch;
  std::atomic<std::size_t> senders{1};
};
}  // namespace detail

template <class T>
class sender;
template <class T>
class receiver;
template <class T>
[[nodiscard]] std::pair<sender<T>, receiver<T>> make_channel(std::size_t capacity);

/// The sending handle of make_channel: copyable; the last copy destroyed
/// closes the channel for the receiver. Any thread.
template <class T>
class sender {
 public:
  /// An empty handle (moved-from state); using it is undefined.
  sender() noexcept = default;
  /// Another sender of the same channel (the channel stays open for the
  /// receiver while any sender is left).
  sender(sender const& other) noexcept : state_(other.state_) {
    if (state_) state_->senders.fetch_add(1, std::memory_order_relaxed);
  }
  /// Takes over `other`'s place; `other` is left empty.
  sender(sender&& other) noexcept = default;
  /// Drops this sender (possibly the last: the channel closes for the
  /// receiver), then becomes another sender of `other`'s channel.
  sender& operator=(sender const& other) noexcept {
    if (this != &other) {
      release();
      state_ = other.state_;
      if (state_) state_->senders.fetch_add(1, std::memory_order_relaxed);
    }
    return *this;
  }
  /// Drops this sender, then takes over `other`'s place.
  sender& operator=(sender&& other) noexcept {
    if (this != &other) {
      release();
      state_ = std::move(other.state_);
    }
    return *this;
  }
  ~sender() { release(); }

  /// `co_await tx.send(v)`: as channel<T>::send; throws channel_closed once
  /// the receiver is gone.
  [[nodiscard]] auto send(T v) noexcept(std::is_nothrow_move_constructible_v<T>) {
    return state_->ch.send(std::move(v));
  }
  /// Sends `v` if that needs no wait (room in the buffer or a waiting
  /// receiver); false, with `v` not sent, otherwise, also once the receiver
  /// is gone (the channel is closed).
  [[nodiscard]] bool try_send(T&& v) { return state_->ch.try_send(std::move(v)); }
  /// try_send of a copy of `v`.
  [[nodiscard]] bool try_send(T const& v) requires std::copy_constructible<T> {
    return state_->ch.try_send(v);
  }
  /// For plain threads (see channel<T>::blocking_send).
  void blocking_send(T v) { state_->ch.blocking_send(std::move(v)); }
  /// True once the receiver is gone (sends fail).
  [[nodiscard]] bool is_closed() const noexcept { return state_->ch.is_closed(); }

 private:
  friend std::pair<sender<T>, receiver<T>> make_channel<T>(std::size_t capacity);
  explicit sender(std::shared_ptr<detail::channel_handles_state<T>> state) noexcept
      : state_(std::move(state)) {}
  void release() noexcept {
    if (state_ && state_->senders.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      state_->ch.close();  // the last sender: the receiver drains, then sees the end
    }
    state_.reset();
  }

  std::shared_ptr<detail::channel_handles_state<T>> state_;
};

/// The receiving handle of make_channel: move-only; its destruction closes
/// the channel for the senders. Any thread.
template <class T>
class receiver {
 public:
  receiver() noexcept = default;
  /// Takes over `other`'s place; `other` is left empty.
  receiver(receiver&&) noexcept = default;
  /// Drops this receiver (senders then see the channel closed), then takes
  /// over `other`'s place.
  receiver& operator=(receiver&& other) noexcept {
    if (this != &other) {
      release();
      state_ = std::move(other.state_);
    }
    return *this;
  }
  receiver(receiver const&) = delete;
  receiver& operator=(receiver const&) = delete;
  ~receiver() { release(); }

  /// `co_await rx.recv()` yields the next value, or std::nullopt once every
  /// sender is gone and the buffer is drained.
  [[nodiscard]] auto recv() noexcept { return state_->ch.recv(); }
  /// A value if one can be taken without waiting; std::nullopt when there
  /// is none or the channel has ended.
  [[nodiscard]] std::optional<T> try_recv() { return state_->ch.try_recv(); }
  /// For plain threads (see channel<T>::blocking_recv).
  [[nodiscard]] std::optional<T> blocking_recv() { return state_->ch.blocking_recv(); }
  /// Closes the channel early (senders fail from now on; what is buffered
  /// can still be received).
  void close() noexcept { state_->ch.close(); }

 private:
  friend std::pair<sender<T>, receiver<T>> make_channel<T>(std::size_t capacity);
  explicit receiver(std::shared_ptr<detail::channel_handles_state<T>> state) noexcept
      : state_(std::move(state)) {}
  void release() noexcept {
    if (state_) state_->ch.close();
    state_.reset();
  }

  std::shared_ptr<detail::channel_handles_state<T>> state_;
};

/// A channel with Tokio mpsc handles: `auto [tx, rx] = make_channel<int>(16);`
/// `capacity` values are buffered (0: unbounded). Throws std::bad_alloc.
template <class T>
std::pair<sender<T>, receiver<T>> make_channel(std::size_t capacity) {
  auto state = std::make_shared<detail::channel_handles_state<T>>(capacity);
  return {sender<T>{state}, receiver<T>{std::move(state)}};
}

}  // namespace spindle
