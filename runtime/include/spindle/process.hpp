// spindle processes: long-lived coroutines addressed by a pid, each with a
// lock-free mailbox, scheduled on the runtime's workers like any task.
//
//   auto echo = rt.spawn_process<int>([](spindle::process_context<int>& ctx)
//                                         -> spindle::task<void> {
//     for (;;) {
//       int v = co_await ctx.receive();   // Idle while the mailbox is empty
//       if (v < 0) co_return;
//     }
//   });
//   spindle::send(echo, 42);              // any thread; never blocks
//   rt.block_on(spindle::monitor(echo));  // rethrows the body's exception
//
// Shape:
// - pid<Msg>: 64 bits, a generation (high 32) and a slot index (low 32) in a
//   process-wide pid table (chunks of 4096 slots, lookups lock-free: one CAS
//   on the slot's word takes a reference). A slot is reused with the next
//   generation, so a stale pid never reaches a newer process; value() 0 is
//   never issued.
// - A process is the body's own task (the task<void> the body returns,
//   spawned as is: its header and frame are one pool block) plus its pid
//   table slot, 88 bytes, which holds the process block itself: the task,
//   the mailbox and the flags (no wrapper coroutine, no block allocation;
//   a body callable with state, a bounded mailbox or a monitor add one
//   small process_extras). The slot is the join waiter of the task: the
//   task's completion (returned, threw, frame destroyed) ends the process.
//   An idle process parked in receive costs about 220 bytes (g++ 12,
//   bench_process's process_idle_bytes: the 64-byte task header and a
//   72-byte body frame in one 144-byte malloc chunk, the slot, the table's
//   spare slots). The mailbox is Vyukov's MPSC queue (one exchange and one
//   store per send, wait-free; its stub is a bare link in the block, so an
//   empty mailbox owns no node) and one 32-bit word,
//   count << 1 | running. A send links its message, then adds 2; the send
//   that finds the word 0 (nothing counted, the process parked in receive)
//   wakes the task with detail::wake. The receiver takes only counted
//   messages and parks with one CAS from "all counted messages taken" to 0,
//   so a message counted after that CAS always finds the word 0 and wakes it:
//   no lost wake-up, never a spurious one. A wake while the process still
//   runs (between the CAS and the end of its poll) marks the task NOTIFIED
//   and the worker re-queues it after the poll: the seed's wakeup flag.
//   receive_for arms a timer whose claim is the same word (the timer wins
//   only from 0), so exactly one of message, timeout and shutdown wakes it.
// - States (state_of): ready (queued), running (being polled),
//   idle (parked in receive), blocked (suspended on anything else: I/O, a
//   sleep, a mutex, a monitor), complete (body ended, or pid unknown).
//   runtime::stats() counts processes per state from counters kept as they
//   park and end (see stats.hpp), without visiting them.
// - Bounded mailboxes (process_options::mailbox_capacity > 0): a semaphore of
//   capacity permits; send returns false when none is left, send_async waits.
// - Shutdown: the runtime's destructor first cancels every process of the
//   runtime: a pending or later receive/receive_for throws
//   spindle::task_cancelled; it waits up to
//   runtime_config::process_shutdown_timeout for the bodies to end, then
//   goes on with the usual shutdown, which destroys the remaining frames
//   (their monitors see task_cancelled).
//
// Errors: spawn_process outside a runtime throws std::system_error(
// std::errc::operation_not_permitted), like spawn; a body that returns an
// empty task, std::system_error(std::errc::invalid_argument); after the runtime began to
// shut down the process starts cancelled. send to a completed or never-issued
// pid returns false. monitor rethrows what ended the body (task_cancelled
// when it was cancelled or destroyed by shutdown); a monitor that starts
// after the slot was reused completes normally (the outcome is gone).
//
// Thread-safety: send, send_async, state_of, monitor and spawn_process may
// be used from any thread, task, fiber or process (spawn_process and monitor
// as spawn and block_on allow); process_context is used by its own process
// only. A pid may outlive its runtime (sends then return false).
// Design source: the Go process scheduler (states, the wakeup
// flag, routing by PID, cancel on shutdown), Vyukov's MPSC queue, Erlang's
// pids (index + serial), Tokio's notified-while-running task state.
#pragma once

