// spindle::task<T>: the lazy coroutine type of spindle.
//
// Shape: a move-only owner of one coroutine frame. The coroutine does not run
// when created; it starts when it is awaited (`co_await t` runs it inline with
// symmetric transfer and yields its T or rethrows its exception) or when it is
// handed to spawn()/block_on(). Dropping a task that never ran destroys its
// frame without running it.
//
// Frames come from per-thread recycling pools (detail/frame_pool.hpp), each
// with room for a task header in front of it, used when the task is spawned.
// Coroutine functions should take parameters by value: a lazy task outlives
// the temporaries of the expression that created it.
//
// Thread-safety: a task object is not shared; one thread at a time uses it.
// Design source: cppcoro's task<T> (lazy start, symmetric transfer through
// final_suspend), libfork's split of promise internals under detail/.
#pragma once

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "spindle/detail/frame_pool.hpp"

/// Put on coroutine templates in headers (external linkage). clang's
/// -fsanitize=function (part of -fsanitize=undefined) fails to compile them
/// with clang 14 ("error: Cannot represent a difference across sections":
/// its prologue data refers across the comdat sections of the split
/// coroutine); those coroutines opt out of that one check. Only coroutines
/// need it; other code keeps the check.
#if defined(__clang__)
#define SPINDLE_COROUTINE_TEMPLATE [[clang::no_sanitize("function")]]
#else
#define SPINDLE_COROUTINE_TEMPLATE
#endif

namespace spindle {

template <class T = void>
class task;

namespace detail {

/// The part of every task promise that the scheduler sees: one word,
/// `link_`, that holds the continuation to transfer to at final_suspend
/// (null for a spawned root) until the task fails, and then a box with the
/// continuation and the exception (allocated from the frame pools on the
/// exception path only). One word instead of a continuation and an
/// exception_ptr side by side: 8 bytes less in every frame (the memory
/// benchmark's parked task: 56 -> 48 bytes, a 112-byte task with its
/// header). The word stays inside the frame: clang elides the allocation of
/// an awaited frame (its frame then lives inside its caller's, with no
/// header room in front), so nothing of an awaited frame may live outside
/// it. When even the box cannot be allocated, the task reports
/// std::bad_alloc (lost_task_exception) instead of its own exception.
class promise_base {
 public:
  // Every frame gets room for a task header in front (see task_header.hpp).
  static void* operator new(std::size_t bytes) { return task_frame_allocate(bytes); }
  static void operator delete(void* frame, std::size_t bytes) noexcept {
    task_frame_deallocate(frame, bytes);
  }

  promise_base() noexcept = default;
  promise_base(promise_base const&) = delete;
  promise_base& operator=(promise_base const&) = delete;
  ~promise_base() {
    if ((link_ & boxed) != 0) drop_box();
  }

  std::suspend_always initial_suspend() const noexcept { return {}; }

  struct final_awaiter {
    bool await_ready() const noexcept { return false; }
    template <class Promise>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> self) noexcept {
      std::coroutine_handle<> next = self.promise().continuation();
      return next ? next : std::noop_coroutine();
    }
    void await_resume() const noexcept {}
  };
  final_awaiter final_suspend() const noexcept { return {}; }

  void unhandled_exception() noexcept {
    void* mem = nullptr;
    try {
      mem = frame_allocate(sizeof(failure));
    } catch (...) {
      // No memory for the box: the task reports std::bad_alloc.
    }
    if (mem == nullptr) {
      link_ |= lost;
      return;
    }
    // Back in the coroutine's catch block: current_exception() is the task's.
    auto* f = ::new (mem) failure{continuation(), std::current_exception()};
    link_ = reinterpret_cast<std::uintptr_t>(f) | boxed;
  }

  void set_continuation(std::coroutine_handle<> next) noexcept {
    link_ = reinterpret_cast<std::uintptr_t>(next.address());
  }
  /// What final_suspend transfers to (null: back to whoever resumed it).
  [[nodiscard]] std::coroutine_handle<> continuation() const noexcept {
    if ((link_ & boxed) != 0) [[unlikely]]
      return box()->continuation;
    return std::coroutine_handle<>::from_address(reinterpret_cast<void*>(link_ & ~tag_bits));
  }
  [[nodiscard]] bool has_exception() const noexcept { return (link_ & tag_bits) != 0; }
  /// The stored exception (an empty one when there is none).
  [[nodiscard]] std::exception_ptr const& exception() const noexcept {
    if ((link_ & boxed) != 0) return box()->exception;
    if ((link_ & lost) != 0) return lost_task_exception();
    static std::exception_ptr const none{};
    return none;
  }

 protected:
  void rethrow_if_exception() {
    if ((link_ & tag_bits) != 0) [[unlikely]]
      rethrow_stored();
  }

 private:
  struct failure {
    std::coroutine_handle<> continuation;
    std::exception_ptr exception;
  };
  static constexpr std::uintptr_t boxed = 1;  ///< link_ points to a failure box
  static constexpr std::uintptr_t lost = 2;   ///< failed; no box: std::bad_alloc
  static constexpr std::uintptr_t tag_bits = boxed | lost;
  static_assert(alignof(failure) > tag_bits && alignof(std::max_align_t) > tag_bits);

