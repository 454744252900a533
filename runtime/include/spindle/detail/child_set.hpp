// detail::child_set: the bookkeeping shared by when_all, when_any and
// task_group: a set of spawned children whose completions wake one waiting
// parent task, and a close() that does not return while a child's frame
// still exists.
//
// Shape: every child has a node (owned by the caller: the caller keeps the
// child's join_handle next to it) registered as the join waiter of the
// child's task header. A child is a task the set spawned (spawn_child) or
// one spawned earlier whose join handle the caller handed over
// (adopt_child): from the registration on, both are the same. A completion
// moves the node from the pending list to the done list (completion order)
// and, when it was the last pending one, wakes the parent waiting in
// wait_all(). The first completion that matches the set's abort policy (a
// failure, or any completion) aborts the others. No allocation: the lists
// are intrusive.
//
// Cancellation: the parent waits in an awaiter with a cancel hook, so
// aborting the parent withdraws it; its frame is then destroyed and the
// owner's destructor calls close(), which aborts every pending child with
// task_abort_here (frames destroyed on the calling thread), waits for a
// child that is running on another thread to reach its next suspension point
// (that thread destroys it), and waits for a child whose suspension cannot
// be withdrawn (I/O being cancelled) only when the calling thread is outside
// every runtime; inside a runtime that child is left to its pending wake
// (its frame, and the buffer of its I/O, go at that completion).
//
// Thread-safety: watch(), abort_pending() and the completions may run on any
// thread; wait_all(), pop_done() and close() are called by the owner (one task
// or thread at a time).
// Design source: the intrusive waiter lists of detail/wait_list.hpp; Tokio's
// JoinSet (a set of join handles polled for the next completion).
#pragma once

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <stop_token>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>

#include "spindle/detail/task_header.hpp"
#include "spindle/join_handle.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"

namespace spindle::detail {

class child_set : cancel_hook {
 public:
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

  /// One watched child. Owned by the caller; must outlive its registration
  /// (until it is popped from the done list, or until close() returned).
  struct node : join_waiter {
    child_set* owner = nullptr;
    task_header* task = nullptr;
    std::size_t index = 0;
    node* prev = nullptr;
    node* next = nullptr;
    // Guarded by the set's lock (stable once close() returned or the node
    // was popped).
    bool done = false;        ///< completed; in the done list
    bool failed = false;      ///< completed with an exception or cancelled
    bool withdrawn = false;   ///< close() gave up waiting for it (not complete)
    bool aborted = false;     ///< the set aborted it (abort_pending, abort_child)
    bool registered = false;  ///< watch() took it (owner thread only)
    /// Set by child<T>: frees the node; takes its exception (nullptr when it
    /// succeeded), dropping its value.
    void (*destroy)(node* self) noexcept = nullptr;
    std::exception_ptr (*collect)(node* self) noexcept = nullptr;
  };

  /// Which completion aborts the other children (from the completing thread,
  /// at once, whether or not the parent is waiting).
  enum class abort_policy : std::uint8_t {
    on_failure,     ///< the first child that fails (when_all, task_group)
    on_first_done,  ///< the first child that completes (when_any)
  };

  explicit child_set(abort_policy policy) noexcept : policy_(policy) {}
  ~child_set() { close(); }
  child_set(child_set const&) = delete;
  child_set& operator=(child_set const&) = delete;

  /// What watch() asks of the caller.
  enum class watch_result : std::uint8_t {
    watching,     ///< registered
    abort_child,  ///< registered, but the set is aborting: abort the child now
    closed,       ///< not registered: the set is closed (abort and drop the child)
  };

  /// Registers `n` as the join waiter of `task` (a spawned child whose join
  /// handle the caller holds and nobody else awaits). `index` is reported
  /// by first_done_index() and first_failed_index().
  watch_result watch(node* n, task_header* task, std::size_t index) noexcept;

