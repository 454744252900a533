// spindle fibers: stackful tasks that share the workers, migrate, and await
// anything.
//
//   auto h = spindle::spawn_fiber([&] {
//     auto file = spindle::this_fiber::await(spindle::io::file::open(path));
//     std::size_t n = spindle::this_fiber::await(file.read_at(buf, 0));  // the fiber waits,
//     return parse(buf, n);                                              // the worker does not
//   });
//   auto tree = co_await h;  // an ordinary join_handle<R>
//
// Shape: a fiber is a plain function (any callable with no arguments) run on
// its own stack. It is scheduled as a spawned task is, by the same workers
// and queues (LIFO slot, run queue, global queue, stealing, budget): it *is*
// a task whose root coroutine (detail::fiber_root) switches onto the fiber's
// stack when polled and back when the fiber waits. this_fiber::await(a)
// hands the awaitable to that root coroutine, which co_awaits it as any task
// would, so every spindle awaitable works inside a fiber (task<T>,
// join_handle<T>, sleep_for/sleep_until, timeout, io::file operations,
// channel/oneshot/broadcast/watch, mutex/rwlock/semaphore/event/notify/latch/
// barrier, when_all/when_any) and the worker runs other tasks meanwhile.
//
// Stacks: `fiber_options::stack_size` bytes (rounded up to pages; 64 KiB by
// default; below 16 KiB spawn_fiber throws
// std::system_error(std::errc::invalid_argument)). A fiber takes its stack
// when it first runs, not when it is spawned: a burst of queued fibers
// holds no stacks, and one that finishes in its first poll gives its stack
// back for the next. When no stack can be mapped, the fiber fails with
// std::system_error(std::errc::not_enough_memory), rethrown by its join
// handle. Stacks are mapped with MAP_NORESERVE, so that only touched
// pages cost memory, with a guard page below: an overflow is a SIGSEGV at
// the guard page, never silent corruption. Stacks are reused through a
// per-thread pool (four sizes, 64 stacks each) and a shared pool (at most
// 256 MiB of stacks); a stack freed beyond both bounds is unmapped. The
// context switch is Boost.Context's fcontext, linked into libspindle
// (make_fcontext / jump_fcontext).
//
// Migration and thread_local: after any this_fiber::await (or yield,
// sleep_for) the fiber may continue on another worker thread. A
// thread_local read after an await may therefore be another thread's
// object; do not keep a pointer or reference to a thread_local across an
// await, and do not hold a std::mutex or any thread-affine resource across
// one. Compilers may cache the address of a thread_local (and the value of
// pthread_self(), declared const) within one function across the call:
// read such values in a separate, non-inlined function after the await.
//
// Exceptions: an exception that leaves `fn` reaches the join handle (co_await
// rethrows it), as for tasks. The C++ exception-handling state (the
// exceptions being handled, std::uncaught_exceptions()) belongs to the fiber:
// an await inside a catch block keeps `throw;` working after it.
//
// Cancellation: abort() of the join handle (or the runtime's shutdown, or
// the abort of a when_all/when_any/task_group that holds the handle) while
// the fiber is suspended in this_fiber::await makes that call throw
// spindle::task_cancelled inside the fiber: its stack unwinds and its
// destructors run before the task completes. A fiber that catches it and
// goes on gets task_cancelled again from its next await (or yield,
// sleep_for), ready or not. Do not await in a destructor: during that
// unwinding the await throws out of the destructor (std::terminate).
// A fiber that never awaits cannot be interrupted (as a task that never
// suspends).
//
// Errors: spawn_fiber outside a spindle runtime (not a worker, fiber or a
// thread inside block_on) throws std::system_error(operation_not_permitted);
// this_fiber::await, yield and sleep_for outside a fiber throw
// std::system_error(std::errc::operation_not_permitted).
//
// Sanitizers: the switches carry ASan's and TSan's fiber annotations
// (__sanitizer_start/finish_switch_fiber, __tsan_create/switch_to/
// destroy_fiber) when libspindle is built with them.
//
// Thread-safety: this_fiber::* act on the calling fiber only; spawn_fiber
// and runtime::spawn_fiber are as spawn and runtime::spawn.
// Design source: Boost.Context's fcontext for the switch; asio's spawn and
// folly::fibers for a stackful task that awaits the event loop's operations;
// Go's goroutines (migrating stackful tasks on a work-stealing scheduler);
// Boost.Context's protected_fixedsize_stack and Go's stack cache for the
// guard page and the pools.
#pragma once

#include <chrono>
#include <concepts>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <system_error>
#include <type_traits>
#include <utility>