#include <atomic>
#include <chrono>
#include <concepts>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <system_error>
#include <type_traits>
#include <utility>

#include "spindle/detail/task_header.hpp"
#include "spindle/detail/timer_entry.hpp"
#include "spindle/errors.hpp"
#include "spindle/event.hpp"
#include "spindle/join_handle.hpp"
#include "spindle/runtime.hpp"
#include "spindle/semaphore.hpp"
#include "spindle/task.hpp"

namespace spindle {

/// Where a process stands (the Go process scheduler's states).
enum class process_state : std::uint8_t { ready, running, blocked, idle, complete };

/// Options of spawn_process.
struct process_options {
  /// Most messages the mailbox holds (sent, not yet received); 0 = unbounded.
  /// With a bound, send returns false when the mailbox is full and
  /// send_async waits for room.
  std::size_t mailbox_capacity = 0;
};

template <class Msg>
class process_context;

/// The address of a process taking messages of type Msg. Copyable, 8 bytes.
template <class Msg>
class pid {
 public:
  /// A pid that was never issued: send returns false, state_of is complete.
  constexpr pid() noexcept = default;
  /// Generation << 32 | slot index; 0 for a default-constructed pid.
  [[nodiscard]] constexpr std::uint64_t value() const noexcept { return value_; }
  friend constexpr bool operator==(pid const&, pid const&) noexcept = default;

 private:
  template <class>
  friend class process_context;
  template <class M, class F>
  friend pid<M> detail_spawn_process(detail::scheduler* sched, F&& body, process_options opts,
                                     spawn_location where);
  explicit constexpr pid(std::uint64_t v) noexcept : value_(v) {}
  std::uint64_t value_ = 0;
};

namespace detail {

/// A link of a mailbox queue (the stub has nothing else).
struct mailbox_link {
  std::atomic<mailbox_link*> next{nullptr};
};

/// A message in a mailbox: a link and how to free it (its type is not known
/// where leftover messages are freed).
struct mailbox_message : mailbox_link {
  /// Frees the node; destroys its value first when `with_value`.
  void (*release)(mailbox_message* self, bool with_value) noexcept = nullptr;
};

/// One message of type Msg (a node that was popped keeps no value).
template <class Msg>
struct mailbox_node final : mailbox_message {
  union {
    Msg value;
  };
  template <class... A>
  explicit mailbox_node(std::in_place_t, A&&... a) : value(std::forward<A>(a)...) {
    release = &release_node;
  }
  ~mailbox_node() {}
  static void release_node(mailbox_message* m, bool with_value) noexcept {
    auto* n = static_cast<mailbox_node*>(m);
    if (with_value) n->value.~Msg();
    delete n;
  }
};

/// What a process needs only sometimes, allocated when it does: the body
/// callable when it has state (a lambda with captures), a bounded
/// mailbox's semaphore, the monitors' event.
struct process_extras {
  process_extras() = default;
  process_extras(process_extras const&) = delete;
  process_extras& operator=(process_extras const&) = delete;
  virtual ~process_extras();
  /// Set when the body ended; made by the first monitor.
  std::atomic<event*> monitors{nullptr};
  std::unique_ptr<semaphore> room;  ///< bounded mailboxes: permits = free places
};

/// process_extras holding the body callable F.
template <class F>
struct process_extras_with final : process_extras {
  template <class G>
  explicit process_extras_with(G&& g) : body(std::forward<G>(g)) {}
  F body;
};

/// The untyped part of a process, 80 bytes, constructed inside its pid
/// table slot (no allocation of its own): the task, the mailbox (Vyukov's
/// queue with its stub, and the word), the flags. It is the join waiter of
/// the body's task, which is the process's task itself (no wrapper frame):
/// its completion ends the process. It is also the cancel hook of a receive
/// (receive_cancel_hook): in the block, not in the awaiter, so that the
/// body's frame stays one malloc size class smaller.
struct process_base : join_waiter, cancel_hook {
  process_base() noexcept = default;
  process_base(process_base const&) = delete;
  process_base& operator=(process_base const&) = delete;