  struct awaiter {
    child_set* set;
    bool await_ready() noexcept;
    /// Throws std::system_error(operation_not_permitted) outside a spindle task.
    bool await_suspend(std::coroutine_handle<> caller);
    void await_resume() const noexcept {}
  };
  /// Suspends the calling task until no child is pending.
  [[nodiscard]] awaiter wait_all() noexcept { return awaiter{this}; }

  /// Aborts (join_handle::abort) every pending child; children watched from
  /// now on are reported as abort_child, until reset(). Also done by a
  /// completion that matches the abort policy.
  void abort_pending() noexcept;

  /// Removes and returns the oldest node of the done list, or nullptr.
  [[nodiscard]] node* pop_done() noexcept;

  [[nodiscard]] std::size_t pending_count() noexcept;
  [[nodiscard]] std::size_t first_done_index() noexcept;
  [[nodiscard]] std::size_t first_failed_index() noexcept;
  /// True after abort_pending() (until reset()).
  [[nodiscard]] bool aborting() noexcept;
  /// Forgets the first done / failed indices and the aborting state (the
  /// done list and pending children are kept); a stop source that was
  /// requested is replaced by a fresh one.
  void reset() noexcept;

  /// Gives the set a stop source (task_group): every abort of the pending
  /// children (a failure, abort_pending(), close()) requests stop on it,
  /// outside the lock. Call before the first watch.
  void enable_stop_source() { stop_ = std::stop_source{}; }
  /// A token of that stop source (a token that never stops without one).
  [[nodiscard]] std::stop_token stop_token() noexcept;

  /// Refuses further watches, aborts every pending child and returns once
  /// none is pending and no completion touches the set any more (see the
  /// file comment for the one case where a child is withdrawn instead of
  /// awaited). Idempotent. Must not run inside one of the children.
  void close() noexcept;

 private:
  static void on_complete(join_waiter* w) noexcept;
  static bool on_cancel(cancel_hook* hook) noexcept;
  [[nodiscard]] bool satisfied() const noexcept { return pending_ == 0; }
  void unlink_pending(node* n) noexcept;
  void push_done(node* n) noexcept;
  void abort_pending_locked() noexcept;

  std::mutex mutex_;
  node* pending_head_ = nullptr;
  std::size_t pending_ = 0;
  node* done_head_ = nullptr;
  node* done_tail_ = nullptr;
  std::size_t first_done_ = npos;
  std::size_t first_failed_ = npos;
  abort_policy policy_;
  bool aborting_ = false;
  bool closed_ = false;
  task_header* waiting_ = nullptr;           ///< the parent, while suspended in wait_all()
  std::stop_source stop_{std::nostopstate};  ///< see enable_stop_source
};

/// Aborts `task` and returns once its frame is destroyed (on this thread
/// when it is queued or suspended in a withdrawable awaiter; by its own
/// worker when it is running elsewhere), or, inside a runtime, once only a
/// wake it cannot withdraw is left (see the file comment).
void abort_and_reap(task_header* task) noexcept;

/// `T`, or std::monostate for void: what when_all / when_any report for a child.
template <class T>
struct result_of {
  using type = T;
};
template <>
struct result_of<void> {
  using type = std::monostate;
};
template <class T>
using result_t = typename result_of<T>::type;

/// A watched child: its node and its join handle. Its destructor drops a
/// result nobody took without reporting it (the scope decided to discard it).
template <class T>
struct child final : child_set::node {
  join_handle<T> handle;
  bool taken = false;

  child() noexcept {
    destroy = [](child_set::node* self) noexcept { delete static_cast<child*>(self); };
    collect = [](child_set::node* self) noexcept {
      return static_cast<child*>(self)->take_exception();
    };
  }
  child(child const&) = delete;
  child& operator=(child const&) = delete;
  ~child() { discard(); }