  [[nodiscard]] failure* box() const noexcept {
    return reinterpret_cast<failure*>(link_ & ~tag_bits);
  }
  // Out of line: the common paths (final suspension, destruction) keep a
  // test and a call, and no registers for the box.
  [[gnu::noinline, gnu::cold]] void drop_box() noexcept {
    failure* f = box();
    f->~failure();
    frame_deallocate(f, sizeof(failure));
  }
  /// Rethrows the stored exception and clears it (has_exception() is false
  /// afterwards: the exception was taken).
  [[noreturn]] void rethrow_stored() {
    std::exception_ptr e = exception();
    if ((link_ & boxed) != 0) drop_box();
    link_ = 0;
    std::rethrow_exception(std::move(e));
  }

  std::uintptr_t link_ = 0;
};

template <class T>
class promise final : public promise_base {
 public:
  promise() noexcept {}
  promise(promise const&) = delete;
  ~promise() {
    if (has_value_) value_.~T();
  }

  task<T> get_return_object() noexcept;

  template <class U = T>
  requires std::is_constructible_v<T, U&&>
  void return_value(U&& value) noexcept(std::is_nothrow_constructible_v<T, U&&>) {
    ::new (static_cast<void*>(&value_)) T(std::forward<U>(value));
    has_value_ = true;
  }

  /// Moves the result out, or rethrows the stored exception.
  T take_result() {
    rethrow_if_exception();
    return std::move(value_);
  }

 private:
  union {
    T value_;
  };
  bool has_value_ = false;
};

template <>
class promise<void> final : public promise_base {
 public:
  task<void> get_return_object() noexcept;
  void return_void() const noexcept {}
  void take_result() { rethrow_if_exception(); }
};

}  // namespace detail

/// Lazy, move-only coroutine; `co_await` it to run it and get its T.
/// Nothing runs until it is awaited, spawned or given to block_on. One thread
/// at a time uses a task object. See the comment of spindle/task.hpp.
template <class T>
class [[nodiscard]] task {
 public:
  using promise_type = detail::promise<T>;  ///< the coroutine promise (internal)
  using value_type = T;                     ///< what `co_await` of the task yields

  /// An empty task (valid() is false).
  task() noexcept = default;
  /// Internal (the promise's get_return_object): owns `frame`.
  explicit task(std::coroutine_handle<promise_type> frame) noexcept : frame_(frame) {}
  /// Takes over `other`'s frame; `other` is left empty.
  task(task&& other) noexcept : frame_(std::exchange(other.frame_, {})) {}
  /// Destroys this task's frame (a task that never ran does not run), then
  /// takes over `other`'s.
  task& operator=(task&& other) noexcept {
    if (this != &other) {
      reset();
      frame_ = std::exchange(other.frame_, {});
    }
    return *this;
  }
  task(task const&) = delete;
  task& operator=(task const&) = delete;
  ~task() { reset(); }

  /// True when the task holds a coroutine frame.
  [[nodiscard]] bool valid() const noexcept { return static_cast<bool>(frame_); }
  /// True when the coroutine has run to completion.
  [[nodiscard]] bool done() const noexcept { return !frame_ || frame_.done(); }

  /// The awaiter of `co_await t`: starts the coroutine by symmetric transfer
  /// and resumes the caller when it finishes.
  struct awaiter {
    std::coroutine_handle<promise_type> frame;  ///< the task's frame (may be null)
    /// Awaiter protocol: true for an empty or finished task.
    bool await_ready() const noexcept { return !frame || frame.done(); }
    /// Awaiter protocol: runs the task, continuing with `caller` at its end.
    std::coroutine_handle<> await_suspend(std::coroutine_handle<> caller) noexcept {
      frame.promise().set_continuation(caller);
      return frame;
    }
    /// Awaiter protocol: the task's value, or its exception rethrown;
    /// std::invalid_argument for an empty task.
    T await_resume() {
      if (!frame) throw std::invalid_argument("spindle::task: awaiting an empty task");
      return frame.promise().take_result();
    }
  };
  /// Runs the task inline; yields its value or rethrows its exception.
  /// Awaiting an empty (moved-from) task throws std::invalid_argument.
  awaiter operator co_await() && noexcept { return awaiter{frame_}; }
  /// As `co_await std::move(t)`: the task object keeps its (finished) frame.
  awaiter operator co_await() & noexcept { return awaiter{frame_}; }

  /// Gives up ownership of the frame (used by spawn and block_on).
  [[nodiscard]] std::coroutine_handle<promise_type> release() noexcept {
    return std::exchange(frame_, {});
  }

 private:
  void reset() noexcept {
    if (frame_) std::exchange(frame_, {}).destroy();
  }
  std::coroutine_handle<promise_type> frame_{};
};

namespace detail {
template <class T>
task<T> promise<T>::get_return_object() noexcept {
  return task<T>{std::coroutine_handle<promise<T>>::from_promise(*this)};
}
inline task<void> promise<void>::get_return_object() noexcept {
  return task<void>{std::coroutine_handle<promise<void>>::from_promise(*this)};
}
}  // namespace detail

}  // namespace spindle