  task_header* task = nullptr;  ///< the body's task (its header kept by the join interest)
  mailbox_link* head = &stub;   ///< receiver: dummy node
  std::atomic<mailbox_link*> tail{&stub};  ///< senders exchange
  mailbox_link stub;                       ///< the first dummy
  /// count << 1 | running. 0: parked in receive with every counted message
  /// taken. Senders add 2 after linking; the receiver parks by CAS to 0.
  std::atomic<std::uint32_t> word{1};
  /// Counted messages taken since the last park (the receiver's; atomic
  /// for the shutdown's reader).
  std::atomic<std::uint32_t> taken{0};
  std::uint32_t index = 0;             ///< the pid table slot (pid's low half)
  std::atomic<bool> cancelled{false};  ///< shutdown: receive throws task_cancelled
  std::atomic<std::uint8_t> parked{
      0};  ///< for state_of: 0 no, 1 idle, 2 blocked (parked in receive)
  std::atomic<bool> awaiting_yields{false};  ///< step processes: blocked on commands
  std::atomic<bool> finished{false};         ///< the body ended (set before `monitors` is read)
  /// Messages received while the body runs; once it ended, the bytes of
  /// the std::exception_ptr that ended it (process.cpp).
  union {
    std::uint64_t received = 0;
    alignas(std::exception_ptr) unsigned char error_bytes[sizeof(std::exception_ptr)];
  };
  std::atomic<process_extras*> extras{nullptr};  ///< see process_extras