  /// The child's value (std::monostate for void), or rethrows its exception
  /// (task_cancelled when it was aborted). Precondition: done.
  result_t<T> take() {
    taken = true;
    if constexpr (std::is_void_v<T>) {
      handle.take();
      return std::monostate{};
    } else {
      return handle.take();
    }
  }
  /// The child's exception (nullptr when it succeeded); drops its value.
  std::exception_ptr take_exception() noexcept {
    try {
      (void)take();
    } catch (...) {
      return std::current_exception();
    }
    return nullptr;
  }
  void discard() noexcept {
    if (!taken && done && !withdrawn && handle.valid()) (void)take_exception();
  }
};

/// Throws std::system_error(invalid_argument) with the message
/// "<who>: <problem>" (the argument checks of when_all, when_any, task_group).
[[noreturn]] void throw_invalid_child(char const* who, char const* problem);

/// Throws std::system_error(invalid_argument) for an empty task.
template <class T>
void check_child(task<T> const& t, char const* who) {
  if (!t.valid()) throw_invalid_child(who, "empty task");
}

/// Throws std::system_error(invalid_argument) for an empty join handle or
/// one whose result was already taken.
template <class T>
void check_child(join_handle<T> const& h, char const* who) {
  if (!h.valid()) throw_invalid_child(who, "empty join_handle");
  if (h.result_taken()) throw_invalid_child(who, "join_handle result already taken");
}

/// What the combinators accept as a child: task<T> (spawned) or
/// join_handle<T> (adopted); child_value_t is the T.
template <class A>
struct child_arg_traits {};
template <class T>
struct child_arg_traits<task<T>> {
  using value_type = T;
};
template <class T>
struct child_arg_traits<join_handle<T>> {
  using value_type = T;
};
template <class A>
concept child_arg = requires {
  typename child_arg_traits<A>::value_type;
};
template <class A>
using child_value_t = typename child_arg_traits<A>::value_type;

/// Watches `c` (whose handle is set) in `set` as `index`, and acts on what
/// watch() asks.
template <class T>
void watch_child(child_set& set, child<T>& c, std::size_t index) noexcept {
  switch (set.watch(&c, c.handle.header(), index)) {
    case child_set::watch_result::watching:
      break;
    case child_set::watch_result::abort_child:
      c.handle.abort();
      break;
    case child_set::watch_result::closed:
      abort_and_reap(c.handle.header());
      break;
  }
}

/// Spawns `t` on the current runtime and watches it in `set` as `index`.
/// Throws what spindle::spawn throws (nothing is spawned then).
template <class T>
std::unique_ptr<child<T>> spawn_child(child_set& set, task<T> t, std::size_t index,
                                      spawn_location where = spawn_location::current()) {
  auto c = std::make_unique<child<T>>();
  c->handle = spindle::spawn(std::move(t), where);
  watch_child(set, *c, index);
  return c;
}

/// Adopts the task of `h` (already spawned, on any runtime; running or
/// finished) as a child of `set` at `index`: from here on it is the child
/// spawn_child would have made of it. Precondition: check_child(h) passed.
/// Throws std::bad_alloc (the handle is dropped, which detaches the task).
template <class T>
std::unique_ptr<child<T>> adopt_child(child_set& set, join_handle<T> h, std::size_t index) {
  auto c = std::make_unique<child<T>>();
  c->handle = std::move(h);
  watch_child(set, *c, index);
  return c;
}

template <class T>
std::unique_ptr<child<T>> add_child(child_set& set, task<T>&& t, std::size_t index) {
  return spawn_child(set, std::move(t), index);
}
template <class T>
std::unique_ptr<child<T>> add_child(child_set& set, join_handle<T>&& h, std::size_t index) {
  return adopt_child(set, std::move(h), index);
}

/// Spawns or adopts every argument of `args` (index = position) into `set`.
template <class... As, class... Ts, std::size_t... I>
void add_children(child_set& set, std::tuple<As...>& args,
                  std::tuple<std::unique_ptr<child<Ts>>...>& children, std::index_sequence<I...>) {
  ((std::get<I>(children) = add_child(set, std::move(std::get<I>(args)), I)), ...);
}

}  // namespace spindle::detail