#include "spindle/awaitable.hpp"
#include "spindle/errors.hpp"
#include "spindle/join_handle.hpp"
#include "spindle/runtime.hpp"
#include "spindle/task.hpp"
#include "spindle/time.hpp"

namespace spindle {

/// Settings of one fiber.
struct fiber_options {
  /// Usable stack, bytes (rounded up to pages, >= 16 KiB); a guard page
  /// below it is added.
  std::size_t stack_size = 64 * 1024;
};

namespace detail {

/// A fiber's stack: `bytes` usable bytes at [base, base + bytes) with a
/// guard page below `base`. Move-only; gives the stack back to the pools
/// (or unmaps it) when destroyed.
class fiber_stack {
 public:
  /// Takes a stack of `bytes` (rounded up to pages) from the pools or maps
  /// one. Throws std::system_error: invalid_argument below 16 KiB,
  /// not_enough_memory when the mapping fails.
  [[nodiscard]] static fiber_stack allocate(std::size_t bytes);
  /// `bytes` rounded up to pages; throws what allocate throws for a size.
  [[nodiscard]] static std::size_t checked_size(std::size_t bytes);

  fiber_stack() noexcept = default;
  fiber_stack(fiber_stack&& other) noexcept
      : base_(std::exchange(other.base_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  fiber_stack& operator=(fiber_stack&& other) noexcept {
    if (this != &other) {
      release();
      base_ = std::exchange(other.base_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  ~fiber_stack() { release(); }

  [[nodiscard]] void* base() const noexcept { return base_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  [[nodiscard]] void* top() const noexcept { return static_cast<char*>(base_) + bytes_; }

 private:
  void release() noexcept;
  void* base_ = nullptr;
  std::size_t bytes_ = 0;
};

/// Bytes of stacks (guard pages included) in the shared pool, and the
/// stacks of `bytes` usable bytes in the calling thread's pool (for tests of
/// the pools' bounds: 256 MiB and 64).
[[nodiscard]] std::size_t fiber_shared_pool_bytes() noexcept;
[[nodiscard]] std::size_t fiber_local_pool_stacks(std::size_t bytes) noexcept;
/// Stacks mapped and unmapped since the process started (for tests: a
/// steady spawn/join maps none).
[[nodiscard]] std::uint64_t fiber_stacks_mapped() noexcept;
[[nodiscard]] std::uint64_t fiber_stacks_unmapped() noexcept;

/// An awaiter handed from a fiber to its root coroutine, type-erased.
struct fiber_await_op {
  void* awaiter = nullptr;
  /// Calls the awaiter's await_suspend(root) and returns what to resume
  /// (root itself when it did not suspend or threw: then `error` is set).
  std::coroutine_handle<> (*suspend)(fiber_await_op* op,
                                     std::coroutine_handle<> root) noexcept = nullptr;
  std::exception_ptr error{};
};

/// One fiber's execution context: its stack, the suspended fcontext, and
/// the state the switches save (owned by its root coroutine frame).
class fiber_context {
 public:
  /// `entry(arg)` runs on the fiber's stack at the first resume(); it must
  /// not throw.
  fiber_context(fiber_stack stack, void (*entry)(void*) noexcept, void* arg) noexcept;
  /// A fiber suspended in an await is unwound first (the await throws
  /// task_cancelled, repeatedly, until `entry` returns); then the stack goes
  /// back to the pools.
  ~fiber_context();
  fiber_context(fiber_context const&) = delete;
  fiber_context& operator=(fiber_context const&) = delete;

  /// Root side: runs the fiber until it awaits (returns the awaiter to
  /// co_await) or its entry returns (returns nullptr).
  [[nodiscard]] fiber_await_op* resume() noexcept;

  /// Fiber side: hands `op` to the root and switches out; returns when the
  /// root resumes the fiber. Throws task_cancelled when cancelled, or the
  /// exception op's await_suspend threw.
  void suspend(fiber_await_op& op);

  [[nodiscard]] bool cancelling() const noexcept { return cancelling_; }
  /// The root coroutine's handle (set at the first resume).
  [[nodiscard]] std::coroutine_handle<> root() const noexcept { return root_; }

 private:
  friend struct fiber_trampoline;  // fiber.cpp: the fiber's first frame
  friend void fiber_yield();
  void switch_to_root() noexcept;

  fiber_stack stack_;
  void (*entry_)(void*) noexcept;
  void* arg_;
  std::coroutine_handle<> root_{};
  void* fctx_ = nullptr;         // the fiber, while it is suspended
  void* caller_fctx_ = nullptr;  // the root side, while the fiber runs
  fiber_await_op* pending_ = nullptr;
  bool started_ = false;
  bool finished_ = false;
  bool cancelling_ = false;
  // The fiber's C++ exception-handling state (__cxa_eh_globals), swapped
  // with the thread's at every switch.
  void* eh_caught_ = nullptr;
  unsigned int eh_uncaught_ = 0;
  // Sanitizer bookkeeping (unused without sanitizers).
  struct sanitizer_state {
    void* asan_fake_stack = nullptr;
    void const* caller_stack_bottom = nullptr;
    std::size_t caller_stack_size = 0;
    void* tsan_fiber = nullptr;
    void* tsan_caller = nullptr;
  } san_;
};

/// The fiber running on the calling thread, or nullptr (not inlined: a
/// fiber may migrate between two calls).
[[nodiscard]] fiber_context* current_fiber() noexcept;

/// Throws std::system_error(operation_not_permitted) outside a fiber.
[[noreturn]] void throw_outside_fiber(char const* what);

/// this_fiber::yield: await(yield_now{}) without the type erasure.
void fiber_yield();

/// An awaiter whose await_suspend only records the task (suspend_current)
/// and registers a waker that goes through detail::wake: it never resumes
/// the handle itself and never polls another task inline. The fiber calls
/// its await_suspend on its own stack, with the root's handle, while the
/// root task is being polled (a wake meanwhile only marks it NOTIFIED, as
/// for any task whose await_suspend runs), and switches out only when it
/// really suspended: a channel hand-off, an uncontended lock or a permit
/// costs no switch. Other awaiters' await_suspend runs on the root's side.
template <class Aw>
concept wakes_through_scheduler = requires {
  typename Aw::wakes_through_scheduler;
};

/// The op of a fiber whose awaiter already suspended (see above): the root
/// only suspends.
[[nodiscard]] fiber_await_op& suspended_op() noexcept;

template <class Aw>
std::coroutine_handle<> fiber_suspend_thunk(fiber_await_op* op,
                                            std::coroutine_handle<> root) noexcept {
  Aw& aw = *static_cast<Aw*>(op->awaiter);
  try {
    using result = decltype(aw.await_suspend(root));
    if constexpr (std::is_void_v<result>) {
      aw.await_suspend(root);
      return std::noop_coroutine();
    } else if constexpr (std::is_same_v<result, bool>) {
      return aw.await_suspend(root) ? std::noop_coroutine() : root;
    } else {
      return aw.await_suspend(root);
    }
  } catch (...) {
    op->error = std::current_exception();
    return root;
  }
}

/// What the root coroutine co_awaits for the fiber: the fiber's awaiter,
/// type-erased. await_resume is empty: the fiber calls the real one.
struct erased_fiber_await {
  fiber_await_op* op;
  bool await_ready() const noexcept { return false; }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> root) const noexcept {
    return op->suspend(op, root);
  }
  void await_resume() const noexcept {}
};

/// The callable and the result slot of a fiber; `entry` runs on the stack.
template <class R, class F>
struct fiber_body {
  F fn;
  std::conditional_t<std::is_void_v<R>, bool, std::optional<R>> result{};
  std::exception_ptr error{};

  explicit fiber_body(F&& f) : fn(std::move(f)) {}

  static void entry(void* self) noexcept {
    auto* body = static_cast<fiber_body*>(self);
    try {
      if constexpr (std::is_void_v<R>) {
        std::invoke(std::move(body->fn));
      } else {
        body->result.emplace(std::invoke(std::move(body->fn)));
      }
    } catch (...) {
      body->error = std::current_exception();
    }
  }

  R take() {
    if (error) std::rethrow_exception(std::exchange(error, nullptr));
    if constexpr (!std::is_void_v<R>) return std::move(*result);
  }
};

/// The root coroutine of a fiber: a task like any other, whose polls run
/// the fiber and whose awaits are the fiber's. Destroying its frame while
/// the fiber is suspended unwinds the fiber (fiber_context's destructor).
template <class R, class F>
SPINDLE_COROUTINE_TEMPLATE task<R> fiber_root(F fn, std::size_t stack_bytes) {
  fiber_body<R, F> body{std::move(fn)};
  fiber_context fiber{fiber_stack::allocate(stack_bytes), &fiber_body<R, F>::entry, &body};
  while (fiber_await_op* op = fiber.resume())
    co_await erased_fiber_await{op};
  co_return body.take();
}

template <class F>
using fiber_result_t = std::invoke_result_t<std::decay_t<F>>;

template <class F>
join_handle<fiber_result_t<F>> spawn_fiber_on(scheduler* sched, F&& fn, fiber_options opts) {
  using R = fiber_result_t<F>;
  static_assert(!std::is_reference_v<R>,
                "spindle::spawn_fiber: fn must return a value, not a reference");
  std::size_t const stack_bytes = fiber_stack::checked_size(opts.stack_size);
  auto frame =
      fiber_root<R, std::decay_t<F>>(std::decay_t<F>(std::forward<F>(fn)), stack_bytes).release();
  return join_handle<R>{spawn_root(sched, frame, &frame.promise())};
}

}  // namespace detail

/// Spawns `fn` as a fiber on the runtime of the calling thread (a worker, a
/// fiber, or a thread inside block_on); `fn` is moved (or copied) into the
/// fiber and invoked once as an rvalue. Returns the join handle of its
/// result. Throws std::system_error: operation_not_permitted outside a
/// runtime, invalid_argument for a stack below 16 KiB (a stack that cannot
/// be mapped when the fiber first runs fails the fiber instead:
/// not_enough_memory from its join handle).
template <class F>
requires std::invocable<std::decay_t<F>> join_handle<detail::fiber_result_t<F>> spawn_fiber(
    F&& fn, fiber_options opts = {}) {
  detail::scheduler* sched = detail::current_scheduler();
  if (sched == nullptr) {
    throw std::system_error(std::make_error_code(std::errc::operation_not_permitted),
                            "spindle::spawn_fiber called outside a spindle runtime");
  }
  return detail::spawn_fiber_on(sched, std::forward<F>(fn), opts);
}

template <class F>
requires std::invocable<std::decay_t<F>> join_handle<std::invoke_result_t<std::decay_t<F>>>
runtime::spawn_fiber(F&& fn, fiber_options opts) {
  return detail::spawn_fiber_on(sched_.get(), std::forward<F>(fn), opts);
}

template <class F>
requires std::invocable<std::decay_t<F>> join_handle<std::invoke_result_t<std::decay_t<F>>>
runtime::spawn_fiber(F&& fn) {
  return detail::spawn_fiber_on(sched_.get(), std::forward<F>(fn), fiber_options{});
}

namespace this_fiber {

/// True on a fiber's stack.
[[nodiscard]] inline bool in_fiber() noexcept {
  return detail::current_fiber() != nullptr;
}

/// Suspends the calling fiber (not its worker) until `a` completes; returns
/// its result or rethrows its exception. Throws task_cancelled once the
/// fiber is cancelled (see the file comment), and
/// std::system_error(operation_not_permitted) outside a fiber. `a` (or its
/// awaiter) lives on the fiber's stack for the whole wait.
template <class A>
decltype(auto) await(A&& a) {
  detail::fiber_context* self = detail::current_fiber();
  if (self == nullptr) detail::throw_outside_fiber("spindle::this_fiber::await outside a fiber");
  if (self->cancelling()) throw task_cancelled{};
  auto&& aw = detail::get_awaiter(std::forward<A>(a));
  using awaiter_t = std::remove_reference_t<decltype(aw)>;
  if (!aw.await_ready()) {
    using suspend_result = decltype(aw.await_suspend(std::coroutine_handle<>{}));
    if constexpr (detail::wakes_through_scheduler<awaiter_t> &&
                  (std::is_void_v<suspend_result> || std::is_same_v<suspend_result, bool>)) {
      std::coroutine_handle<> root = self->root();
      bool suspended = true;
      if constexpr (std::is_void_v<suspend_result>) {
        aw.await_suspend(root);
      } else {
        suspended = aw.await_suspend(root);
      }
      if (suspended) self->suspend(detail::suspended_op());
    } else {
      detail::fiber_await_op op{static_cast<void*>(std::addressof(aw)),
                                &detail::fiber_suspend_thunk<awaiter_t>};
      self->suspend(op);
    }
  }
  return aw.await_resume();
}

/// Lets other tasks and fibers run: the fiber goes to the back of its
/// worker's run queue (as yield_now for a task).
inline void yield() {
  detail::fiber_yield();
}

/// Suspends the calling fiber for at least `d` (the timer's resolution is
/// 1 ms, rounded up); zero or negative returns at once (after the
/// cancellation check).
inline void sleep_for(std::chrono::nanoseconds d) {
  if (!in_fiber()) detail::throw_outside_fiber("spindle::this_fiber::sleep_for outside a fiber");
  await(spindle::sleep_for(d));
}

}  // namespace this_fiber

}  // namespace spindle