  /// Counted messages not taken yet (or +1 when cancelled), receiver only.
  [[nodiscard]] std::uint32_t available() const noexcept {
    return (word.load(std::memory_order_acquire) >> 1) - taken.load(std::memory_order_relaxed);
  }
  /// Takes one counted message off the count (after popping it).
  void took() noexcept;
  /// Receiver: parks (CAS to 0) when every counted message is taken.
  /// Returns false when more arrived.
  bool try_park() noexcept;
  /// Receiver, after a park's wake: sets the running bit unless
  /// `bit_already_set` (a timer that fired set it).
  void unpark(bool bit_already_set) noexcept;
  /// Sender, after linking a message: counts it, wakes a parked receiver.
  void count_and_wake() noexcept;
  /// Frees the messages left in the queue (nobody pushes any more).
  void drain() noexcept;
};

/// A CPU pause / a sched_yield (process.cpp).
void spin_pause() noexcept;
void yield_thread() noexcept;

/// The typed view of a process (no data of its own): push and pop.
template <class Msg>
struct process_block : process_base {
  /// Any thread: links `msg` (wait-free), then counts it. The three steps
  /// are separate so that the deterministic simulation (test_process) can
  /// interleave them.
  void push(Msg&& msg) {
    auto* n = new mailbox_node<Msg>(std::in_place, std::move(msg));
    push_link(push_exchange(n), n);
    count_and_wake();
  }
  /// Step 1 of push: takes the tail; returns the node to link after.
  mailbox_link* push_exchange(mailbox_link* n) noexcept {
    return tail.exchange(n, std::memory_order_acq_rel);
  }
  /// Step 2 of push: makes `n` reachable (step 3 is count_and_wake).
  static void push_link(mailbox_link* prev, mailbox_link* n) noexcept {
    prev->next.store(n, std::memory_order_release);
  }
  /// Receiver: whether pop() would return at once (the oldest counted
  /// message is linked) rather than wait for a preempted sender's link.
  [[nodiscard]] bool head_linked() const noexcept {
    return head->next.load(std::memory_order_acquire) != nullptr;
  }
  [[gnu::noinline]] mailbox_link* wait_for_link() noexcept {
    for (unsigned i = 0;; ++i) {
      if (mailbox_link* next = head->next.load(std::memory_order_acquire)) return next;
      if (i < 64) {
        detail::spin_pause();
      } else {
        detail::yield_thread();
      }
    }
  }
  /// Receiver, with available() > 0: the oldest counted message.
  Msg pop() {
    mailbox_link* link = head->next.load(std::memory_order_acquire);
    // Counted implies linked, but not in order: a sender that exchanged the
    // tail before this message's sender may not have linked its node yet
    // (Vyukov's window: two instructions, long only if that thread was
    // preempted between them). Wait for it.
    if (link == nullptr) link = wait_for_link();
    auto* next = static_cast<mailbox_node<Msg>*>(link);
    Msg out(std::move(next->value));
    next->value.~Msg();
    if (head != &stub) delete static_cast<mailbox_node<Msg>*>(head);
    head = next;
    took();
    if (process_extras* e = extras.load(std::memory_order_acquire); e != nullptr && e->room)
      e->room->release(1);
    return out;
  }
};

// The pid table (process.cpp).
/// Reserves a pid table slot for a new process: returns its storage
/// (sizeof(process_base) bytes, where the caller constructs the process)
/// and sets `value` to its pid. Nothing can reach it until pid_publish.
/// Throws std::system_error(resource_unavailable_try_again) past 2^28
/// slots, std::bad_alloc.
[[nodiscard]] void* pid_reserve(std::uint64_t& value);
/// Gives back a reserved slot that was never published (spawn failed).
void pid_unreserve(std::uint64_t value) noexcept;
/// Makes the process constructed in the reserved slot `value` live on
/// `sched`, with two references: the process's own (dropped when its body
/// ends) and the caller's.
void pid_publish(std::uint64_t value, process_base* block, scheduler* sched) noexcept;
/// A reference to the live process `value` names, or nullptr.
[[nodiscard]] process_base* pid_acquire(std::uint64_t value) noexcept;
/// Gives back a reference taken by pid_publish, pid_acquire or pid_observe.
void pid_release(std::uint64_t value) noexcept;
/// For monitor: 0 unknown (nothing held), 1 live (block set, reference
/// held), 2 complete with the outcome kept (reference held).
[[nodiscard]] int pid_observe(std::uint64_t value, process_base*& block) noexcept;
/// The exception that ended the body (with a reference from pid_observe,
/// once complete).
[[nodiscard]] std::exception_ptr pid_outcome(std::uint64_t value) noexcept;
/// The pid of a live process (its own: self()).
[[nodiscard]] std::uint64_t pid_value_of(process_base const* block) noexcept;
/// The join waiter's notify: the body's task completed (returned, threw,
/// or its frame was destroyed); marks the process complete with its
/// outcome and drops the process's own reference.
void process_task_done(join_waiter* self) noexcept;
[[nodiscard]] process_state pid_state(std::uint64_t value) noexcept;
/// The receiver's cancel hook while parked in receive.
bool receive_cancel_hook(cancel_hook* block) noexcept;
/// The same for receive_for (`awaiter` is a timed_receive_base).
bool timed_receive_cancel_hook(cancel_hook* awaiter) noexcept;

/// The timer half of receive_for.
struct timed_receive_base : cancel_hook {
  process_base* block = nullptr;
  timer_entry entry;
  bool armed = false;
  bool parked = false;
  bool bit_set = false;  ///< suspend set the running bit back itself (deadline passed)
  /// await_suspend's common part: parks, arms; false: resume now.
  bool suspend(task_header* self, std::chrono::steady_clock::time_point deadline);
  /// await_resume's common part: disarms, sets the running bit back.
  void resume() noexcept;
  ~timed_receive_base() {
    if (armed) timer_disarm(entry);
  }
};

}  // namespace detail

/// What a process body gets: its pid and its mailbox. Used by the process
/// only (not thread-safe); lives as long as the body. It is the process's
/// block itself, inside its pid table slot: neither copyable nor movable.
template <class Msg>
class process_context : private detail::process_block<Msg> {
 public:
  process_context(process_context const&) = delete;
  process_context& operator=(process_context const&) = delete;

  /// This process's pid.
  [[nodiscard]] pid<Msg> self() const noexcept { return pid<Msg>{detail::pid_value_of(this)}; }

  class receive_awaiter;
  class receive_for_awaiter;

  /// `co_await ctx.receive()` yields the next message, in the order the
  /// sends were linked (per sender: in send order). The process is Idle
  /// while it waits. Throws task_cancelled once the runtime shuts down.
  [[nodiscard]] receive_awaiter receive() noexcept { return receive_awaiter{block()}; }
  /// Like receive(), but yields std::nullopt when no message came within
  /// `d` (timer resolution: 1 ms, never early). d <= 0 only looks.
  [[nodiscard]] receive_for_awaiter receive_for(std::chrono::nanoseconds d) noexcept {
    return receive_for_awaiter{block(), d};
  }
  /// The process's block (spindle's own use: step processes).
  [[nodiscard]] detail::process_base* detail_block() noexcept { return block(); }
  /// Messages taken so far by this process.
  [[nodiscard]] std::uint64_t received() const noexcept {
    return this->detail::process_base::received;
  }

 private:
  template <class M, class F>
  friend pid<M> detail_spawn_process(detail::scheduler* sched, F&& body, process_options opts,
                                     spawn_location where);

  process_context() noexcept = default;
  [[nodiscard]] detail::process_block<Msg>* block() noexcept { return this; }
};

/// Awaiter of process_context::receive().
template <class Msg>
class process_context<Msg>::receive_awaiter {
 public:
  /// Awaits the mailbox of process block `b` (made by receive()).
  explicit receive_awaiter(detail::process_block<Msg>* b) noexcept : b_(b) {}
  /// True when a message is there already (or the runtime shuts down).
  bool await_ready() noexcept { return b_->available() != 0; }
  /// Parks the process (Idle) unless a message arrived meanwhile; false
  /// then, and the process goes on at once.
  bool await_suspend(std::coroutine_handle<> caller) noexcept {
    detail::task_header* self = detail::suspend_current(caller);
    detail::set_cancel_hook(self, b_, &detail::receive_cancel_hook);
    if (!b_->try_park()) {
      detail::clear_cancel_hook(self);
      return false;
    }
    return true;
  }
  /// The next message. Throws spindle::task_cancelled at runtime shutdown.
  Msg await_resume() {
    // `parked` is set only between a park and its unpark: one byte of the
    // block instead of a flag in the awaiter (the body's frame is smaller).
    if (b_->parked.load(std::memory_order_relaxed) != 0) b_->unpark(false);
    if (b_->cancelled.load(std::memory_order_acquire)) throw task_cancelled{};
    return b_->pop();
  }

 private:
  detail::process_block<Msg>* b_;
};

/// Awaiter of process_context::receive_for().
template <class Msg>
class process_context<Msg>::receive_for_awaiter : detail::timed_receive_base {
 public:
  /// Awaits the mailbox of process block `b` for at most `d` (made by
  /// receive_for()).
  receive_for_awaiter(detail::process_block<Msg>* b, std::chrono::nanoseconds d) noexcept
      : b_(b), d_(d) {
    block = b;
  }
  /// True when a message is there already, the runtime shuts down, or the
  /// duration is not positive.
  bool await_ready() noexcept { return b_->available() != 0 || d_ <= d_.zero(); }
  /// Parks the process with a timer for the deadline; false when a message
  /// arrived meanwhile.
  bool await_suspend(std::coroutine_handle<> caller) {
    auto now = std::chrono::steady_clock::now();
    auto limit = std::chrono::steady_clock::time_point::max() - now;
    auto deadline = d_ >= limit ? std::chrono::steady_clock::time_point::max() : now + d_;
    return suspend(detail::suspend_current(caller), deadline);
  }
  /// The next message, or empty when the time ran out first. Throws
  /// spindle::task_cancelled at runtime shutdown.
  std::optional<Msg> await_resume() {
    resume();
    if (b_->cancelled.load(std::memory_order_acquire)) throw task_cancelled{};
    if (b_->available() == 0) return std::nullopt;
    return std::optional<Msg>(b_->pop());
  }

 private:
  detail::process_block<Msg>* b_;
  std::chrono::nanoseconds d_;
};

/// Spawns a process on `sched` (spawn_process and runtime::spawn_process),
/// its task recorded as spawned at `where` for runtime::dump(). The process
/// is the body's own task (its header and frame: one block) plus its pid
/// table slot; a body callable with state and a bounded mailbox add one
/// small allocation (process_extras).
template <class Msg, class F>
pid<Msg> detail_spawn_process(detail::scheduler* sched, F&& body, process_options opts,
                              spawn_location where) {
  static_assert(std::is_move_constructible_v<Msg>, "spindle: process messages must be movable");
  using body_t = std::decay_t<F>;
  static_assert(std::is_invocable_r_v<task<void>, body_t&, process_context<Msg>&>,
                "spindle::spawn_process: the body must be callable as "
                "body(process_context<Msg>&) returning task<void>");
  static_assert(sizeof(process_context<Msg>) == sizeof(detail::process_base));
  std::uint64_t v = 0;
  void* storage = detail::pid_reserve(v);
  auto* ctx = ::new (storage) process_context<Msg>();
  detail::process_base* b = ctx;
  b->index = static_cast<std::uint32_t>(v);
  std::unique_ptr<detail::process_extras> extras;
  std::coroutine_handle<detail::promise<void>> frame;
  try {
    task<void> t;
    if constexpr (std::is_empty_v<body_t> && std::is_trivially_destructible_v<body_t>) {
      // No state: nothing to keep (a coroutine lambda's frame keeps `this`
      // but has no capture to read through it).
      body_t f(std::forward<F>(body));
      t = std::invoke(f, *ctx);
    } else {
      auto holder = std::make_unique<detail::process_extras_with<body_t>>(std::forward<F>(body));
      t = std::invoke(holder->body, *ctx);
      extras = std::move(holder);
    }
    if (!t.valid()) {
      throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                              "spindle::spawn_process: the body returned an empty task");
    }
    if (opts.mailbox_capacity != 0) {
      if (!extras) extras = std::make_unique<detail::process_extras>();
      extras->room = std::make_unique<semaphore>(opts.mailbox_capacity);
    }
    frame = t.release();
  } catch (...) {
    if (frame) frame.destroy();
    detail::pid_unreserve(v);
    throw;
  }
  b->task = detail::task_header::of_frame(frame.address());
  b->extras.store(extras.release(), std::memory_order_relaxed);
  b->notify = &detail::process_task_done;
  // From here the pid table owns the process; we hold one reference on it.
  detail::pid_publish(v, b, sched);
  detail::task_header* h = detail::spawn_root(sched, frame, &frame.promise(), where);
  // The join interest keeps the header (and so the frame's block) until the
  // slot is freed; its waiter is the process's end.
  if (!detail::join_register(h, b)) detail::process_task_done(b);
  detail::pid_release(v);
  return pid<Msg>{v};
}

/// Spawns a process on the runtime of the calling thread (a worker, a thread
/// inside block_on, a process, a fiber). `body(process_context<Msg>&)` must
/// return task<void>; it is moved into the process and lives as long as it.
/// runtime::dump() shows the process's task as spawned at `where` (the
/// caller's line). Elsewhere throws
/// std::system_error(std::errc::operation_not_permitted).
template <class Msg, class F>
pid<Msg> spawn_process(F&& body, process_options opts = {},
                       spawn_location where = spawn_location::current()) {
  detail::scheduler* sched = detail::current_scheduler();
  if (sched == nullptr) {
    throw std::system_error(std::make_error_code(std::errc::operation_not_permitted),
                            "spindle::spawn_process called outside a spindle runtime");
  }
  return detail_spawn_process<Msg>(sched, std::forward<F>(body), opts, where);
}

template <class Msg, class F>
pid<Msg> runtime::spawn_process(F&& body, process_options opts, spawn_location where) {
  return detail_spawn_process<Msg>(sched_.get(), std::forward<F>(body), opts, where);
}
template <class Msg, class F>
pid<Msg> runtime::spawn_process(F&& body, spawn_location where) {
  return detail_spawn_process<Msg>(sched_.get(), std::forward<F>(body), process_options{}, where);
}

/// Sends `msg` to `to` from any thread; never blocks. Returns false (and
/// drops `msg`) when the process has completed, the pid was never issued,
/// or its bounded mailbox is full. A true return means the message is in the
/// mailbox; it is lost only if the process ends without receiving it. `msg`
/// converts to Msg (Msg is taken from the pid: send(p, "text") for a
/// pid<std::string>, send(p, 1) for a pid<long>).
template <class Msg>
bool send(pid<Msg> const& to, std::type_identity_t<Msg> msg) {
  detail::process_base* base = detail::pid_acquire(to.value());
  if (base == nullptr) return false;
  auto* b = static_cast<detail::process_block<Msg>*>(base);
  bool ok = true;
  detail::process_extras* e = b->extras.load(std::memory_order_acquire);
  if (e != nullptr && e->room && !e->room->try_acquire(1)) {
    ok = false;
  } else {
    try {
      b->push(std::move(msg));
    } catch (...) {
      detail::pid_release(to.value());
      throw;
    }
  }
  detail::pid_release(to.value());
  return ok;
}

/// Sends `msg`, waiting (suspended, from a task) while a bounded mailbox is
/// full. Yields false when the process completed before there was room.
template <class Msg>
SPINDLE_COROUTINE_TEMPLATE task<bool> send_async(pid<Msg> to, std::type_identity_t<Msg> msg) {
  detail::process_base* base = detail::pid_acquire(to.value());
  if (base == nullptr) co_return false;
  struct release_guard {
    std::uint64_t v;
    ~release_guard() { detail::pid_release(v); }
  } guard{to.value()};
  auto* b = static_cast<detail::process_block<Msg>*>(base);
  detail::process_extras* e = b->extras.load(std::memory_order_acquire);
  if (e != nullptr && e->room) co_await e->room->acquire(1);
  if (b->finished.load(std::memory_order_acquire)) co_return false;
  b->push(std::move(msg));
  co_return true;
}

/// Where the process stands now (complete for a finished or unknown pid).
/// Any thread; a snapshot.
template <class Msg>
[[nodiscard]] process_state state_of(pid<Msg> const& p) noexcept {
  return detail::pid_state(p.value());
}

namespace detail {
task<void> monitor_value(std::uint64_t value);
}  // namespace detail

/// Completes when the process completes: returns if its body returned,
/// rethrows the exception that ended it (task_cancelled for a process
/// cancelled or destroyed by shutdown). Completes at once for an unknown
/// pid. Await it from a task (or rt.block_on(monitor(p))).
template <class Msg>
[[nodiscard]] task<void> monitor(pid<Msg> p) {
  return detail::monitor_value(p.value());
}

}  // namespace spindle

/// Hashes a pid by its value() (index and generation), for unordered
/// containers keyed by pid.
template <class Msg>
struct std::hash<spindle::pid<Msg>> {
  /// The hash of p.value().
  std::size_t operator()(spindle::pid<Msg> const& p) const noexcept {
    return std::hash<std::uint64_t>{}(p.value());
  }
};

#include "spindle/step_process.hpp"  // the step form, on top of this header
